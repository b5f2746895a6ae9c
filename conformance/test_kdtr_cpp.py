"""The C++ side of KDTR beyond what files drive: kdtr-test's unit checks of kdtr.hpp (host limit, I/O
errors, the writer's limits) and the kdtr-inspect tool itself (KDTR.5.1)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

import kdtr
from harness import tools

ROOT = tools.ROOT


def _binary(request, name):
    return tools.required_binary(request.config, name)


@pytest.mark.spec("KDTR.2.3", "KDTR.3.8")
@pytest.mark.parametrize("reader", ["cpp"])
def test_kdtr_hpp_unit_checks(request, reader, tmp_path):
    """Host limit with a source that claims 2^48 + 1 bytes, FileSource errors, every writer limit."""
    out = subprocess.run(
        [str(_binary(request, "kdtr-test")), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "checks passed" in out.stdout


@pytest.mark.spec("KDTR.4.3")
@pytest.mark.parametrize("reader", ["cpp"])
def test_error_code_names_agree(request, reader):
    out = subprocess.run([str(_binary(request, "kdtr-test")), "--codes"], capture_output=True, text=True, timeout=30)
    assert out.stdout.splitlines() == [f"{c.tag} {c.name}" for c in kdtr.Code]


@pytest.mark.spec("KDTR.5.1")
@pytest.mark.parametrize("reader", ["cpp"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_inspect_help(request, reader, flag):
    """--help documents every option, the output, the exit status and every error code."""
    out = subprocess.run([str(_binary(request, "kdtr-inspect")), flag], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stderr == ""
    text = out.stdout
    for words in ["usage: kdtr-inspect", "--no-verify", "--rewrite OUT", "Exit status", "FORMAT.md", '"ok": false']:
        assert words in text, words
    for c in kdtr.Code:
        if c is not kdtr.Code.NOT_FOUND:  # an API error of name lookup, never a file's
            assert f"{c.tag} {c.name}" in " ".join(text.split()), c


@pytest.mark.spec("KDTR.5.1")
@pytest.mark.parametrize("reader", ["cpp"])
@pytest.mark.parametrize(
    "args,why", [([], "no FILE given"), (["a", "b"], "more than one FILE"), (["--bogus", "a"], "unknown option")]
)
def test_inspect_usage_errors(request, reader, args, why):
    out = subprocess.run([str(_binary(request, "kdtr-inspect")), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and why in out.stderr and "usage:" in out.stderr


@pytest.mark.spec("KDTR.5.1")
@pytest.mark.parametrize("reader", ["cpp"])
def test_inspect_error_line_is_the_python_message(request, reader):
    p = ROOT / "kdtr" / "corpus" / "invalid" / "E11_trailing_bytes.kdtr"
    out = subprocess.run([str(_binary(request, "kdtr-inspect")), str(p)], capture_output=True, text=True, timeout=30)
    with pytest.raises(kdtr.KdtrError) as e:
        kdtr.load(p)
    assert out.returncode == 1
    assert out.stderr == f"kdtr-inspect: {p}: {e.value}\n"
    assert any(ch.isdigit() for ch in e.value.message)  # the sizes, not just a phrase


@pytest.mark.spec("KDTR.5.1")
@pytest.mark.parametrize("reader", ["cpp"])
def test_inspect_on_path_after_setup(request, reader):
    """`make setup` installs kdtr-inspect into .venv/bin: on PATH once the environment is activated."""
    _binary(request, "kdtr-inspect")
    built = ROOT / "build" / "kdtr" / "kdtr-inspect"  # what `make setup` built (not KDTREE_BUILD_DIR's)
    venv = ROOT / ".venv" / "bin"
    if not (venv / "activate").is_file():
        tools.missing(request.config, "no .venv: run `make setup`")
    out = subprocess.run(
        ["bash", "-c", ". .venv/bin/activate && command -v kdtr-inspect && kdtr-inspect --help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
    )
    assert out.returncode == 0, f"kdtr-inspect is not on PATH after `make setup`: {out.stderr}"
    found = out.stdout.splitlines()[0]
    assert os.path.samefile(found, venv / "kdtr-inspect")
    assert pathlib.Path(found).read_bytes() == built.read_bytes(), "the installed kdtr-inspect is not the one built"

"""One slug per op in every layer, the lab's README and the tools row name what is there, every `python -m` command
names a module, and nothing patches sys.path (the guards against README/tree drift; the README's paths and folder
map: meta/test_readme_paths.py)."""

import pathlib
import re

import pytest

from harness.impls import OPS
from kdtr import gen_corpus

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = {
    "reference": "reference/{op}.py",
    "spec": "spec/{op}.md",
    "conformance": "conformance/test_{op}.py",
    "perf": "perf/bench_{op}.py",
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_op_has_every_layer(op, layer):
    assert (ROOT / LAYERS[layer].format(op=op)).is_file(), f"{LAYERS[layer].format(op=op)} is missing"


@pytest.mark.parametrize("op", ["tree_build", "tree_accept"])
def test_kernel_source_exists(op):
    assert (ROOT / "kernels_cu" / f"{op}.cu").is_file()


def test_kdtr_corpus_is_fresh():
    """The committed golden KDTR files are exactly what kdtr/gen_corpus.py makes (make corpus)."""
    for rel, data in gen_corpus.generate().items():
        p = ROOT / "kdtr" / "corpus" / rel
        assert p.is_file() and p.read_bytes() == data, f"kdtr/corpus/{rel} is stale: run `make corpus`"


def _names_in_backticks(text: str) -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", text))


def test_the_lab_readme_names_every_entry_of_the_lab():
    """lab/README.md has a row per script, repro and note in lab/ (what question it answers, how to run it)."""
    named = _names_in_backticks((ROOT / "lab" / "README.md").read_text())
    entries = [p for p in sorted((ROOT / "lab").rglob("*")) if p.is_file() and p.suffix in (".py", ".sh", ".cu", ".md")]
    entries = [str(p.relative_to(ROOT / "lab")) for p in entries if p.name not in ("__init__.py", "README.md")]
    assert len(entries) >= 8, entries
    assert [e for e in entries if e not in named] == []


def test_the_readme_lists_every_tool():
    """tools/ keeps what a user or the GPU job runs, and the README's folder map lists each of them."""
    row = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `tools/` |"))
    tools = sorted(p.name for p in (ROOT / "tools").iterdir() if p.is_file() and p.name != "__init__.py")
    assert len(tools) >= 9, tools
    assert [t for t in tools if f"`{t}`" not in row] == []


# where the project's commands are written down: every `python -m MODULE` there must name a module of the project
COMMAND_FILES = ["Makefile", "README.md", ".pre-commit-config.yaml", "tools/*.sh", "lab/*.sh", "lab/*.md", "docs/*.md"]
PACKAGES = ("tools", "lab", "contract", "kernels_cu", "kdtr", "harness", "reference")


def test_every_python_m_command_names_a_module():
    """A moved or renamed module breaks the commands that run it (make targets, the GPU job, the docs); the
    Python entry points all run as `python -m PACKAGE.MODULE` from the repository root."""
    command = re.compile(rf"-m ((?:{'|'.join(PACKAGES)})(?:\.[a-z0-9_]+)+)")  # lower case: `lab.NAME` is a placeholder
    found = {m for pattern in COMMAND_FILES for path in ROOT.glob(pattern) for m in command.findall(path.read_text())}
    assert len(found) >= 15, sorted(found)
    assert [m for m in sorted(found) if not (ROOT / (m.replace(".", "/") + ".py")).is_file()] == []


def test_nothing_patches_sys_path_or_loads_a_file_by_path():
    """Project code imports the project as packages (pytest.ini's pythonpath, `python -m` from the root, or the
    installed project); a sys.path patch or a module loaded from a file path hides a wrong layout."""
    needles = ("sys.path." + "insert", "sys.path." + "append", "spec_from_file_" + "location")
    skip = {".venv", "build", ".git", "examples"}
    files = [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]
    assert len(files) > 100, len(files)
    assert [f"{p.relative_to(ROOT)}: {n}" for p in files for n in needles if n in p.read_text()] == []

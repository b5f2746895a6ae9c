"""The environment variables are KDTREE_* (issue 28, item 7): an old KDTR_ name still set stops the run with a
message naming old and new, and no source file reads an old name (harness/env_names.py lists them)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from harness import env_names

ROOT = pathlib.Path(__file__).resolve().parent.parent
# the files that list the old names on purpose: the table of renames and this test
LISTS_OLD_NAMES = {"harness/env_names.py", "meta/test_env_names.py"}
SOURCES = ("*.py", "*.sh", "Makefile", "*.yml", "*.yaml", "*.toml", "*.ini", "*.cfg", "*.txt", "*.cmake", "*.md")
SOURCES += ("*.cpp", "*.hpp", "*.h", "*.cu", "*.cuh", ".ci/*")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in env_names.RENAMED}


def test_every_rename_is_kdtr_to_kdtree():
    assert len(env_names.RENAMED) >= 12
    for old, new in env_names.RENAMED.items():
        assert old.startswith("KDTR_") and new == "KDTREE_" + old.removeprefix("KDTR_")


def test_an_old_name_set_fails_naming_old_and_new():
    env = {**_clean_env(), "KDTR_CACHE_DIR": "/tmp/x", "KDTR_PERF_QUICK": "1"}
    assert env_names.stale(env) == [("KDTR_CACHE_DIR", "KDTREE_CACHE_DIR"), ("KDTR_PERF_QUICK", "KDTREE_PERF_QUICK")]
    with pytest.raises(env_names.OldEnvironmentName) as e:
        env_names.check(env)
    for name in ("KDTR_CACHE_DIR", "KDTREE_CACHE_DIR", "KDTR_PERF_QUICK", "KDTREE_PERF_QUICK"):
        assert name in str(e.value)
    env_names.check(_clean_env())  # the new names alone pass
    env_names.check({**_clean_env(), "KDTREE_CACHE_DIR": "/tmp/x"})


def test_the_module_exits_nonzero_with_the_message():
    """What tools/gpu_suite.sh and tools/sm120_certify.sh run before anything else."""
    cmd = [sys.executable, "-m", "harness.env_names"]
    bad = subprocess.run(cmd, cwd=ROOT, env={**_clean_env(), "KDTR_STAGE_TIMEOUT": "9"}, capture_output=True, text=True)
    assert bad.returncode == 1 and "KDTR_STAGE_TIMEOUT" in bad.stderr and "KDTREE_STAGE_TIMEOUT" in bad.stderr
    good = subprocess.run(cmd, cwd=ROOT, env=_clean_env(), capture_output=True, text=True)
    assert good.returncode == 0 and good.stderr == ""


def test_pytest_stops_on_an_old_name(tmp_path):
    """The root conftest checks before collecting: a usage error naming both, not a silently ignored setting."""
    env = {**_clean_env(), "KDTR_GPUS": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "meta/test_env_names.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    assert "KDTR_GPUS" in r.stderr + r.stdout and "KDTREE_GPUS" in r.stderr + r.stdout


def test_the_gpu_scripts_run_the_check_first():
    for script in ("tools/gpu_suite.sh", "tools/sm120_certify.sh"):
        lines = (ROOT / script).read_text().splitlines()
        check = next(i for i, line in enumerate(lines) if "-m harness.env_names" in line)
        first_read = next(i for i, line in enumerate(lines) if "${KDTREE_" in line)
        assert check < first_read, f"{script}: the check comes after the first KDTREE_ variable is read"
        assert "exit" in lines[check], script


def _tracked(patterns: tuple[str, ...]) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *patterns], cwd=ROOT, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def old_names_in(text: str) -> list[str]:
    """The old environment names (harness/env_names.RENAMED) text mentions, as whole words."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, env_names.RENAMED)) + r")\b")
    return sorted(set(pattern.findall(text)))


def test_old_names_in_finds_whole_names_only():
    assert old_names_in('os.environ.get("KDTR_CACHE_DIR")') == ["KDTR_CACHE_DIR"]
    assert old_names_in("LIMIT=${KDTR_STAGE_TIMEOUT:-570}; KDTR_GPUS=$g run") == ["KDTR_GPUS", "KDTR_STAGE_TIMEOUT"]
    # the kernels' macros, the format's names and the new names are not old environment names
    assert old_names_in("#define KDTR_TB_SELECT 1; KDTR_SMEM_BUDGET; -DKDTR_FUZZ=ON; KDTREE_CACHE_DIR; kdtr") == []


def test_no_source_reads_an_old_name():
    """No tracked source, script, workflow or document names an old KDTR_ environment variable (reports/ too:
    the kept runs' commands are written with the new names; the removed runs keep theirs in git history). The C/CUDA
    macros (KDTR_TB_*, KDTR_SMEM_BUDGET, KDTR_MAX_*) and the format's CMake options (KDTR_FUZZ, KDTR_COVERAGE) are
    not environment variables and are not in the list."""
    files = [p for p in _tracked(SOURCES) if p not in LISTS_OLD_NAMES]
    assert len(files) > 150, len(files)
    found = {p: old_names_in((ROOT / p).read_text(errors="replace")) for p in files}
    assert {p: names for p, names in found.items() if names} == {}

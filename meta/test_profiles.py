"""The budget profiles (harness/profiles.py): the quick one `make conformance` runs by default keeps a test of
every clause for every implementation, leaves the long cases to GPU implementations only and says so in the
report; every other profile, and `make test`, keeps the full budgets."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from harness import impls, profiles, spec

ROOT = pathlib.Path(__file__).resolve().parent.parent
DROP = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "HYPOTHESIS_PROFILE", "CI", "PROFILE")
DROP += ("KDTREE_FUZZ_SECONDS",)
DROP += ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # run from make itself: its command-line variables pass on


def _env(**extra) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in DROP}, **extra}


@pytest.mark.parametrize("n,want", [(10, 5), (30, 10), (100, 20), (200, 40), (2000, 400)])
def test_heavy_properties_get_a_fifth_and_at_least_10_outside_quick(n, want):
    assert profiles.heavy_examples(n) == want


def test_fuzz_runs_are_shorter_only_in_quick(monkeypatch):
    monkeypatch.delenv("KDTREE_FUZZ_SECONDS", raising=False)
    assert [profiles.fuzz_seconds(p) for p in ("quick", "dev", "ci", "thorough")] == [10, 60, 60, 60]
    monkeypatch.setenv("KDTREE_FUZZ_SECONDS", "5")
    assert profiles.fuzz_seconds("ci") == 5


def test_only_quick_leaves_out_full_cases_and_only_off_the_gpu():
    assert profiles.left_out(True, False, "quick") == profiles.FULL_CASE
    assert profiles.left_out(True, True, "quick") is None  # a GPU implementation runs every case
    assert profiles.left_out(False, False, "quick") is None
    assert all(profiles.left_out(True, False, p) is None for p in ("dev", "ci", "thorough"))


DUMP = """
import json, os
def pytest_collection_finish(session):
    rows = []
    for i in session.items:
        params = i.callspec.params if hasattr(i, "callspec") else {}
        rows.append({"id": i.nodeid, "spec": [c for m in i.iter_markers("spec") for c in m.args],
                     "dtype": str(params["dtype"]) if "dtype" in params else None,
                     "impl": params.get("impl", params.get("reader", "-")),
                     "full": i.get_closest_marker("full") is not None})
    with open(os.environ["KDTREE_DUMP"], "w") as f:
        json.dump(rows, f)
"""


def test_quick_keeps_a_test_of_every_clause_for_every_implementation(tmp_path):
    """Every (clause, implementation) pair a conformance test checks keeps a test the quick profile runs: a
    report row never loses all its tests to the profile."""
    (tmp_path / "kdtr_quick_dump.py").write_text(DUMP)
    env = _env(
        KDTREE_DUMP=str(tmp_path / "items.json"), PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "--collect-only", "-q", "-p", "kdtr_quick_dump",
         "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    items = json.loads((tmp_path / "items.json").read_text())
    every, quick = set(), set()
    for i in items:
        pairs = {(c, i["impl"]) for c in spec.for_dtype(i["spec"], i["dtype"])}
        every |= pairs
        on_gpu = i["impl"] != "-" and impls.on_gpu(i["impl"])
        if profiles.left_out(i["full"], on_gpu, profiles.QUICK) is None:
            quick |= pairs
    assert any(i["full"] for i in items), "no case is marked full: the quick profile leaves nothing out"
    assert every - quick == set(), f"rows the quick profile would leave without a test: {sorted(every - quick)}"


def test_quick_skips_a_full_case_with_the_reason_and_the_report_says_quick(tmp_path):
    """The 6 GiB refusal (a `full` case of no implementation) skips under quick before it builds anything, and
    the report's header states the profile and what it reduced."""
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance/test_engine_files.py", "-k", "huge_op_file and tree_verify",
         "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", "--report-dir", str(tmp_path)],
        cwd=ROOT, env=_env(HYPOTHESIS_PROFILE="quick"), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert profiles.FULL_CASE in r.stdout, r.stdout[-3000:]
    report = (tmp_path / "conformance.md").read_text()
    assert "| hypothesis_profile | quick |" in report and "Quick profile: reduced budgets" in report


@pytest.mark.parametrize(
    "target,env,want",
    [
        (["conformance"], {}, "quick"),
        (["conformance", "PROFILE=ci"], {}, "ci"),
        (["conformance"], {"CI": "true"}, "ci"),
        (["conformance"], {"HYPOTHESIS_PROFILE": "dev"}, "dev"),
        (["test"], {}, "ci"),
        (["test"], {"CI": "true"}, "ci"),
    ],
)
def test_make_targets_pick_their_profile(target, env, want):
    """make conformance: quick unless told (PROFILE, HYPOTHESIS_PROFILE, CI); make test: ci, CI's budgets."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    r = subprocess.run([make, "-n", *target], cwd=ROOT, env=_env(**env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    runs = [ln for ln in r.stdout.splitlines() if "-m pytest" in ln]
    assert runs and all(ln.startswith(f"HYPOTHESIS_PROFILE={want} ") for ln in runs), r.stdout

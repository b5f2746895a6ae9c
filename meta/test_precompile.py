"""tools.precompile fills the cubin cache a GPU run carries: the cubins land where the run will look, a build that fails
is named and fails the tool, and a design's builds are the race's own (the same specs, so the same cache keys)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

from kernels_cu import specs
from tools import precompile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _run(cache: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KDTREE_CACHE_DIR": str(cache)}
    env.pop("KDTREE_DISABLE_CACHE", None)
    return subprocess.run([sys.executable, "-m", "tools.precompile", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_fills_the_cache_and_a_second_run_finds_it(tmp_path):
    first = _run(tmp_path, "--ops", "tree_accept", "--arch", "sm_90")
    assert first.returncode == 0, first.stderr
    n = len([s for s in specs.for_op("tree_accept") for a in s.archs if a.startswith("sm_90")])
    assert f"{n} builds" in first.stdout and f"{n} compiled" in first.stdout, first.stdout
    assert len(list(tmp_path.rglob("*.cubin"))) == n
    again = _run(tmp_path, "--ops", "tree_accept", "--arch", "sm_90")
    assert again.returncode == 0 and f"0 compiled, {n} already cached" in again.stdout, again.stdout


def test_a_failing_build_is_named():
    good = specs.get("tree_accept", specs.for_op("tree_accept")[0].variant)
    bad = dataclasses.replace(good, patches=(("text that no kernel source holds", "x"),))
    fresh, cached, failed = precompile.compile_all([(good, "sm_90"), (bad, "sm_90")])
    assert fresh + cached == 1 and len(failed) == 1 and bad.name in failed[0], failed


def test_an_unknown_op_is_refused(tmp_path):
    proc = _run(tmp_path, "--ops", "tree_verfy")
    assert proc.returncode == 2 and "--ops" in proc.stderr and "tree_verfy" in proc.stderr


def test_design_builds_are_the_races():
    from lab import tree_verify_race as race

    race.DESIGNS.clear()
    race.DESIGNS["x"] = {"TV90_STSM_P": "1"}
    try:
        raced = {s for name, s in race.builds().items() if "+" in name}
    finally:
        race.DESIGNS.clear()
    cached = {s for s, _ in precompile.builds(ops=set(), archs=["sm_90a"], designs=[("x", {"TV90_STSM_P": "1"})])}
    assert cached == raced and len(raced) == 2

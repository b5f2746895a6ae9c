"""The perf suite as a user runs it: `pytest perf --benchmark-json FILE` writes the file with the cases that
ran (on a CPU-only machine: the CPU builders and small reference cases, GPU cases skipped with the reason),
every case record follows the schema, stages and the quick grid select what they say, and a benchmark JSON
asked for under xdist is a usage error instead of a silently missing file."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from harness import device, tools
from harness.bench import Unavailable, cpp_builder, cpu_builders, record, stages

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pytest(*args, tmp_path, env=None):
    drop = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "KDTREE_PERF_STAGE", "KDTREE_PERF_QUICK")
    # this test may itself run under xdist (the child must not think it is a worker) or inside a perf stage
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "--report-dir", str(tmp_path / "r")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_benchmark_json_written_as_typed(tmp_path):
    """The literal command (no -n, no -p flags): the JSON exists and holds the cases that ran here."""
    out = tmp_path / "out.json"
    env = {"KDTREE_PERF_BUDGET_S": "0.05"}
    if device.probe().ok:  # on a GPU the whole suite takes an hour: the same command, restricted by environment
        env.update(KDTREE_PERF_STAGE="gate", KDTREE_PERF_NO_COMPARATORS="1")
    r = _pytest("perf", "--benchmark-json", str(out), "-rs", tmp_path=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    data = json.loads(out.read_text())
    ran = {b["name"].split("[")[0] for b in data["benchmarks"]}
    want = {"test_tree_build"} if device.probe().ok else {"test_tree_build_cpu", "test_tree_accept_walk_cpu",
                                                          "test_tree_verify_numpy_reference"}  # fmt: skip
    assert want <= ran, ran
    for b in data["benchmarks"]:
        assert record.problems(b["extra_info"]) == [], (b["name"], record.problems(b["extra_info"]))
    m = data["machine_info"]
    assert {"gpu", "git_revision", "packages"} <= set(m) and "numpy" in m["packages"]
    assert data["kdtr"]["command"].startswith("pytest perf --benchmark-json")
    if not device.probe().ok:  # CPU-only: GPU cases are skipped with the reason, not silently absent
        assert "GPU unavailable" in r.stdout
        assert not [b for b in data["benchmarks"] if b["extra_info"]["impl"] == "cuda"]


def test_benchmark_json_under_xdist_is_a_usage_error(tmp_path):
    r = _pytest("perf", "-n", "2", "--benchmark-json", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert r.returncode == 4 and "writes no file" in r.stderr, r.stderr[-2000:]


def test_unknown_stage_is_a_usage_error(tmp_path):
    r = _pytest("perf", "--perf-stage", "nope", "--collect-only", "-q", tmp_path=tmp_path)
    assert r.returncode == 4 and "not one of" in r.stderr


DUMP = """
import json, os
def pytest_collection_finish(session):
    rows = [{"id": i.nodeid, "perf": i.get_closest_marker("perf") is not None,
             "stages": sorted({n for m in i.iter_markers("perf_stage") for n in m.args}),
             "full": i.get_closest_marker("perf_full") is not None} for i in session.items]
    with open(os.environ["KDTREE_DUMP"], "w") as f:
        json.dump(rows, f)
"""


@pytest.fixture(scope="module")
def perf_items(tmp_path_factory):
    """Every perf case with its stage names and perf_full flag, from one collection."""
    d = tmp_path_factory.mktemp("dump")
    (d / "kdtr_stage_dump.py").write_text(DUMP)
    env = {"KDTREE_DUMP": str(d / "items.json"), "PYTHONPATH": f"{d}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = _pytest("perf", "--collect-only", "-q", "-p", "kdtr_stage_dump", tmp_path=d, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return json.loads((d / "items.json").read_text())


def _in(items, stage, quick=False):
    return {i["id"] for i in items if stages.selected(set(i["stages"]), i["full"], stage=stage, quick=quick)}


def test_stages_partition_the_suite(perf_items):
    every = {i["id"] for i in perf_items}
    per_stage = {s: _in(perf_items, s) for s in stages.STAGES if s != "gate"}
    ceilings = {n for n in every if "bench_ceilings" in n}
    assert ceilings and all(ceilings <= ids for ids in per_stage.values()), "the ceilings run in every stage"
    union = set().union(*per_stage.values())
    assert union == every, f"cases in no stage: {sorted(every - union)[:5]}"
    h64, h128 = per_stage["verify_h64"] - ceilings, per_stage["verify_h128"] - ceilings
    from kernels_cu import specs

    # perf/bench_tree_verify.py times these: the default selection and the planned mode
    timed = [s for s in specs.for_op("tree_verify") if s.default or not s.batch_invariant]
    assert len(h64) == len(h128) == 80 * len(timed)
    assert all("H64-" in n for n in h64) and all("H128-" in n for n in h128)
    from harness.bench import targets

    assert {n.split("::")[-1] for n in _in(perf_items, "gate") - ceilings} == {
        f"test_tree_build[bs{bs}-B{B}-{v}]"
        for bs, B in [(1, 16), (64, 16), (1, 64), (64, 64), (16, 256)]
        for v in targets.variants("tree_build")
    }
    # the fallback gate's runs: two cells (the non-select variants are collected there and skip themselves)
    assert {n.split("::")[-1] for n in _in(perf_items, "gate_fallback") - ceilings} == {
        f"test_tree_build[bs{bs}-B{B}-{v}]" for bs, B in [(1, 64), (16, 256)] for v in targets.variants("tree_build")
    }


def test_quick_grid_is_smaller(perf_items):
    full, quick = _in(perf_items, "verify_h64"), _in(perf_items, "verify_h64", quick=True)
    assert 0 < len(quick) < len(full) / 4


def test_stage_option_deselects(tmp_path):
    """The command-line wiring of the rule above: --perf-stage gate --perf-quick collects the gate's cases."""
    r = _pytest("perf", "--collect-only", "-q", "--perf-stage", "gate", "--perf-quick", tmp_path=tmp_path)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    assert r.returncode == 0 and ids and all("bench_ceilings" in n or "test_tree_build[" in n for n in ids), ids
    assert "deselected" in r.stdout


def test_stage_selection_rule():
    assert stages.selected(set(), False, stage="build", quick=False)  # no marker: every stage
    assert stages.selected({"build", "gate"}, False, stage="gate", quick=False)
    assert not stages.selected({"build"}, False, stage="verify_h64", quick=False)
    assert not stages.selected({"build"}, True, stage=None, quick=True)
    with pytest.raises(ValueError):
        stages.check("verify")


def test_record_schema():
    t = {"median_us": 10.0, "p10_us": 9.0, "p90_us": 11.0, "rel_spread": 0.2, "n": 5, "where": "device",
         "method": "x"}  # fmt: skip
    cmp_t = {**t, "median_us": 1000.0, "where": "host"}
    info = record.build(
        op="tree_verify", impl="cuda", shape={"H": 64}, time=t, bytes_moved=10**6, flops=10**9,
        ceilings={"copy_gbs": 1000.0, "read_gbs": 400.0, "bf16_tflops": 500.0},
        comparators={"a": record.comparator(cmp_t), "b": record.comparator(error="out of memory: 3 GiB")},
    )  # fmt: skip
    assert record.problems(info) == []
    assert info["gbs"] == pytest.approx(100.0) and info["tflops"] == pytest.approx(100.0)
    assert info["fraction"] == {"copy": pytest.approx(0.1), "read": pytest.approx(0.25), "bf16": pytest.approx(0.2)}
    assert info["speedups"] == {"a": pytest.approx(100.0)}
    bad = {**info, "time": {"median_us": 1.0}, "speedups": {"b": 2.0}}
    assert any("time lacks" in p for p in record.problems(bad))
    assert any("speedup over 'b'" in p for p in record.problems(bad))
    with pytest.raises(ValueError):
        record.comparator(t, error="both")


def test_record_schema_of_fallback_rates():
    """A select variant's `fallback` (record.py's documentation): counts and rate agree, a launch without a selection
    has a null rate and says why, and a record that breaks either is named by problems()."""
    t = {"median_us": 10.0, "p10_us": 9.0, "p90_us": 11.0, "rel_spread": 0.2, "n": 5, "where": "device",
         "method": "x"}  # fmt: skip
    fb = {"drafter": record.fallback(64, checks_failed=1), "adversarial": record.fallback(64, overflowed=64)}
    info = record.build(op="tree_build", impl="cuda:select_warp", shape={"bs": 64}, time=t, fallback=fb)
    assert record.problems(info) == []
    assert info["fallback"]["drafter"] == {"requests": 64, "checks_failed": 1, "overflowed": 0, "replayed": 1,
                                           "rate": 1 / 64}  # fmt: skip
    assert info["fallback"]["adversarial"]["rate"] == 1.0
    off = record.fallback(64, no_selection="the launch runs lane_cached's build")
    assert off == {"requests": 64, "rate": None, "no_selection": "the launch runs lane_cached's build"}
    info2 = record.build(op="tree_build", impl="cuda:select_race", shape={"bs": 64}, time=t, fallback={"drafter": off})
    assert record.problems(info2) == [] and record.fallback_rates(info2) == {}
    assert "fallback" not in record.build(op="tree_build", impl="cuda:lane_cached", shape={"bs": 1}, time=t)
    bad = json.loads(json.dumps(info))
    bad["fallback"]["drafter"]["rate"] = 0.0  # a rate that its counts do not give
    bad["fallback"]["adversarial"] = {"requests": 64, "rate": None}  # null without a reason
    found = record.problems(bad)
    assert any("'drafter'" in p and "not rate" in p for p in found), found
    assert any("'adversarial'" in p and "no_selection" in p for p in found), found
    for kw in ({"checks_failed": 65}, {"overflowed": -1}, {"checks_failed": 1, "no_selection": "x"}):
        with pytest.raises(ValueError):
            record.fallback(64, **kw)


def test_cpp_builder_hook_says_not_built(monkeypatch, tmp_path):
    monkeypatch.setitem(tools.LIBRARIES, "kdtree_cpu", tmp_path / "missing.so")
    cpp_builder.load.cache_clear()
    try:
        with pytest.raises(Unavailable, match=r"C\+\+ builder: libkdtree_cpu.so is not built"):
            cpu_builders.BUILDERS["cpp_1t"](np.zeros((1, 1, 1), np.float32), None, None, 1, None)
    finally:
        cpp_builder.load.cache_clear()


def test_every_builder_is_registered_with_a_note():
    assert {"python_heapq", "cpp_1t", "cpp_mt"} <= set(cpu_builders.BUILDERS)
    assert set(cpu_builders.NOTES) == set(cpu_builders.BUILDERS)

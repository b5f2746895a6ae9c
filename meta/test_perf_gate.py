"""The regression gate (tools/perf_gate.py) on synthetic runs: a rerun with noise passes, a planted slowdown
fails, the threshold comes from the reruns' spread, and files from another device are refused."""

import json
import pathlib
import subprocess
import sys

import pytest

from harness.bench import gate, synthetic

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOISE = 0.004  # 0.4 % run to run: what the H200 kernel medians showed (within 1 %)


def _gate(*args):
    return subprocess.run([sys.executable, "tools/perf_gate.py", *args], cwd=ROOT, capture_output=True, text=True)


@pytest.fixture
def runs(tmp_path):
    out = {}
    for name, kw in {"a": {"seed": 1}, "b": {"seed": 2}, "c": {"seed": 3},
                     "slow": {"seed": 4, "slow_us": 10.0}}.items():  # fmt: skip
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(synthetic.run(noise=NOISE, **kw)))
        out[name] = str(f)
    return out


def test_rerun_passes_and_planted_slowdown_fails(runs, tmp_path):
    cal = tmp_path / "cal.json"
    r = _gate("calibrate", runs["a"], runs["b"], "-o", str(cal))
    assert r.returncode == 0 and "floor" in r.stdout
    floor = json.loads(cal.read_text())["floor"]
    assert gate.MIN_FLOOR <= floor < 0.05
    r = _gate("compare", runs["a"], runs["c"], "--calibration", str(cal))
    assert r.returncode == 0, r.stdout[-3000:]
    assert "-> pass" in r.stdout
    r = _gate("compare", runs["a"], runs["slow"], "--calibration", str(cal))
    assert r.returncode == 1, r.stdout[-3000:]
    assert "REGRESSION" in r.stdout and "test_tree_build[bs1-B16]" in r.stdout
    regressed = [line for line in r.stdout.splitlines() if "REGRESSION" in line]
    assert all("test_tree_build[" in line for line in regressed)  # only the slowed kernel


def test_threshold_follows_the_measured_spread():
    a, b = synthetic.run(seed=1), synthetic.run(seed=2, noise=0.03)
    cal = gate.calibrate(a, b)
    assert cal["floor"] == pytest.approx(2 * abs(cal["worst_change"])) and cal["floor"] > 0.05
    t = {"median_us": 10.0, "rel_spread": 0.2}
    base = {"benchmarks": [{"fullname": "x", "extra_info": {"schema": "kdtr-bench/1", "op": "tree_build",
                                                            "time": {**t, "where": "device"}}}]}  # fmt: skip
    new = json.loads(json.dumps(base))
    new["benchmarks"][0]["extra_info"]["time"]["median_us"] = 13.0  # +30 %, under 2 x 20 % spread
    (row,) = gate.compare(base, new, floor=0.05)
    assert row.verdict == "ok" and row.threshold == pytest.approx(0.4)


def test_host_times_are_gated_only_on_request():
    a, b = synthetic.run(seed=1), synthetic.run(seed=1)
    for x in b["benchmarks"]:
        x["extra_info"]["time"]["where"] = "host"
    assert gate.times(b) == {} and len(gate.times(b, include_host=True)) == len(gate.times(a))


def test_plain_pytest_benchmark_cases_use_its_stats():
    data = {"benchmarks": [{"fullname": "f", "extra_info": {}, "stats": {"median": 2e-3, "iqr": 1e-4}}]}
    (t,) = gate.times(data, include_host=True).values()
    assert t.median_us == pytest.approx(2000.0) and t.where == "host" and t.rel_spread == pytest.approx(0.05)


def test_other_device_and_missing_files_are_refused(runs, tmp_path):
    other = synthetic.run(seed=5)
    other["machine_info"]["gpu"]["name"] = "NVIDIA H100"
    f = tmp_path / "h100.json"
    f.write_text(json.dumps(other))
    r = _gate("compare", runs["a"], str(f))
    assert r.returncode == 2 and "cannot compare" in r.stderr
    r = _gate("compare", runs["a"], str(tmp_path / "absent.json"))
    assert r.returncode == 2 and "absent.json" in r.stderr

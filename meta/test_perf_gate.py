"""The regression gate (tools/perf_gate.py) on synthetic runs: a rerun with noise passes, a planted slowdown
fails, the threshold comes from the reruns' spread, and files from another device are refused; the select
variants' fallback rates are gated exactly (any rise fails, a fall is reported, cases without rates are not
touched) and the GPU suite's gate_fallback stage wants what these tests show."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

from harness.bench import gate, record, synthetic

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOISE = 0.004  # 0.4 % run to run: what the H200 kernel medians showed (within 1 %)


def _gate(*args):
    return subprocess.run([sys.executable, "-m", "tools.perf_gate", *args], cwd=ROOT, capture_output=True, text=True)


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


# --- the fallback rates of the select variants (harness/bench/record.py `fallback`): gated exactly ------------------
def _write(tmp_path, name, data):
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(data))
    return str(f)


def _entry(data, case):
    return next(b for b in data["benchmarks"] if b["fullname"].endswith(case))["extra_info"]


def test_a_fallback_rate_rise_fails_whatever_the_threshold(tmp_path):
    """One more request replayed in one case fails the gate, with times equal and with a threshold no time could
    pass (so the rate alone decides); the output names the case, the family and both rates."""
    base = synthetic.run(seed=1, fallback=0.0)
    new = json.loads(json.dumps(base))
    case = "test_tree_build[bs64-B256]"
    _entry(new, case)["fallback"]["drafter"] = record.fallback(64, checks_failed=1)
    a, b = _write(tmp_path, "a", base), _write(tmp_path, "b", new)
    for extra in ([], ["--floor", "100"], ["--fallback-only"]):
        r = _gate("compare", a, b, *extra)
        assert r.returncode == 1, (extra, r.stdout[-3000:])
        (line,) = [x for x in r.stdout.splitlines() if "FALLBACK RATE ROSE" in x]
        assert case in line and "drafter" in line and "0/64 (0.0%)" in line and "1/64 (1.6%)" in line
        assert r.stdout.rstrip().endswith("-> FAIL") and "1 rise" in r.stdout.splitlines()[-1]


def test_equal_rates_pass(tmp_path):
    """A rerun: other times within the noise, the same counts: the gate passes and lists no rate."""
    a = _write(tmp_path, "a", synthetic.run(seed=1, noise=NOISE, fallback=0.0))
    b = _write(tmp_path, "b", synthetic.run(seed=2, noise=NOISE, fallback=0.0))
    for extra in ([], ["--fallback-only"]):
        r = _gate("compare", a, b, *extra)
        assert r.returncode == 0, r.stdout[-3000:]
        assert "FALLBACK RATE ROSE" not in r.stdout and "fallback rates: 24 equal -> pass" in r.stdout.splitlines()[-1]


def test_a_fall_passes_and_is_reported(tmp_path):
    base = synthetic.run(seed=1, fallback=0.5)
    new = json.loads(json.dumps(base))
    case = "test_tree_build[bs16-B1024]"
    _entry(new, case)["fallback"]["drafter"] = record.fallback(16, checks_failed=2)
    r = _gate("compare", _write(tmp_path, "a", base), _write(tmp_path, "b", new))
    assert r.returncode == 0, r.stdout[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if case in x and "drafter" in x and x.rstrip().endswith("fall")]
    assert "8/16 (50.0%)" in line and "2/16 (12.5%)" in line
    assert "1 fall" in r.stdout.splitlines()[-1] and r.stdout.rstrip().endswith("-> pass")


def test_cases_without_rates_are_unaffected():
    """A case with no `fallback` (no selection: B = 16 here) or with null rates (a launch that selects nothing:
    bs = 256 here) has no rate to gate, whatever the other run says about it; the time gate is as before."""
    base, new = synthetic.run(seed=1, fallback=0.0), synthetic.run(seed=1, fallback=1.0)
    for data in (base, new):
        assert "fallback" not in _entry(data, "test_tree_build[bs1-B16]")
        assert _entry(data, "test_tree_build[bs256-B64]")["fallback"]["drafter"]["rate"] is None
    rows = gate.compare_fallbacks(base, new)
    assert rows and not [r for r in rows if "B16]" in r.case or "bs256-" in r.case]
    assert len(rows) == 24 and {r.verdict for r in rows} == {"rise"}  # 12 cases with a selection, 2 families
    plain = synthetic.run(seed=1)  # no fallback records at all: nothing to gate, the times alone
    assert gate.compare_fallbacks(plain, plain) == []
    assert not gate.failed(gate.compare(plain, plain), gate.compare_fallbacks(plain, plain))


def test_a_rate_missing_from_the_new_run_is_reported_and_fails_only_when_strict(tmp_path):
    base = synthetic.run(seed=1, fallback=0.0)
    new = json.loads(json.dumps(base))
    del _entry(new, "test_tree_build[bs4-B64]")["fallback"]
    a, b = _write(tmp_path, "a", base), _write(tmp_path, "b", new)
    r = _gate("compare", a, b)
    assert r.returncode == 0 and "2 missing" in r.stdout.splitlines()[-1], r.stdout[-2000:]
    assert _gate("compare", a, b, "--strict").returncode == 2


def test_fallback_only_needs_rates(tmp_path):
    plain = _write(tmp_path, "plain", synthetic.run(seed=1))
    r = _gate("compare", plain, plain, "--fallback-only")
    assert r.returncode == 2 and "no fallback rate" in r.stderr


def test_planted_always_fallback_fails_and_rerun_passes(tmp_path):
    """The gate_fallback stage on synthetic runs: two normal runs and a planted build that replays every request
    (slower by nothing: the rate alone must catch it)."""
    a = _write(tmp_path, "a", synthetic.run(seed=1, noise=NOISE, fallback=0.0))
    b = _write(tmp_path, "b", synthetic.run(seed=2, noise=NOISE, fallback=0.0))
    planted = _write(tmp_path, "planted", synthetic.run(seed=3, noise=NOISE, fallback=1.0))
    assert _gate("compare", a, b, "--fallback-only").returncode == 0
    r = _gate("compare", a, planted, "--fallback-only")
    assert r.returncode == 1 and "times not gated" in r.stdout
    assert r.stdout.count("FALLBACK RATE ROSE") == 24  # every rate of the base: none was 1 there


def test_gpu_suite_plants_the_always_fallback_build():
    """tools/gpu_suite.sh's gate_fallback stage runs the stage of that name, plants a registered slowdown, and
    wants the rerun to pass (rc 0) and the planted run to fail (rc 1) on the rates alone."""
    from harness import kernel_mutants
    from harness.bench import stages

    script = (ROOT / "tools" / "gpu_suite.sh").read_text()
    body = script[script.index("  gate_fallback)") :]
    body = body[: body.index(";;")]
    assert re.findall(r"--kernel-mutant (\S+)", body) == ["slow_tb_always_fallback"]
    assert "slow_tb_always_fallback" in kernel_mutants.SLOWDOWNS
    assert body.count("--perf-stage gate_fallback") == 2 and "gate_fallback" in stages.STAGES
    assert body.count("--fallback-only") == 2
    assert '[ "$rc_rerun" -eq 0 ] && [ "$rc_planted" -eq 1 ] || status=1' in body
    assert "gate_fallback" in script[script.index("PERF=(") : script.index(")", script.index("PERF=("))]

"""The end-to-end model's maths (harness/bench/e2e.py): parameter split, experts touched, interpolation,
Amdahl, and the CPU-bound rule, on hand-made cases."""

import math

import pytest

from harness.bench import e2e, record, synthetic


def test_parameter_split_from_the_configs():
    # total = a + E·e, active = a + k·e
    k2 = e2e.KIMI_K2
    assert k2.expert_params == pytest.approx(968e9 / 376)
    assert k2.always_params + 384 * k2.expert_params == pytest.approx(1e12)
    assert k2.always_params + 8 * k2.expert_params == pytest.approx(32e9)
    v3 = e2e.DEEPSEEK_V3
    assert v3.always_params == pytest.approx(37e9 - 8 * 634e9 / 248)
    assert (k2.heads, v3.heads, k2.experts, v3.experts, k2.layers) == (64, 128, 384, 256, 61)


def test_experts_touched_grows_to_all():
    a = e2e.Assumptions(budget=0)  # one token per request
    one = e2e.dense_step_us(e2e.KIMI_K2, a, 1, 4000.0, 800.0)
    assert one["experts_touched"] == pytest.approx(8.0)
    many = e2e.dense_step_us(e2e.KIMI_K2, e2e.Assumptions(), 256, 4000.0, 800.0)
    assert many["experts_touched"] == pytest.approx(384.0, rel=1e-6)
    assert many["matrix_us"] > one["matrix_us"] and many["weights_us"] > one["weights_us"]


def test_interpolation_log_log_and_linear_beyond():
    pts = {1: 10.0, 4: 40.0, 16: 160.0}
    assert e2e.interpolate(pts, 4) == (40.0, "measured")
    v, how = e2e.interpolate(pts, 2)
    assert v == pytest.approx(20.0) and how == "interpolated"
    v, how = e2e.interpolate(pts, 64)
    assert v == pytest.approx(640.0) and how.startswith("extrapolated")
    assert e2e.interpolate({}, 3) is None


def _case(op, impl, shape, us, comparators=None):
    t = {"median_us": us, "p10_us": us, "p90_us": us, "rel_spread": 0.0, "n": 1, "where": "device", "method": ""}
    return record.build(op=op, impl=impl, shape=shape, time=t, comparators=comparators or {})


def _cmp(us):
    return record.comparator({"median_us": us, "p10_us": us, "p90_us": us, "rel_spread": 0.0, "n": 1,
                              "where": "host", "method": ""})  # fmt: skip


def test_amdahl_gain_is_the_cpu_share_for_a_huge_speedup():
    cases = [_case("tree_build", "cuda", {"bs": bs, "B": 64}, 0.001, {"python_heapq+copies": _cmp(300.0 * bs)})
             for bs in (1, 4, 16, 64)]  # fmt: skip
    res = e2e.analyse(cases, e2e.KIMI_K2)
    for r in res["rows"]:
        x = r["cpu"]["python heapq + copies"]
        # step_cpu / step_gpu − 1 with a free kernel = cpu / (step − cpu) ≈ the CPU share when it is small
        assert x["gain_graphs"] == pytest.approx(x["share_of_step"] / (1 - x["share_of_step"]), rel=1e-3)
        assert x["kernel_speedup"] > 1e5


def test_cpu_build_bounds_throughput_when_slower_than_the_gpu_step():
    # a CPU build of 100 ms per request against a modelled DeepSeek-V3 step of 40 ms (c = 1) to 1 s
    cases = [_case("tree_build", "cuda", {"bs": bs, "B": 64}, 50.0, {"python_heapq+copies": _cmp(1e5 * bs)})
             for bs in (1, 16)]  # fmt: skip
    res = e2e.analyse(cases, e2e.DEEPSEEK_V3)
    host_launch = res["assumptions"].launches_per_step * res["assumptions"].launch_us
    for r in res["rows"]:
        x = r["cpu"]["python heapq + copies"]
        gpu = r["verify_us"] + (r["accept_us"] or 0.0)
        assert x["bounds_throughput_graphs"] == (x["us"] > gpu)
        assert x["bounds_throughput_eager"] == (x["us"] + host_launch > gpu)
    assert any(r["cpu"]["python heapq + copies"]["bounds_throughput_graphs"] for r in res["rows"])
    assert "bounds throughput with CUDA graphs from concurrency" in " ".join(e2e.conclusions(res))


def test_synthetic_run_conclusions_name_each_op():
    cases = [b["extra_info"] for b in synthetic.run()["benchmarks"]]
    res = e2e.analyse(cases, e2e.KIMI_K2, ceilings=synthetic.CEILINGS)
    assert [r["c"] for r in res["rows"]] == list(e2e.CONCURRENCY)
    text = "\n".join(e2e.conclusions(res))
    assert "tree-verify attention" in text and "tree_build kernel" in text and "python heapq + copies" in text
    for r in res["rows"]:
        assert math.isclose(sum(r["share"].values()), 1.0, rel_tol=1e-9)


def test_budget_table_covers_every_measured_budget():
    cases = [b["extra_info"] for b in synthetic.run(verify=False)["benchmarks"]]
    rows = e2e.by_budget(cases, e2e.KIMI_K2, ceilings=synthetic.CEILINGS)
    assert {r["B"] for r in rows} == {16, 64, 256, 1024}
    assert all(0 < r["share_lo"] < 1 and 0 < r["share_hi"] < 1 for r in rows)

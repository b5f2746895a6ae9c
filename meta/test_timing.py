"""The timing helper's pure parts (harness/timing.py), with a fake clock: statistics, the time-capped
repetition loop, the L2 rule and the pytest-benchmark rounds."""

import pytest

from harness import timing


class FakeClock:
    """A clock that advances only when a measured call says how long it took."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def advance(self, seconds):
        self.t += seconds


def fixed_cost(clock, seconds, value=1.0):
    calls = []

    def measure(n):
        calls.append(n)
        clock.advance(seconds * n)
        return [value] * n

    return measure, calls


def test_summary_median_spread_and_quantiles():
    s = timing.summary([float(x) for x in range(1, 102)], where="host", method="m")
    assert s["median_us"] == 51.0 and s["n"] == 101 and s["min_us"] == 1.0
    assert s["p10_us"] == pytest.approx(11.0) and s["p90_us"] == pytest.approx(91.0)
    assert s["q1_us"] == pytest.approx(26.0) and s["q3_us"] == pytest.approx(76.0)
    assert s["rel_spread"] == pytest.approx(80.0 / 51.0)
    assert (s["where"], s["method"]) == ("host", "m")


def test_summary_of_one_sample_and_of_none():
    s = timing.summary([7.0])
    assert s["median_us"] == s["p10_us"] == s["p90_us"] == 7.0 and s["rel_spread"] == 0.0
    with pytest.raises(ValueError, match="no samples"):
        timing.summary([])


def test_repeat_stops_at_the_time_budget():
    clock = FakeClock()
    measure, calls = fixed_cost(clock, 0.01)  # 10 ms a sample, 1 s budget: about 100 samples
    got = timing.repeat(measure, timing.Policy(min_reps=5, max_reps=1000, budget_s=1.0, batch=10), clock)
    assert calls[0] == 1, "the first call sizes the rest"
    assert 100 <= len(got) <= 110
    assert max(calls) <= 10


def test_repeat_honours_min_reps_for_a_slow_call():
    clock = FakeClock()
    measure, calls = fixed_cost(clock, 3.0)  # each sample takes 3 s, far over the budget
    got = timing.repeat(measure, timing.Policy(min_reps=4, max_reps=100, budget_s=1.0), clock)
    assert len(got) == 4 and calls == [1, 3]


def test_repeat_caps_at_max_reps_for_a_fast_call():
    clock = FakeClock()
    measure, calls = fixed_cost(clock, 1e-7)
    got = timing.repeat(measure, timing.Policy(min_reps=5, max_reps=37, budget_s=10.0, batch=10), clock)
    assert len(got) == 37 and sum(calls) == 37


def test_repeat_rejects_a_short_batch():
    with pytest.raises(RuntimeError, match="returned 0 samples"):
        timing.repeat(lambda n: [], timing.Policy(), FakeClock())


def test_policy_rejects_nonsense():
    with pytest.raises(ValueError):
        timing.Policy(min_reps=10, max_reps=5)


def test_policy_budget_from_env(monkeypatch):
    monkeypatch.setenv("KDTREE_PERF_BUDGET_S", "0.25")
    assert timing.policy_from_env().budget_s == 0.25
    assert timing.policy_from_env(budget_s=2.0).budget_s == 2.0


def test_host_times_warm_up_then_measure():
    clock = FakeClock()
    calls = []

    def fn():
        calls.append(clock())
        clock.advance(0.002)

    got = timing.host_times_us(fn, timing.Policy(warmup=2, min_reps=3, max_reps=5, budget_s=0.0), clock)
    assert len(got) == 3 and all(x == pytest.approx(2000.0) for x in got)
    assert len(calls) == 2 + 3


@pytest.mark.parametrize("cost_s,samples,method", [(2.0, 1, "one call (over the 1 s cap"), (0.002, 3, "mine")])
def test_host_times_capped_times_a_slow_call_once(cost_s, samples, method):
    clock = FakeClock()
    calls = []

    def fn():
        calls.append(clock())
        clock.advance(cost_s)

    policy = timing.Policy(warmup=1, min_reps=3, max_reps=5, budget_s=0.0)
    got, how = timing.host_times_capped_us(fn, policy, 1.0, "mine", clock)
    assert len(got) == samples and all(x == pytest.approx(cost_s * 1e6) for x in got)
    assert how.startswith(method)
    assert len(calls) == (1 if samples == 1 else 1 + 1 + 3)  # the probe, then warm-up and repetitions


@pytest.mark.parametrize(
    "set_bytes,l2,max_sets,mode,sets",
    [
        (200 << 20, 60 << 20, 1, "large", 1),  # one input set is over max(128 MiB, 2 x L2) by itself
        (40 << 20, 50 << 20, 8, "rotate", 4),  # 4 x 40 MiB >= 128 MiB
        (40 << 20, 50 << 20, 3, "flush", 1),  # would need 4 sets
        (4096, 60 << 20, 1, "flush", 1),  # tiny inputs: flush
        (100 << 20, 80 << 20, 2, "rotate", 2),  # the target is 2 x L2 = 160 MiB here
    ],
)
def test_l2_plan(set_bytes, l2, max_sets, mode, sets):
    p = timing.l2_plan(set_bytes, l2, max_sets=max_sets)
    assert (p.mode, p.sets) == (mode, sets)
    if mode == "flush":
        assert p.flush_bytes >= max(timing.ROTATE_TARGET_BYTES, 2 * l2) > 100e6
    if mode == "rotate":
        assert p.sets * set_bytes > 100e6
    assert p.describe(set_bytes)


def test_rounds_for_fits_the_budget():
    pol = timing.Policy(min_reps=5, max_reps=50, budget_s=1.0)
    assert timing.rounds_for(0.001, pol) == 50
    assert timing.rounds_for(0.1, pol) == 10
    assert timing.rounds_for(0.5, pol) == 5  # min_reps while 5 calls fit in 4 budgets
    assert timing.rounds_for(3.0, pol) == 1  # a 3 s call runs once


def test_per_graph_for_spans_the_launch_gap():
    assert timing.per_graph_for(5.0) == timing.MAX_PER_GRAPH
    assert timing.per_graph_for(50.0) == 4
    assert timing.per_graph_for(2000.0) == 1


def test_long_launches_get_one_warmup_and_few_reps():
    pol = timing.Policy(warmup=3, min_reps=5, max_reps=200)
    assert timing.for_launch(pol, 100.0) is pol
    long = timing.for_launch(pol, 2e6)
    assert (long.warmup, long.min_reps, long.max_reps) == (1, 3, 200)

"""tree_build: the CUDA kernel against the CPU builders a user runs instead, on the same inputs in one run.
L = 15 (the DFlash-b16 drafters), K_in = B, prefix_lens = 0.

GPU cases (bs x B): the kernel's device time with the L2 flushed before each launch (inputs this small
cannot be rotated through 100 MB), and as warm graph replays (the number kernels_cu/PERF_NOTES.md tracks);
each registered CPU builder (harness/bench/cpu_builders.py) alone and with the host<->device copies a
CPU build adds (top-k down, every layout up); speedup = comparator median / kernel median.
CPU cases (small grid, any machine): each CPU builder alone, timed by pytest-benchmark (host time is the
quantity there).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from contract import Tree
from harness import strategies as hh
from harness import timing
from harness.bench import Unavailable, cpu_builders, record, targets, transfers
from harness.compare import assert_bit_exact
from reference import tree_build as ref

pytestmark = pytest.mark.perf
L = 15
GRID = [(bs, B) for B in (16, 64, 256, 1024) for bs in (1, 4, 16, 64, 256)]
QUICK = {(1, 16), (64, 16), (1, 64), (64, 64), (256, 64), (16, 256)}
GATE = {(1, 16), (64, 16), (1, 64), (64, 64), (16, 256)}  # the regression gate's reruns (--perf-stage gate)
CPU_GRID = [(bs, B) for B in (16, 64, 256) for bs in (1, 16)]


def _params(grid):
    out = []
    for bs, B in grid:
        marks = [pytest.mark.perf_stage("build", *(["gate"] if (bs, B) in GATE else []))]
        if (bs, B) not in QUICK:
            marks.append(pytest.mark.perf_full)
        out.append(pytest.param(bs, B, id=f"bs{bs}-B{B}", marks=marks))
    return out


def inputs(bs, B, seed=0):
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, B), "bf16", 0.0)
    ids = np.stack([np.stack([rng.choice(160_000, B, replace=False) for _ in range(L)]) for _ in range(bs)])
    return lp, ids.astype(np.int32), rng.integers(0, 160_000, bs).astype(np.int32), B, np.zeros(bs, np.int32)


def tree_nbytes(tree) -> int:
    return sum(np.asarray(getattr(tree, f)).nbytes for f in Tree.FIELDS)


def time_cpu_builders(args, policy, copies_us=None) -> dict:
    """Every registered CPU builder on `args`: its time, or why it could not run; with copies when given."""
    out = {}
    for name, make in cpu_builders.BUILDERS.items():
        note = cpu_builders.NOTES[name]
        try:
            fn = make(*args)
        except Unavailable as e:
            out[name] = record.comparator(error=str(e), note=note)
            continue
        samples = timing.host_times_us(fn, policy)
        out[name] = record.comparator(timing.summary(samples, where="host", method="host clock"), note=note)
        if copies_us is not None:
            both = [s + copies_us for s in samples]
            out[f"{name}+copies"] = record.comparator(
                timing.summary(both, where="host", method=f"host clock + median copies {copies_us:.1f} us"),
                note=note + "; plus top-k device->host and every layout host->device (pageable)",
            )
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("variant", targets.variants("tree_build"))
@pytest.mark.parametrize("bs,B", _params(GRID))
def test_tree_build(benchmark, ceilings, perf_policy, cpu_policy, with_comparators, bs, B, variant):
    args = inputs(bs, B)
    benchmark.group = f"tree_build B={B} {variant}"
    want = ref.tree_build(*args)
    p = targets.prepare("tree_build", variant, *args)
    try:
        p.launch()
        got = p.results()
        for f in ("parents", "scores", "visibility", "full_mask"):  # refcheck: what is timed is right
            assert_bit_exact(getattr(got, f), getattr(want, f), what=f, spec_id="TB.2.3")
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=10, warmup_rounds=2)
        if not benchmark.enabled:
            return  # under xdist (make test): checked, not timed
        in_bytes = sum(a.nbytes for a in args[:3])
        out_bytes = tree_nbytes(want)
        plan = timing.l2_plan(in_bytes + out_bytes, timing.l2_bytes())
        dev, method = timing.device_times_us([p.launch], plan=plan, policy=perf_policy)
        warm, warm_method = timing.device_times_us([p.launch], plan=timing.WARM, policy=perf_policy)
    finally:
        p.finish()
    comps = {}
    if with_comparators:
        copies = timing.summary(
            transfers.round_trip_us(args[0].nbytes + args[1].nbytes, out_bytes, cpu_policy),
            where="host",
            method="host clock, synchronous copies, pageable memory",
        )
        comps = time_cpu_builders(args, cpu_policy, copies["median_us"])
        comps["copies_only"] = record.comparator(copies, note="the copies alone (no build)")
    record.put(
        benchmark,
        op="tree_build",
        impl=f"cuda:{variant}",
        shape={"bs": bs, "B": B, "L": L, "K_in": B},
        time=timing.summary(dev, method=f"{method}; {plan.describe(in_bytes + out_bytes)}"),
        bytes_moved=in_bytes + out_bytes,
        ceilings=ceilings.as_dict(),
        comparators=comps,
        extra={"warm_graph": timing.summary(warm, method=f"{warm_method}; {timing.WARM.describe(0)}")},
    )


@pytest.mark.perf_stage("build")
@pytest.mark.parametrize("builder", sorted(cpu_builders.BUILDERS))
@pytest.mark.parametrize("bs,B", [pytest.param(bs, B, id=f"bs{bs}-B{B}") for bs, B in CPU_GRID])
def test_tree_build_cpu(benchmark, cpu_policy, builder, bs, B):
    """A CPU builder alone (runs on any machine); its output is checked against the reference."""
    args = inputs(bs, B)
    benchmark.group = f"tree_build cpu B={B}"
    try:
        fn = cpu_builders.BUILDERS[builder](*args)
    except Unavailable as e:
        pytest.skip(str(e))
    t = time.perf_counter()
    got = fn()
    estimate = time.perf_counter() - t
    want = ref.tree_build(*args)
    for f in ("parents", "scores", "visibility", "full_mask"):
        assert_bit_exact(getattr(got, f), getattr(want, f), what=f, spec_id="TB.2.3")
    benchmark.pedantic(fn, rounds=timing.rounds_for(estimate, cpu_policy), warmup_rounds=1)
    if benchmark.enabled and benchmark.stats:
        samples = [x * 1e6 for x in benchmark.stats.stats.data]
        record.put(
            benchmark,
            op="tree_build",
            impl=builder,
            shape={"bs": bs, "B": B, "L": L, "K_in": B},
            time=timing.summary(samples, where="host", method="pytest-benchmark rounds, host clock"),
            bytes_moved=sum(a.nbytes for a in args[:3]) + tree_nbytes(want),
            extra={"note": cpu_builders.NOTES[builder]},
        )

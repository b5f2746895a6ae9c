"""tree_build: the CUDA kernel against the CPU builders a user runs instead, on the same inputs in one run.
L = 15 (the DFlash-b16 drafters; also L = 32 at B = 64), K_in = B, prefix_lens = 0.

GPU cases (bs x B, every kernel variant; the *_99k twins, sm_120's budget built for sm_90, on the QUICK cells
only): the kernel's device time with the L2 flushed before each launch (inputs this small
cannot be rotated through 100 MB), and as warm graph replays (the number lab/PERF_NOTES.md tracks);
each registered CPU builder (harness/bench/cpu_builders.py) alone and with the host<->device copies a
CPU build adds (top-k down, every layout up); speedup = comparator median / kernel median.
Beside them, end to end (host clock, synchronised): the kernel's whole call on device-resident inputs (the
wrapper, its validation and the launch), and each CPU builder as a serving engine runs it (top-k copied
device -> host, the build, every layout copied host -> device). The CPU builders run once per cell (every
kernel variant's case carries the same numbers); a CPU call over 1 s is timed once.
Each select variant's case also records its fallback rate (harness/bench/fallbacks.py: the requests whose selection
failed a check or overflowed and replayed the heap, out of all) with its reporting build, one launch each on the
timed inputs ("drafter") and on the same rows with one token certain in every row ("adversarial"); the
`gate_fallback` stage runs the select variants at two cells for the regression gate's fallback check.
CPU cases (small grid, any machine): each CPU builder alone, timed by pytest-benchmark (host time is the
quantity there).
"""

from __future__ import annotations

import functools
import time

import numpy as np
import pytest

from contract import Tree
from harness import strategies as hh
from harness import timing
from harness.bench import Unavailable, cpu_builders, fallbacks, record, targets, transfers
from harness.compare import assert_bit_exact
from reference import tree_build as ref

pytestmark = pytest.mark.perf
L = 15
BATCHES = (1, 4, 16, 64, 256, 1024)
GRID = [(bs, B, L) for B in (16, 64, 256, 1024) for bs in BATCHES] + [(bs, 64, 32) for bs in BATCHES]
QUICK = {(1, 16), (64, 16), (1, 64), (64, 64), (256, 64), (16, 256)}
GATE = {(1, 16), (64, 16), (1, 64), (64, 64), (16, 256)}  # the regression gate's reruns (--perf-stage gate)
# the fallback gate's runs (--perf-stage gate_fallback, select variants only): a budget every select variant but
# select_race selects at, and one select_race races at too (B >= 256 on a wave of requests)
GATE_FALLBACK = {(1, 64), (16, 256)}
CPU_GRID = [(bs, B) for B in (16, 64, 256) for bs in (1, 16)]
TWINS = targets.other_arch_budget("tree_build")
CPU_CAP_S = 1.0  # a CPU builder's call longer than this is timed once (the stage must fit its time)


def _params(grid):
    out = []
    for bs, B, depth in grid:
        quick = (bs, B) in QUICK and depth == L
        gates = [g for g, cells in (("gate", GATE), ("gate_fallback", GATE_FALLBACK)) if quick and (bs, B) in cells]
        marks = [pytest.mark.perf_stage("build", *gates)]
        if not quick:
            marks.append(pytest.mark.perf_full)
        out.append(pytest.param(bs, B, depth, id=f"bs{bs}-B{B}" + (f"-L{depth}" if depth != L else ""), marks=marks))
    return out


def inputs(bs, B, seed=0, depth=L):
    """bf16-quantized log-prob rows (ties common), distinct token ids per row."""
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, depth, B), "bf16", 0.0)
    ids = (rng.integers(0, 160_000, (bs, depth, 1)) + 37 * np.arange(B)) % 160_000  # distinct: 37 * B < 160000
    return lp, ids.astype(np.int32), rng.integers(0, 160_000, bs).astype(np.int32), B, np.zeros(bs, np.int32)


@functools.cache
def _case(bs, B, depth):
    """The inputs of a cell and the tree they must give (the C++ builder's when built, bit-exact with the
    reference by the engine's conformance, else the reference's: its numpy layouts take seconds at bs 1024)."""
    args = inputs(bs, B, depth=depth)
    try:
        want = cpu_builders.BUILDERS["cpp_mt"](*args)()
    except Unavailable:
        want = ref.tree_build(*args)
    return args, want


def tree_nbytes(tree) -> int:
    return sum(np.asarray(getattr(tree, f)).nbytes for f in Tree.FIELDS)


def time_cpu_builders(args, policy, serving=False) -> dict:
    """Every registered CPU builder on `args`: its time, or why it could not run; with `serving`, also end to
    end as a serving engine runs it (`<name>+copies`: top-k down, the build, every layout up, synchronised)."""
    out = {}
    for name, make in cpu_builders.BUILDERS.items():
        note = cpu_builders.NOTES[name]
        try:
            fn = make(*args)
        except Unavailable as e:
            out[name] = record.comparator(error=str(e), note=note)
            continue
        samples, method = timing.host_times_capped_us(fn, policy, CPU_CAP_S)
        out[name] = record.comparator(timing.summary(samples, where="host", method=method), note=note)
        if serving:
            e2e, method = transfers.serving_e2e_us(make, args, policy, cap_s=CPU_CAP_S)
            out[f"{name}+copies"] = record.comparator(
                timing.summary(e2e, where="host", method=method),
                note=note + "; end to end: top-k device->host, the build, every layout host->device, synchronised",
            )
    return out


@functools.cache
def _comparators(bs, B, depth, policy) -> dict:
    """The CPU side of a cell, measured once for all kernel variants."""
    args, want = _case(bs, B, depth)
    copies = timing.summary(
        transfers.round_trip_us(args[0].nbytes + args[1].nbytes, tree_nbytes(want), policy),
        where="host",
        method="host clock, synchronous copies, pageable memory",
    )
    comps = time_cpu_builders(args, policy, serving=True)
    comps["copies_only"] = record.comparator(copies, note="the copies alone (no build)")
    return comps


def _on_device(args):
    """The case's arrays as cupy arrays (scalars as they are), or {"error": why} when cupy is missing."""
    try:
        import cupy
    except ImportError as e:
        return {"error": f"cupy unavailable: {e}"}
    return [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


def device_e2e(variant, args, policy) -> dict:
    """The kernel's whole call (wrapper, validation, launch, synchronised) on device-resident inputs (cupy)."""
    dev = _on_device(args)
    if isinstance(dev, dict):
        return dev
    from kernels_cu import ops

    fn = ops.function("tree_build", variant)
    lp, ids, roots, B, pre = dev
    samples = timing.host_times_us(lambda: fn(lp, ids, roots, B, pre), policy)
    return timing.summary(samples, where="host", method="host clock, the op on cupy inputs, outputs on the device")


def device_e2e_deferred(variant, args, policy) -> dict:
    """The capturable path (TB.4.5) on the same device-resident inputs: {"call": the whole call (shape checks,
    buffers, check kernel + build, the flag read, outputs left on the device), "replay": a call prepared once
    and launched again with its flag read (what a serving loop pays per step)}; host clock, synchronised."""
    dev = _on_device(args)
    if isinstance(dev, dict):
        return dev
    from kernels_cu import ops

    lp, ids, roots, B, pre = dev

    def call():
        d = ops.prepare_deferred("tree_build", variant, lp, ids, roots, B, pre)
        d.launch()
        d.finish()

    d = ops.prepare_deferred("tree_build", variant, lp, ids, roots, B, pre)
    try:
        whole = timing.host_times_us(call, policy)
        replay = timing.host_times_us(lambda: (d.launch(), d.check()), policy)
    finally:
        d.finish()
    how = "host clock, the op on cupy inputs, outputs on the device"
    return {"call": timing.summary(whole, where="host", method=how),
            "replay": timing.summary(replay, where="host", method=how + "; prepared once")}  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("variant", targets.variants("tree_build"))
@pytest.mark.parametrize("bs,B,depth", _params(GRID))
def test_tree_build(request, benchmark, ceilings, perf_policy, cpu_policy, with_comparators, bs, B, depth, variant):
    stage = request.config.getoption("--perf-stage")
    if variant in TWINS and ((bs, B) not in QUICK or depth != L or stage in ("gate", "gate_fallback")):
        pytest.skip(f"{variant} is timed on the quick cells of the build stage")
    selects = targets.selects("tree_build", variant)
    if stage == "gate_fallback" and not selects:
        pytest.skip(f"{variant} has no selection, hence no fallback rate (the gate_fallback stage gates those)")
    args, want = _case(bs, B, depth)
    benchmark.group = f"tree_build B={B} L={depth} {variant}"
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
    # on the same inputs, after the timing (the reporting build's launches are counted, never timed)
    fallback = fallbacks.measure(variant, args) if selects else None
    comps = _comparators(bs, B, depth, cpu_policy) if with_comparators else {}
    record.put(
        benchmark,
        op="tree_build",
        impl=f"cuda:{variant}",
        shape={"bs": bs, "B": B, "L": depth, "K_in": B},
        time=timing.summary(dev, method=f"{method}; {plan.describe(in_bytes + out_bytes)}"),
        bytes_moved=in_bytes + out_bytes,
        ceilings=ceilings.as_dict(),
        comparators=comps,
        extra={
            "warm_graph": timing.summary(warm, method=f"{warm_method}; {timing.WARM.describe(0)}"),
            "e2e_device_inputs": device_e2e(variant, args, cpu_policy) if with_comparators else {},
            "e2e_deferred": device_e2e_deferred(variant, args, cpu_policy) if with_comparators else {},
        },
        fallback=fallback,
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

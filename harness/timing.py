"""The one timing helper of the benchmarks: warm-up, repetitions capped by time, medians and spread, and the
L2 rule (inputs rotated through more than 100 MB, or the L2 flushed before each timed launch).

Device work is timed with CUDA events: `device_times_us` for kernels launched on the harness stream
(cuda.core), `torch_times_us` for torch comparators on torch's current stream. Host work (the CPU tree
builders) is timed with a host clock by `host_times_us`. The pure parts (statistics, the repetition loop,
the L2 plan) take their clock as an argument so that they are unit-tested without a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence

from kernels_cu import runtime

MiB = 1 << 20
# A working set this large leaves nothing of one launch's inputs in the H200's 50-60 MB L2 by the next.
ROTATE_TARGET_BYTES = 128 * MiB
# A launch shorter than this is replayed several times per graph, so the events bracket device work only.
GRAPH_SPAN_US = 200.0
MAX_PER_GRAPH = 20
# A launch longer than this is warm after one call and needs few repetitions (tree_verify at 128k prefix can
# take seconds): one warm-up, at most LONG_MIN_REPS repetitions before the budget is looked at.
LONG_US = 50_000.0
LONG_MIN_REPS = 3


# ------------------------------------------------------------------------------------------- policy
@dataclasses.dataclass(frozen=True)
class Policy:
    """How much to repeat: `warmup` untimed calls, then repetitions until `budget_s` of wall time is spent,
    never fewer than `min_reps` nor more than `max_reps`; device repetitions are enqueued `batch` at a time
    between clock checks."""

    warmup: int = 3
    min_reps: int = 5
    max_reps: int = 200
    budget_s: float = 1.0
    batch: int = 10

    def __post_init__(self):
        if not (self.warmup >= 0 and 1 <= self.min_reps <= self.max_reps and self.budget_s >= 0 and self.batch >= 1):
            raise ValueError(f"inconsistent timing policy {self}")


def policy_from_env(**overrides) -> Policy:
    """The default policy, with the time budget per measurement from KDTREE_PERF_BUDGET_S when set."""
    if os.environ.get("KDTREE_PERF_BUDGET_S"):
        overrides.setdefault("budget_s", float(os.environ["KDTREE_PERF_BUDGET_S"]))
    return Policy(**overrides)


def repeat(measure: Callable[[int], list[float]], policy: Policy, clock: Callable[[], float] = time.perf_counter):
    """Samples from `measure(n)` (which returns n samples) until max_reps samples, or until the budget is spent
    and min_reps were taken. The first call asks for one sample, to size the next batches: a launch of
    seconds is not repeated ten times before the budget is looked at."""
    samples: list[float] = []
    start = clock()
    per_sample = None
    while len(samples) < policy.max_reps:
        spent = clock() - start
        if len(samples) >= policy.min_reps and spent >= policy.budget_s:
            break
        if per_sample is None:
            n = 1  # the first sample sizes the rest
        elif len(samples) < policy.min_reps:
            n = policy.min_reps - len(samples)
        else:
            left = policy.budget_s - spent
            n = max(1, min(policy.batch, math.ceil(left / per_sample) if per_sample > 0 else policy.batch))
        n = min(n, policy.max_reps - len(samples))
        t0 = clock()
        got = measure(n)
        if len(got) != n:
            raise RuntimeError(f"measure({n}) returned {len(got)} samples")
        samples += got
        per_sample = (clock() - t0) / n
    return samples


# ------------------------------------------------------------------------------------------- statistics
def summary(samples_us: Sequence[float], *, where: str = "device", method: str = "") -> dict:
    """Median and spread of samples in µs: p10/p90, quartiles, min, and `rel_spread` = (p90 − p10) / median."""
    xs = sorted(float(x) for x in samples_us)
    if not xs:
        raise ValueError("no samples")
    if len(xs) > 1:
        deciles = statistics.quantiles(xs, n=10, method="inclusive")
        quarts = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        deciles, quarts = [xs[0]] * 9, [xs[0]] * 3
    med = statistics.median(xs)
    return {
        "median_us": med,
        "p10_us": deciles[0],
        "p90_us": deciles[-1],
        "q1_us": quarts[0],
        "q3_us": quarts[-1],
        "min_us": xs[0],
        "mean_us": statistics.fmean(xs),
        "rel_spread": (deciles[-1] - deciles[0]) / med if med > 0 else 0.0,
        "n": len(xs),
        "where": where,
        "method": method,
    }


# ------------------------------------------------------------------------------------------- L2 plan
@dataclasses.dataclass(frozen=True)
class L2Plan:
    """How one case keeps its inputs out of L2 between timed launches.

    mode: "large" (one input set is itself over the target: graph replays stream it through L2),
    "rotate" (`sets` input sets cycled, together over the target), "flush" (a `flush_bytes` memset before
    every timed launch), or "warm" (graph replays of the same inputs, hot in L2: a secondary number)."""

    mode: str
    sets: int = 1
    flush_bytes: int = 0

    def describe(self, set_bytes: int) -> str:
        if self.mode == "large":
            return f"working set {set_bytes / MiB:.0f} MiB per launch (over the L2 target by itself)"
        if self.mode == "rotate":
            return f"{self.sets} input sets rotated ({self.sets * set_bytes / MiB:.0f} MiB)"
        if self.mode == "flush":
            return f"L2 flushed before each launch ({self.flush_bytes / MiB:.0f} MiB memset)"
        return "same inputs replayed (L2 warm)"


WARM = L2Plan("warm")


def l2_plan(set_bytes: int, l2_bytes: int, *, max_sets: int = 1, target: int = ROTATE_TARGET_BYTES) -> L2Plan:
    """Rotate when at most `max_sets` input sets reach max(target, 2 × L2) bytes together; flush otherwise."""
    need = max(int(target), 2 * int(l2_bytes))
    if set_bytes >= need:
        return L2Plan("large", 1)
    sets = math.ceil(need / max(int(set_bytes), 1))
    if sets <= max_sets:
        return L2Plan("rotate", sets)
    return L2Plan("flush", 1, need)


# ------------------------------------------------------------------------------------------- host work
def host_times_us(fn: Callable[[], object], policy: Policy, clock: Callable[[], float] = time.perf_counter):
    """Wall time of `fn()` in µs, per call, after `policy.warmup` untimed calls."""
    for _ in range(policy.warmup):
        fn()

    def measure(n):
        out = []
        for _ in range(n):
            t = clock()
            fn()
            out.append((clock() - t) * 1e6)
        return out

    return repeat(measure, policy, clock)


def host_times_capped_us(
    fn: Callable[[], object], policy: Policy, cap_s: float, method: str = "host clock", clock=time.perf_counter
):
    """host_times_us, unless the first call takes over `cap_s` seconds: then that one call is the sample (a
    stage must fit its time). Returns (samples, method described)."""
    t = clock()
    fn()
    first = clock() - t
    if first > cap_s:
        return [first * 1e6], f"one call (over the {cap_s:g} s cap of the stage), host clock"
    return host_times_us(fn, policy, clock), method


def rounds_for(estimate_s: float, policy: Policy) -> int:
    """pytest-benchmark rounds that fit the policy's budget for a call of `estimate_s` seconds."""
    if estimate_s <= 0:
        return policy.max_reps
    floor = policy.min_reps if estimate_s * policy.min_reps <= 4 * policy.budget_s else 1
    return max(floor, min(policy.max_reps, int(policy.budget_s / estimate_s)))


# ------------------------------------------------------------------------------------------- device work
_ok = runtime.driver_result  # a driver call's result: RuntimeError naming its error


def l2_bytes() -> int:
    """The current GPU's L2 size in bytes."""
    from cuda.bindings import driver

    dev = _ok(driver.cuDeviceGet(int(runtime.gpu().device.device_id)))
    return int(_ok(driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)))


def for_launch(policy: Policy, launch_us: float) -> Policy:
    """The policy for a launch of `launch_us`: long launches get one warm-up and fewer minimum repetitions."""
    if launch_us < LONG_US:
        return policy
    return dataclasses.replace(policy, warmup=1, min_reps=min(policy.min_reps, LONG_MIN_REPS),
                               max_reps=max(policy.max_reps, LONG_MIN_REPS))  # fmt: skip


def per_graph_for(launch_us: float) -> int:
    """Launches per graph replay: enough to span GRAPH_SPAN_US, at most MAX_PER_GRAPH."""
    if launch_us <= 0:
        return MAX_PER_GRAPH
    return max(1, min(MAX_PER_GRAPH, math.ceil(GRAPH_SPAN_US / launch_us)))


def device_times_us(
    launches: Sequence[Callable[[], None]], *, plan: L2Plan, policy: Policy, clock=time.perf_counter
) -> tuple[list[float], str]:
    """Device time per launch in µs, with CUDA events on the harness stream, and how it was taken.

    `launches` are one enqueue-only callable per input set (cycled in order). "large", "rotate" and "warm"
    capture back-to-back launches into a CUDA graph and time each replay (divided by its launches), so the
    host launch overhead (~7 µs through cuda.core, longer than many of these kernels) is not counted. "flush"
    enqueues a memset of `plan.flush_bytes`, then an event pair around one launch replayed from a CUDA graph of
    its kernels: the memset keeps the device busy while the host enqueues, so the pair brackets the kernels
    (plus a launch gap under a µs), a call of several kernels included.
    A launch that cannot be captured (it allocates or synchronises) is timed with host-enqueued event pairs.
    """
    from cuda.core import EventOptions

    s = runtime.gpu().stream
    opts = EventOptions(timing_enabled=True)
    launches = list(launches)
    for f in launches:  # the first warm-up: module load, first-touch of the buffers
        f()
    s.sync()
    e0 = s.record(options=opts)
    launches[0]()
    e1 = s.record(options=opts)
    e1.sync()
    single_us = (e1 - e0) * 1000.0
    policy = for_launch(policy, single_us)
    for _ in range(policy.warmup - 1):
        for f in launches:
            f()

    if plan.mode == "flush":
        # each launch replayed from its own CUDA graph: a call of two kernels (a split and a merge) is then one
        # host enqueue that the memset covers, as the comparators' graph replays are, instead of a second host
        # launch (~7 µs through cuda.core) that the event pair would bracket
        graphs = []
        try:
            for f in launches:
                graphs.append(runtime.capture_graph(s, [f]))
        except RuntimeError:
            _destroy(graphs)
            return _flushed(launches, plan.flush_bytes, policy, clock), "an event pair around each launch"
        try:
            replays = [lambda exe=exe: _ok(_driver().cuGraphLaunch(exe, s.handle)) for _g, exe in graphs]
            samples = _flushed(replays, plan.flush_bytes, policy, clock)
        finally:
            _destroy(graphs)
        return samples, "an event pair around each launch, replayed from a CUDA graph of its kernels"
    per_graph = per_graph_for(single_us)
    per_graph = math.ceil(max(per_graph, len(launches)) / len(launches)) * len(launches)
    try:
        graph, exe = runtime.capture_graph(s, [launches[i % len(launches)] for i in range(per_graph)])
    except RuntimeError as e:
        return _unflushed(launches, policy, clock), f"host-enqueued event pairs (graph capture failed: {e})"
    try:
        _ok(_driver().cuGraphLaunch(exe, s.handle))
        s.sync()

        def measure(n):
            pairs = []
            for _ in range(n):
                a = s.record(options=opts)
                _ok(_driver().cuGraphLaunch(exe, s.handle))
                pairs.append((a, s.record(options=opts)))
            pairs[-1][1].sync()
            return [(b - a) * 1000.0 / per_graph for a, b in pairs]

        return repeat(measure, policy, clock), f"CUDA graph of {per_graph} launches per replay"
    finally:
        runtime.destroy_graph(graph, exe)


def _driver():
    from cuda.bindings import driver

    return driver


def _destroy(graphs) -> None:
    for graph, exe in graphs:
        runtime.destroy_graph(graph, exe)


def _flushed(launches, flush_bytes, policy, clock):
    from cuda.core import EventOptions

    g = runtime.gpu()
    s = g.stream
    opts = EventOptions(timing_enabled=True)
    words = max(flush_bytes // 4, 1)
    buf = g.device.memory_resource.allocate(words * 4, stream=s)
    turn = [0]
    try:

        def measure(n):
            pairs = []
            for _ in range(n):
                _ok(_driver().cuMemsetD32Async(int(buf.handle), 0x3F800000 + turn[0] % 7, words, s.handle))
                a = s.record(options=opts)
                launches[turn[0] % len(launches)]()
                pairs.append((a, s.record(options=opts)))
                turn[0] += 1
            pairs[-1][1].sync()
            return [(b - a) * 1000.0 for a, b in pairs]

        return repeat(measure, policy, clock)
    finally:
        buf.close(s)


def _unflushed(launches, policy, clock):
    from cuda.core import EventOptions

    s = runtime.gpu().stream
    opts = EventOptions(timing_enabled=True)
    turn = [0]

    def measure(n):
        pairs = []
        for _ in range(n):
            a = s.record(options=opts)
            launches[turn[0] % len(launches)]()
            pairs.append((a, s.record(options=opts)))
            turn[0] += 1
        pairs[-1][1].sync()
        return [(b - a) * 1000.0 for a, b in pairs]

    return repeat(measure, policy, clock)


def torch_times_us(
    fn: Callable[[], object], *, flush_bytes: int, policy: Policy, clock=time.perf_counter, hide_launch: bool = False
):
    """Device time of torch work `fn()` on torch's current stream, µs per call, with a flush of `flush_bytes`
    (0: none) before each call. Eager torch launches from the host, so a call that is launch-bound is timed
    with its launch gaps: what a user running it gets. With `hide_launch` (a library kernel whose time is the
    question, as a CUDA graph would run it), a sleep kernel longer than the call's host enqueue time runs
    between the flush and the first event, so the events bracket the device work only."""
    import torch

    flush = torch.empty(max(flush_bytes // 4, 1), dtype=torch.int32, device="cuda") if flush_bytes else None
    host_s = []
    for _ in range(max(policy.warmup, 1)):
        t = clock()
        fn()
        host_s.append(clock() - t)
        torch.cuda.synchronize()
    sleep_cycles = 0
    if hide_launch and hasattr(torch.cuda, "_sleep"):
        rate_khz = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "clock_rate", 2_000_000)
        sleep_cycles = int((2 * min(host_s) + 50e-6) * rate_khz * 1e3)  # twice the enqueue time, + 50 µs

    def measure(n):
        pairs = []
        for i in range(n):
            if flush is not None:
                flush.fill_(i + 1)
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            pairs.append((a, b))
        torch.cuda.synchronize()
        return [a.elapsed_time(b) * 1000.0 for a, b in pairs]

    return repeat(measure, policy, clock)


def torch_graph_times_us(fn: Callable[[], object], *, flush_bytes: int, policy: Policy, clock=time.perf_counter):
    """Device time of torch work `fn()` captured once in a CUDA graph and replayed, µs per call, with a flush of
    `flush_bytes` (0: none) before each replay: what a serving step that captures its work pays, without the
    host launch gaps of eager torch (the flush ahead of each replay hides the graph's own launch). The replays are
    timed by torch_times_us."""
    import torch

    fn()  # allocations and lazy initialisation happen outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return torch_times_us(graph.replay, flush_bytes=flush_bytes, policy=policy, clock=clock)

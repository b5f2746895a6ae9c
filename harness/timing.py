"""Device timing with CUDA events (cuda.core) for the benchmarks, and the measured hardware ceilings."""

from __future__ import annotations

import functools
import statistics
import time


def event_times_us(launch, *, warmup: int = 5, reps: int = 50, per_graph: int = 20) -> list[float]:
    """Per-launch device time in µs.

    A kernel of a few µs is shorter than the host's launch overhead (~7 µs through cuda.core), so an event
    pair around one launch on an idle stream measures the host. Instead `per_graph` launches are captured
    into a CUDA graph, and each of `reps` replays is timed with an event pair and divided by `per_graph`:
    back-to-back kernels with graph-node gaps (well under a µs) and no host in the loop.
    """
    from cuda.bindings import driver
    from cuda.core import EventOptions

    from kernels_cu import runtime

    s = runtime.gpu().stream
    opts = EventOptions(timing_enabled=True)
    for _ in range(warmup):
        launch()
    s.sync()
    _ok(driver.cuStreamBeginCapture(s.handle, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    try:
        for _ in range(per_graph):
            launch()
    finally:
        graph = _ok(driver.cuStreamEndCapture(s.handle))
    exe = _ok(driver.cuGraphInstantiate(graph, 0))
    try:
        _ok(driver.cuGraphLaunch(exe, s.handle))
        s.sync()
        out = []
        for _ in range(reps):
            e0 = s.record(options=opts)
            _ok(driver.cuGraphLaunch(exe, s.handle))
            e1 = s.record(options=opts)
            e1.sync()
            out.append((e1 - e0) * 1000.0 / per_graph)
        return out
    finally:
        _ok(driver.cuGraphExecDestroy(exe))
        _ok(driver.cuGraphDestroy(graph))


def _ok(res):
    from cuda.bindings import driver

    err, *rest = res if isinstance(res, tuple) else (res,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return rest[0] if len(rest) == 1 else (rest or None)


def summary(times: list[float]) -> dict:
    q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return {"median_us": statistics.median(times), "p10_us": q[0], "p90_us": q[-1], "n": len(times)}


def cpu_time_us(fn, *, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return out


@functools.cache
def copy_bandwidth_gbs(nbytes: int = 1 << 30) -> float:
    """Measured device-to-device copy rate, counting bytes read plus written (the memory roofline)."""
    from cuda.bindings import driver

    from kernels_cu import runtime

    g = runtime.gpu()
    a = g.device.memory_resource.allocate(nbytes, stream=g.stream)
    b = g.device.memory_resource.allocate(nbytes, stream=g.stream)
    try:

        def copy():
            _ok(driver.cuMemcpyDtoDAsync(int(b.handle), int(a.handle), nbytes, g.stream.handle))

        t = statistics.median(event_times_us(copy, warmup=3, reps=10, per_graph=2))
        return 2 * nbytes / (t * 1e-6) / 1e9
    finally:
        a.close(g.stream)
        b.close(g.stream)

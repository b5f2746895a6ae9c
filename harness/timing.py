"""Device timing with CUDA events (cuda.core) for the benchmarks, and the measured hardware ceilings."""
from __future__ import annotations

import functools
import statistics
import time


def event_times_us(launch, *, warmup: int = 5, reps: int = 50) -> list[float]:
    """Per-launch device time in µs: an event pair around each launch, after `warmup` untimed launches."""
    from cuda.core import EventOptions
    from kernels_cu import runtime
    s = runtime.gpu().stream
    opts = EventOptions(timing_enabled=True)
    for _ in range(warmup):
        launch()
    s.sync()
    out = []
    for _ in range(reps):
        e0 = s.record(options=opts)
        launch()
        e1 = s.record(options=opts)
        e1.sync()
        out.append((e1 - e0) * 1000.0)
    return out


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
            (err,) = driver.cuMemcpyDtoDAsync(int(b.handle), int(a.handle), nbytes, g.stream.handle)
            assert err == driver.CUresult.CUDA_SUCCESS, err
        t = statistics.median(event_times_us(copy, warmup=3, reps=10))
        return 2 * nbytes / (t * 1e-6) / 1e9
    finally:
        a.close(g.stream)
        b.close(g.stream)

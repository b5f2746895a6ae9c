"""Host↔device copies that a CPU-side tree build adds to a decoding step: the drafter's top-k comes down
(device → host), the tree's layouts go up (host → device). Timed as a user's code does them: synchronous
copies from and to pageable numpy memory, with a host clock: the copies alone (`round_trip_us`), or a whole
CPU build as a serving engine runs it (`serving_e2e_us`)."""

from __future__ import annotations

import numpy as np

from harness import timing


def round_trip_us(down_nbytes: int, up_nbytes: int, policy: timing.Policy) -> list[float]:
    """µs per (copy down_nbytes device → host, then up_nbytes host → device), pageable host memory."""
    from cuda.bindings import driver

    from kernels_cu import runtime

    g = runtime.gpu()
    down_nbytes, up_nbytes = max(int(down_nbytes), 4), max(int(up_nbytes), 4)
    d_in = g.device.memory_resource.allocate(down_nbytes, stream=g.stream)
    d_out = g.device.memory_resource.allocate(up_nbytes, stream=g.stream)
    h_in = np.empty(down_nbytes, np.uint8)
    h_out = np.ones(up_nbytes, np.uint8)
    g.stream.sync()
    try:

        def one():
            timing._ok(driver.cuMemcpyDtoH(h_in.ctypes.data, int(d_in.handle), down_nbytes))
            timing._ok(driver.cuMemcpyHtoD(int(d_out.handle), h_out.ctypes.data, up_nbytes))

        return timing.host_times_us(one, policy)
    finally:
        d_in.close(g.stream)
        d_out.close(g.stream)
        g.stream.sync()


def serving_e2e_us(make_builder, args, policy: timing.Policy, *, cap_s: float = 1.0) -> tuple[list[float], str]:
    """µs per CPU tree build as a serving engine runs one: the drafter's top-k (log-probs, ids) copied device →
    host, the build (`make_builder(*host_args)()`, reading the buffers those copies fill), every output field
    copied host → device; synchronous copies, pageable memory, host clock. A call over `cap_s` is timed once.
    Returns (samples, method)."""
    from cuda.bindings import driver

    from kernels_cu import runtime

    g = runtime.gpu()
    top_logp, top_ids, *rest = args
    host_in = [np.empty_like(top_logp), np.empty_like(top_ids)]
    bufs = []

    def alloc(nbytes):
        bufs.append(g.device.memory_resource.allocate(max(int(nbytes), 4), stream=g.stream))
        return int(bufs[-1].handle)

    try:
        d_in = [alloc(a.nbytes) for a in (top_logp, top_ids)]
        for d, a in zip(d_in, (top_logp, top_ids)):
            timing._ok(driver.cuMemcpyHtoD(d, np.ascontiguousarray(a).ctypes.data, a.nbytes))
        build = make_builder(*host_in, *rest)
        d_out: list[int] = []

        def one():
            for h, d in zip(host_in, d_in):
                timing._ok(driver.cuMemcpyDtoH(h.ctypes.data, d, h.nbytes))
            tree = build()
            fields = [np.ascontiguousarray(getattr(tree, f)) for f in type(tree).FIELDS]
            if not d_out:
                d_out.extend(alloc(a.nbytes) for a in fields)
            for d, a in zip(d_out, fields):
                if a.nbytes:
                    timing._ok(driver.cuMemcpyHtoD(d, a.ctypes.data, a.nbytes))
            g.stream.sync()

        g.stream.sync()
        return timing.host_times_capped_us(one, policy, cap_s, "host clock, synchronous copies, pageable memory")
    finally:
        for b in bufs:
            b.close(g.stream)
        g.stream.sync()

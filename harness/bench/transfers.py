"""Host↔device copies that a CPU-side tree build adds to a decoding step: the drafter's top-k comes down
(device → host), the tree's layouts go up (host → device). Timed as a user's code does them: synchronous
copies from and to pageable numpy memory, with a host clock."""

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

"""The copy-ceiling kernel compiles for every arch without a GPU (NVRTC), and the host-side pieces of the
ceiling measurement are right: the fill pattern's numpy twin and the launch geometry."""

import numpy as np
import pytest

from harness import device, tools
from harness.bench import ceilings
from kernels_cu import runtime


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch", ceilings.COPY_SPEC.archs)
def test_copy_kernel_compiles_without_spills(request, arch):
    ok, why = device.nvrtc_available()
    if not ok:
        tools.missing(request.config, f"NVRTC unavailable: {why}")
    c = runtime.compile_kernel(ceilings.COPY_SPEC, arch)
    assert c.cubin[:4] == b"\x7fELF"
    assert {"copy_kernel", "fill_kernel", "read_kernel"} <= set(c.resources), c.log
    for entry in ("copy_kernel", "fill_kernel", "read_kernel"):
        r = c.resources[entry]
        assert r["spill_stores"] == r["spill_loads"] == r["stack"] == 0, (entry, r)


def _lowbias32_scalar(i: int, seed: int) -> int:
    """fill_kernel's hash, written out with Python ints (32-bit wraparound by hand)."""
    x = ((i & 0xFFFFFFFF) ^ (i >> 32) ^ seed) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    x ^= x >> 16
    return x


def test_fill_pattern_twin_matches_the_kernel_formula():
    idx = np.array([0, 1, 2, 12345, 2**31 + 7, 2**33 + 5], np.uint64)
    got = ceilings.lowbias32(idx)
    assert got.tolist() == [_lowbias32_scalar(int(i), ceilings._SEED) for i in idx]
    window = ceilings.lowbias32(np.arange(1 << 16, dtype=np.uint64))
    assert len(np.unique(window)) > 65000 and (window != 0).all(), "the copy must not run on zeros or repeats"


def test_copy_geometry_covers_the_buffer():
    n16, blocks = ceilings.copy_grid(ceilings.COPY_BYTES)
    assert n16 * 16 == ceilings.COPY_BYTES >= 2 << 30
    assert blocks * 256 * 4 >= n16 > (blocks - 1) * 256 * 4


def test_read_xor_twin():
    """The read kernel's expected answer: the XOR of the fill's words, by the vectorised twin and by hand."""
    n = 4096
    words = [_lowbias32_scalar(i, ceilings._SEED) for i in range(n // 4)]
    want = 0
    for w in words:
        want ^= w
    assert ceilings.read_xor(n) == want != 0

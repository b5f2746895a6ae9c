"""tree_verify's launch geometry has one source, kernels_cu/tree_verify.cuh: the host library that the
wrapper calls (kernels_cu/geometry.py) and the kernels compiled by NVRTC must read it alike, and the split-KV
rule must have the properties the kernel relies on."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels_cu import geometry

VARIANTS = ("bf16", "fp32", "sm90a")
ARGS = [
    (n_keys, rows, v, chunk)
    for n_keys, rows, v, chunk in itertools.product(
        [1, 2, 31, 32, 33, 511, 512, 513, 1025, 8192 + 16, 32768 + 1, 262_144],
        [1, 3, 63, 64, 65, 1024, 1025 * 128],
        [0, 1, 2],
        [0, 1, 7, 64, 4096],
    )
]


def test_fields_come_from_the_header():
    names = geometry.tree_verify_fields()
    assert {"threads", "smem_bytes", "row_tiles", "split_chunk", "n_splits", "combine_blocks"} <= set(names)
    assert geometry.tree_verify_variant("bf16") != geometry.tree_verify_variant("fp32")


@pytest.mark.parametrize("dtype_name", VARIANTS)
def test_shared_memory_fits_hopper(dtype_name):
    g = geometry.tree_verify(1, 1, geometry.tree_verify_variant(dtype_name))
    assert g["smem_bytes"] % 16 == 0
    assert g["smem_bytes"] <= 227 * 1024, "more shared memory than an sm_90 CTA can opt into"


@pytest.mark.parametrize("n_keys,rows,v,chunk", ARGS[::7])
def test_split_rule(n_keys, rows, v, chunk):
    """Splits tile the request's keys exactly; default chunks are whole key blocks and never split a request
    into pieces under the minimum unless it is shorter than that."""
    g = geometry.tree_verify(n_keys, rows, v, chunk)
    c, n = g["split_chunk"], g["n_splits"]
    assert c >= 1 and n >= 1
    assert (n - 1) * c < n_keys <= n * c
    assert g["row_tiles"] * g["m_tile"] >= rows > (g["row_tiles"] - 1) * g["m_tile"]
    if chunk > 0:
        assert c == chunk
    else:
        assert c % g["block_n"] == 0
        assert n == 1 or c >= 512 - g["block_n"]


@pytest.mark.gpu
def test_host_library_matches_device_query_kernel():
    from cuda.core import LaunchConfig, launch

    from kernels_cu import runtime, specs
    from kernels_cu.arrays import Staging

    spec = specs.get("tree_verify", "portable")
    args = np.array(ARGS, np.int64)
    st = Staging(None, None)
    try:
        a = st.input(args)
        out = st.output((len(args), 16), np.int64)
        kernel = runtime.load(spec, 0, entry=spec.geometry)
        launch(runtime.gpu().stream, LaunchConfig(grid=(len(args) + 127) // 128, block=128), kernel, a,
               np.int32(len(args)), out[1])  # fmt: skip
        dev = st.result(out[0])
    finally:
        st.close()
    names = geometry.tree_verify_fields()
    for row, got in zip(ARGS, dev):
        want = geometry.tree_verify(*row)
        assert dict(zip(names, got[: len(names)].tolist())) == want, row

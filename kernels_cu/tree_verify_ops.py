"""CUDA tree_verify (kernels_cu/tree_verify.cu, variant "portable"), with the reference's signature.

Inputs are validated by the reference's own `validate_inputs` before anything reaches the GPU (for device
q and kv_cache only their shape and dtype are needed, so zero-stride numpy stand-ins carry those). numpy in,
numpy out; cupy or torch device arrays in, arrays of that library out (ops.py's conventions). The launch
geometry (grid, threads, shared memory, the split-KV plan) comes from the kernel's geometry header through
kernels_cu/geometry.py.

Split-KV: request b's keys are cut into chunks of `split_chunk` keys (default: the header's rule, from the
request's own length and Q·H); a request with one chunk is written by the attention kernel directly, the
others get partial-output slots that the combine kernel merges in chunk order.
"""

from __future__ import annotations

import numpy as np

from reference import tree_verify as ref
from reference import validate as v
from reference.tree_verify import BF16

from . import geometry, ops, runtime

SLUG = "tree_verify"
VARIANT = "portable"
_ENTRIES = {"bf16": ("tree_verify_bf16_kernel", "tree_verify_combine_bf16_kernel"),
            "fp32": ("tree_verify_f32_kernel", "tree_verify_combine_f32_kernel")}  # fmt: skip
MAX_GRID_Y = 65535  # splits per request (grid y)


class _Staging(ops.Staging):
    """ops.Staging plus torch bf16/float32 outputs and device-only scratch buffers."""

    def output(self, shape, dtype):
        dtype = np.dtype(dtype)
        if self.lib == "torch" and dtype in (BF16, np.dtype(np.float32)):
            import torch

            t = torch.empty(shape, dtype=torch.bfloat16 if dtype == BF16 else torch.float32, device=self.like.device)
            return t, t.data_ptr()
        if self.lib == "cupy" and dtype == BF16:  # cupy has no bf16; q would have been rejected before this
            v.fail("q", "cupy has no bfloat16 arrays; pass bf16 inputs as torch tensors or numpy arrays")
        return super().output(shape, dtype)

    def scratch(self, nbytes: int) -> int:
        return int(self._alloc(max(int(nbytes), 1)).handle)


def _stand_in(x) -> np.ndarray:
    """A zero-stride numpy array with a device array's shape and dtype (validation reads nothing else)."""
    return np.broadcast_to(np.zeros((), x.dtype), x.shape)


def _aligned(name, x):
    if isinstance(x, ops.DeviceArray) and x.ptr % 16:
        v.fail(name, f"device pointer 0x{x.ptr:x} is not 16-byte aligned (the kernel copies 16-byte vectors)")


def split_plan(prefix_lens: np.ndarray, Q: int, H: int, dtype_name: str, split_chunk=None):
    """(chunk per request, first partial slot per request, partial slots, splits of the longest request).
    A request with one split needs no slot (its slot entry is 0 and unused)."""
    var = geometry.tree_verify_variant(dtype_name)
    chunk = np.empty(len(prefix_lens), np.int64)
    first = np.zeros(len(prefix_lens), np.int64)
    slots = most = 0
    for b, p in enumerate(prefix_lens):
        g = geometry.tree_verify(int(p) + Q, Q * H, var, split_chunk or 0)
        chunk[b] = g["split_chunk"]
        n = g["n_splits"]
        most = max(most, n)
        if n > 1:
            first[b] = slots
            slots += n
    return chunk, first, slots, most


def prepare_tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, *, split_chunk=None):
    """Validate, stage and plan one call; `launch()` enqueues the attention kernel and, when a request is
    split, the combine kernel (what a benchmark times)."""
    lib, like, host, dev = ops._args(
        q=q, kv_cache=kv_cache, block_table=block_table, prefix_lens=prefix_lens, visibility=visibility
    )
    h = {k: (x.host() if isinstance(x, ops.DeviceArray) and k not in ("q", "kv_cache") else x) for k, x in host.items()}
    for k in ("q", "kv_cache"):
        if isinstance(h[k], ops.DeviceArray):
            h[k] = _stand_in(h[k])
    bs, Q, H = ref.validate_inputs(
        h["q"], h["kv_cache"], h["block_table"], h["prefix_lens"], h["visibility"], softmax_scale
    )
    if split_chunk is not None:
        split_chunk = v.integer("split_chunk", split_chunk, 1, 2**31 - 1)
    _aligned("q", host["q"])
    _aligned("kv_cache", host["kv_cache"])
    dtype = h["q"].dtype
    name = "bf16" if dtype == BF16 else "fp32"
    var = geometry.tree_verify_variant(name)
    geo = geometry.tree_verify(1, Q * H, var)
    chunk, first, slots, most = split_plan(h["prefix_lens"], Q, H, name, split_chunk)
    if most > MAX_GRID_Y:
        v.fail("split_chunk", f"{split_chunk} keys per split gives {most} splits, more than {MAX_GRID_Y}")
    QH = Q * H
    st = _Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("q", "kv_cache", "block_table", "prefix_lens", "visibility")]
        chunk_ptr, first_ptr = st.input(chunk), st.input(first)
        out = st.output((bs, Q, H, v.LATENT), dtype)
        lse = st.output((bs, Q, H), np.float32)
        part_o = st.scratch(slots * QH * v.LATENT * 4)
        part_lse = st.scratch(slots * QH * 4)
    except BaseException:
        st.close()
        raise
    kv_shape = h["kv_cache"].shape
    attention, combine = _ENTRIES[name]
    args = (
        *ins,
        np.float32(softmax_scale),
        np.int32(Q),
        np.int32(H),
        np.int32(kv_shape[1]),
        np.int32(h["block_table"].shape[1]),
        chunk_ptr,
        first_ptr,
        out[1],
        lse[1],
        part_o,
        part_lse,
    )
    grid = (geo["row_tiles"], most, bs)
    smem = geo["smem_bytes"]
    combine_args = (part_o, part_lse, chunk_ptr, first_ptr, ins[3], np.int32(Q), np.int32(H), out[1], lse[1])

    def launch():
        _launch(attention, grid, geo["threads"], smem, *args)
        if slots:
            _launch(combine, (geo["combine_blocks"], bs, 1), geo["combine_threads"], 0, *combine_args)

    return ops.Prepared(st, launch, lambda: (st.result(out[0]), st.result(lse[0])))


def _launch(entry, grid, block, smem, *args):
    from cuda.core import LaunchConfig, launch

    kernel = runtime.load(SLUG, smem, entry=entry)
    launch(runtime.gpu().stream, LaunchConfig(grid=grid, block=block, shmem_size=smem), kernel, *args)


def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, *, split_chunk=None):
    """(out [bs, Q, H, 512] in q's dtype, lse float32 [bs, Q, H]), as reference.tree_verify.tree_verify."""
    p = prepare_tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, split_chunk=split_chunk)
    p.launch()
    return p.finish()

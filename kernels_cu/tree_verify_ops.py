"""Launch of a tree_verify kernel spec (kernels_cu/tree_verify.cu, variant "portable"): validation by the
contract (on host copies of the index arrays and the mask; q and the cache by shape and dtype alone), the
launch geometry and the split-KV plan from the kernel's header (kernels_cu/geometry.py), buffers, launches.

Split-KV: request b's keys are cut into chunks of `split_chunk` keys (default: the header's rule, from the
request's own length and Q·H); a request with one chunk is written by the attention kernel directly, the
others get partial-output slots that the combine kernel merges in chunk order.
"""

from __future__ import annotations

import numpy as np

from contract import BF16, TREE_VERIFY, InputError, Verified, limits
from contract.checks import integer

from . import geometry
from .arrays import Prepared, Staging, call_args, check_aligned, launch_kernel, run, split_args
from .specs import KernelSpec

_ENTRIES = {"bf16": ("tree_verify_bf16_kernel", "tree_verify_combine_bf16_kernel"),
            "fp32": ("tree_verify_f32_kernel", "tree_verify_combine_f32_kernel")}  # fmt: skip
MAX_GRID_Y = 65535  # splits per request (grid y)
# The partial outputs of split requests are fp32 [slots, Q·H, 512]: bounded so that a tiny forced chunk
# on a long prefix is refused rather than asked of the device allocator.
MAX_PARTIAL_BYTES = 8 << 30


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


def prepare(spec: KernelSpec, *args, split_chunk=None, **kwargs) -> Prepared:
    """Validate a tree_verify call (the contract's signature) and set it up on the device for `spec`;
    `split_chunk` forces the keys per split (a tuning knob of this variant). `launch()` enqueues the
    attention kernel and, when a request is split, the combine kernel (what a benchmark times)."""
    lib, like, host, dev = split_args(TREE_VERIFY, TREE_VERIFY.bind(*args, **kwargs))
    checked = TREE_VERIFY.validate(**host)
    a, d = checked.args, checked.dims
    if split_chunk is not None:
        split_chunk = integer("split_chunk", split_chunk, 1, limits.MAX_CONTEXT)
    check_aligned("q", dev["q"], "the kernel copies 16-byte vectors")
    check_aligned("kv_cache", dev["kv_cache"], "the kernel copies 16-byte vectors")
    bs, Q, H = d["bs"], d["Q"], d["H"]
    dtype = d["T"]
    if lib == "cupy" and dtype == BF16:
        raise InputError("q: cupy has no bfloat16 arrays; pass bf16 inputs as torch tensors or numpy arrays")
    name = "bf16" if dtype == BF16 else "fp32"
    geo = geometry.tree_verify(1, Q * H, geometry.tree_verify_variant(name))
    chunk, first, slots, most = split_plan(a["prefix_lens"], Q, H, name, split_chunk)
    if most > MAX_GRID_Y:
        raise InputError(f"split_chunk: {split_chunk} keys per split gives {most} splits, more than {MAX_GRID_Y}")
    QH = Q * H
    if slots * QH * (limits.LATENT + 1) * 4 > MAX_PARTIAL_BYTES:
        raise InputError(f"split_chunk: {split_chunk} keys per split needs {slots} partial outputs of {QH} rows, "
                         f"more than {MAX_PARTIAL_BYTES} bytes")  # fmt: skip
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("q", "kv_cache", "block_table", "prefix_lens", "visibility")]
        chunk_ptr, first_ptr = st.input(chunk), st.input(first)
        out = st.output((bs, Q, H, limits.LATENT), dtype)
        lse = st.output((bs, Q, H), np.float32)
        part_o = st.scratch(slots * QH * limits.LATENT * 4)
        part_lse = st.scratch(slots * QH * 4)
    except BaseException:
        st.close()
        raise
    attention, combine = _ENTRIES[name]
    args = (
        *ins,
        np.float32(a["softmax_scale"]),
        np.int32(Q),
        np.int32(H),
        np.int32(d["page_size"]),
        np.int32(d["max_pages"]),
        chunk_ptr,
        first_ptr,
        out[1],
        lse[1],
        part_o,
        part_lse,
    )
    grid = (geo["row_tiles"], most, bs)
    combine_args = (part_o, part_lse, chunk_ptr, first_ptr, ins[3], np.int32(Q), np.int32(H), out[1], lse[1])

    def launch():
        launch_kernel(spec, grid, geo["smem_bytes"], *args, entry=attention, block=geo["threads"])
        if slots:
            blocks = (geo["combine_blocks"], bs, 1)
            launch_kernel(spec, blocks, 0, *combine_args, entry=combine, block=geo["combine_threads"])

    return Prepared(st, launch, lambda: Verified(st.result(out[0]), st.result(lse[0])))


def bind(spec: KernelSpec, split_chunk=None):
    """The op function of `spec` (optionally with a forced split chunk), with the contract's signature."""

    @TREE_VERIFY.implements
    def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        return run(prepare(spec, **call_args(TREE_VERIFY, locals()), split_chunk=split_chunk))

    knob = "" if split_chunk is None else f" (split_chunk={split_chunk})"
    tree_verify.__doc__ = (
        f"CUDA tree_verify, variant {spec.variant}{knob}: {spec.description}.\n\n{tree_verify.__doc__}"
    )
    return tree_verify

"""Launch of a draft_topk kernel spec: validation by the contract (on a host copy of the logits: their values
are checked for NaN and +inf), the geometry from the kernel's header, buffers and the launches (one block per
row, or a split kernel and a merge kernel through a workspace: draft_topk.cuh).

`prepare_deferred` is the capturable path for device-resident logits (spec DT.4.5): the contract's shape-only
checks on the host, the NaN / +inf check in the kernels that read the logits (an error flag), and the contract's
full validate() on a host copy only when the flag is set, when the results are read."""

from __future__ import annotations

import numpy as np

from contract import BF16, DRAFT_TOPK, TopK, limits

from . import geometry
from .arrays import (
    Deferred,
    ErrorFlag,
    Prepared,
    Staging,
    call_args,
    device_call,
    host_copies,
    launch_kernel,
    run,
    split_args,
)
from .specs import KernelSpec

# The kernels' entry name suffix per logits dtype.
_DTYPES = {BF16: "bf16", np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}


def launches(spec: KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads, most dynamic shared memory)} of every launch of `spec`'s entries in the contract's limits
    (the sorting kernels' shared memory grows with K; the split kernels use none)."""
    g = geometry.draft_topk(limits.MAX_VOCAB, limits.MAX_TOPK, 1)
    most = g["smem_bytes"]  # grows with K: the largest K asks for the most
    out = {spec.geometry: (1, 0)}
    for name in _DTYPES.values():
        out[f"draft_topk_row_{name}"] = (g["threads"], most)
        out[f"draft_topk_split_{name}"] = (g["threads"], 0)
    out["draft_topk_merge"] = (g["threads"], most)
    return out


def prepare(spec: KernelSpec, *args, **kwargs) -> Prepared:
    """Validate a draft_topk call (the contract's signature) and set it up on the device for `spec`. `launch()`
    enqueues the row kernel, or the split and merge kernels (what a benchmark times)."""
    lib, like, host, dev = split_args(DRAFT_TOPK, DRAFT_TOPK.bind(*args, **kwargs))
    checked = DRAFT_TOPK.validate(**host)
    st, launch, collect = _setup(spec, lib, like, dev["logits"], checked.dims, checked.args["K"])
    return Prepared(st, launch, collect)


def prepare_deferred(spec: KernelSpec, *args, error_flag=None, **kwargs) -> Deferred:
    """Set up a draft_topk call on device-resident logits (cupy, torch) with the value checks on the device.
    The shape-only checks run here (InputError now); a NaN or +inf logit raises the same InputError as prepare()
    would, from check() / results() after the launch. error_flag: a caller's flag word shared with other calls and
    never reset by this one (arrays.ErrorFlag)."""
    named = DRAFT_TOPK.bind(*args, **kwargs)
    lib, like, dev, infos = device_call(DRAFT_TOPK, named)
    checked = DRAFT_TOPK.validate_shapes(**infos)
    flag = ErrorFlag(error_flag)
    st, launch, collect = _setup(spec, lib, like, dev["logits"], checked.dims, checked.args["K"], flag)

    def revalidate():  # raises the named error, with the first bad index
        DRAFT_TOPK.validate(**host_copies(DRAFT_TOPK, named))

    return Deferred(st, launch, collect, flag.ptr, revalidate, "draft_topk")


def _setup(spec: KernelSpec, lib, like, x, dims: dict, K: int, flag: ErrorFlag | None = None) -> tuple:
    """The buffers and the launch of a checked call on logits `x` (numpy or device): (staging, launch, collect).
    flag: the deferred path's error flag for the kernels' NaN / +inf check, cleared by each launch
    (ErrorFlag.clear); None: the kernels check nothing."""
    bs, L, V = (dims[s] for s in ("bs", "L", "V"))
    name = _DTYPES[np.dtype(x.dtype)]
    rows = bs * L
    geo = geometry.draft_topk(V, K, rows)
    st = Staging(lib, like)
    try:
        st.sync_before()
        x_ptr = st.input(x)
        logp = st.output((bs, L, K), np.float32)
        ids = st.output((bs, L, K), np.int32)
        ws = st.scratch(geo["workspace_bytes"]) if geo["splits"] > 1 and rows else 0
        flag_ptr = flag.allocate(st) if flag is not None else 0
    except BaseException:
        st.close()
        raise
    threads, smem, splits = geo["threads"], geo["smem_bytes"], geo["splits"]
    ws_lse = ws + rows * splits * geo["kept"] * 8  # the (max, sum) pairs after the candidate keys

    def launch():
        if flag is not None:
            flag.clear(st)
        if rows == 0:  # L = 0: nothing to select
            return
        if splits == 1:
            launch_kernel(spec, rows, smem, x_ptr, np.int32(V), np.int32(K), logp[1], ids[1], flag_ptr,
                          entry=f"draft_topk_row_{name}", block=threads)  # fmt: skip
        else:
            launch_kernel(spec, (splits, rows, 1), 0, x_ptr, np.int32(V), np.int32(K), ws, ws_lse, flag_ptr,
                          entry=f"draft_topk_split_{name}", block=threads)  # fmt: skip
            launch_kernel(spec, rows, smem, ws, ws_lse, np.int32(splits), np.int32(V), np.int32(K), logp[1], ids[1],
                          entry="draft_topk_merge", block=threads)  # fmt: skip

    return st, launch, lambda: TopK(st.result(logp[0]), st.result(ids[0]))


def bind(spec: KernelSpec):
    """The op function of `spec`, with the contract's signature and documentation."""

    @DRAFT_TOPK.implements
    def draft_topk(logits, K):
        return run(prepare(spec, **call_args(DRAFT_TOPK, locals())))

    draft_topk.__doc__ = f"CUDA draft_topk, variant {spec.variant}: {spec.description}.\n\n{draft_topk.__doc__}"
    return draft_topk

"""Launch of a tree_accept kernel spec: validation by the contract (on host copies of the index arrays; the
cache by shape alone), the geometry from the kernel's header, buffers, the launch and the in-place commit."""

from __future__ import annotations

import numpy as np

from contract import TREE_ACCEPT, Accept, limits

from . import geometry
from .arrays import (
    DeviceArray,
    Prepared,
    Staging,
    call_args,
    check,
    check_aligned,
    driver,
    launch_kernel,
    run,
    split_args,
)
from .specs import KernelSpec


def launches(spec: KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads, most dynamic shared memory)} of every launch of `spec`'s entries in the contract's limits
    (the shared memory grows with the tree width D)."""
    worst = max(geometry.tree_accept(D) for D in range(1, limits.MAX_TREE + 1))
    return {spec.entry: (spec.block, worst), spec.geometry: (1, 0)}


def prepare(spec: KernelSpec, *args, **kwargs) -> Prepared:
    """Validate a tree_accept call (the contract's signature) and set it up on the device for `spec`."""
    lib, like, host, dev = split_args(TREE_ACCEPT, TREE_ACCEPT.bind(*args, **kwargs))
    checked = TREE_ACCEPT.validate(**host)
    bs, D, L = checked.dims["bs"], checked.dims["D"], checked.args["max_depth"]
    kv = dev["kv_cache"]
    check_aligned("kv_cache", kv, "the commit copies 16-byte vectors")
    smem = geometry.tree_accept(D)
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("tokens", "first_child", "next_sibling", "target_tokens")]
        outs = {}
        for o in TREE_ACCEPT.outputs:
            shape = tuple(1 + L if s == "1+L" else checked.dims[s] if isinstance(s, str) else s for s in o.shape)
            outs[o.name] = st.output(shape, o.dtype)
        if kv is None:
            commit = (0, np.int32(0), np.int32(1), 0, np.int32(0), 0)
        else:
            kv_ptr = st.input(kv)
            row_vec = limits.HEAD_DIM * kv.dtype.itemsize // 16
            bt = dev["block_table"]
            commit = (
                kv_ptr,
                np.int32(row_vec),
                np.int32(kv.shape[1]),
                st.input(bt),
                np.int32(host["block_table"].shape[1]),
                st.input(dev["prefix_lens"]),
            )
    except BaseException:
        st.close()
        raise
    args = (*ins, np.int32(D), np.int32(L), *(outs[f][1] for f in Accept.FIELDS), *commit)

    def collect():
        res = {f: st.result(outs[f][0]) for f in Accept.FIELDS}
        if kv is not None and not isinstance(kv, DeviceArray):  # the in-place commit, back into the caller's array
            check(driver().cuMemcpyDtoHAsync(kv.ctypes.data, commit[0], kv.nbytes, st.g.stream.handle))
            st.g.stream.sync()
        return Accept(**res)

    return Prepared(st, lambda: launch_kernel(spec, bs, smem, *args), collect)


def bind(spec: KernelSpec):
    """The op function of `spec`, with the contract's signature and documentation."""

    @TREE_ACCEPT.implements
    def tree_accept(
        tokens,
        first_child,
        next_sibling,
        target_tokens,
        *,
        max_depth,
        kv_cache=None,
        block_table=None,
        prefix_lens=None,
    ):
        return run(prepare(spec, **call_args(TREE_ACCEPT, locals())))

    tree_accept.__doc__ = f"CUDA tree_accept, variant {spec.variant}: {spec.description}.\n\n{tree_accept.__doc__}"
    return tree_accept

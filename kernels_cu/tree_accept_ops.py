"""Launch of a tree_accept kernel spec: validation by the contract (on host copies of the index arrays; the
cache by shape alone), the geometry from the kernel's header, buffers, the launch and the in-place commit."""

from __future__ import annotations

import numpy as np

from contract import TREE_ACCEPT, Accept, limits
from contract.tree_accept import check_advance

from . import geometry
from .arrays import (
    Deferred,
    DeviceArray,
    ErrorFlag,
    Prepared,
    Staging,
    call_args,
    check,
    check_aligned,
    device_call,
    device_vector,
    driver,
    host_copies,
    launch_kernel,
    launch_stream,
    run,
    split_args,
)
from .specs import KernelSpec


def launches(spec: KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads, most dynamic shared memory)} of every launch of `spec`'s entries in the contract's limits
    (the shared memory grows with the tree width D)."""
    worst = max(geometry.tree_accept(D) for D in range(1, limits.MAX_TREE + 1))
    return {spec.entry: (spec.block, worst), "tree_accept_check_kernel": (spec.block, worst), spec.geometry: (1, 0)}


def prepare(spec: KernelSpec, *args, **kwargs) -> Prepared:
    """Validate a tree_accept call (the contract's signature) and set it up on the device for `spec`."""
    lib, like, host, dev = split_args(TREE_ACCEPT, TREE_ACCEPT.bind(*args, **kwargs))
    checked = TREE_ACCEPT.validate(**host)
    st, walk, collect = _setup(spec, lib, like, dev, checked.dims, checked.args["max_depth"])
    return Prepared(st, walk, collect)


def prepare_deferred(spec: KernelSpec, *args, error_flag=None, advance_roots=None, **kwargs) -> Deferred:
    """Set up a tree_accept call on device-resident inputs (cupy, torch) with the value checks on the device (spec
    TA.4.4). The shape-only checks run here (InputError now); a bad value raises the same InputError as prepare()
    would, from check() / results() after the launch, and then nothing was walked or committed. The launch is
    capturable; the commit writes the caller's device cache in place.

    error_flag: a caller's flag word shared with other calls and never reset by this one (arrays.ErrorFlag); a
    flag set by any of them stops this walk and commit too. advance_roots: a device int32 [bs] array (a step's
    root tokens, spec TA.4.5): an accepted call also advances in place, after its commit, prefix_lens to new_lens
    and advance_roots to bonus, so the next round starts from them without leaving the device."""
    named = TREE_ACCEPT.bind(*args, **kwargs)
    lib, like, dev, infos = device_call(TREE_ACCEPT, named)
    checked = TREE_ACCEPT.validate_shapes(**infos)
    flag = ErrorFlag(error_flag)
    roots = None
    if advance_roots is not None:
        check_advance(has_commit=dev.get("kv_cache") is not None)
        roots = device_vector("advance_roots", advance_roots, checked.dims["bs"])
    st, walk, collect = _setup(spec, lib, like, dev, checked.dims, checked.args["max_depth"], flag, roots)

    def revalidate():  # raises the named error
        TREE_ACCEPT.validate(**host_copies(TREE_ACCEPT, named))

    return Deferred(st, walk, collect, flag.ptr, revalidate, "tree_accept")


def _setup(
    spec: KernelSpec, lib, like, dev: dict, dims: dict, L: int, flag: ErrorFlag | None = None, roots=None
) -> tuple:
    """The buffers and the launch of a call whose arguments passed the contract's checks (all of them, or, with a
    `flag`, those of validate_shapes()): (staging, launch, collect). flag (the deferred path): the launch first clears
    it (ErrorFlag.clear) and zeroes the commit's row bitmap, then runs tree_accept_check_kernel, whose flag stops the
    walk and the commit; None: the kernel checks nothing. roots: the step's advance (prefix_lens and roots in place),
    else none."""
    bs, D = dims["bs"], dims["D"]
    deferred = flag is not None
    kv = dev.get("kv_cache")  # absent from a deferred call without a commit (arrays.device_call skips None)
    check_aligned("kv_cache", kv, "the commit copies 16-byte vectors")
    smem = geometry.tree_accept(D)
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("tokens", "first_child", "next_sibling", "target_tokens")]
        outs = {}
        for o in TREE_ACCEPT.outputs:
            shape = tuple(1 + L if s == "1+L" else dims[s] if isinstance(s, str) else s for s in o.shape)
            outs[o.name] = st.output(shape, o.dtype)
        if kv is None:
            commit = (0, np.int32(0), np.int32(1), 0, np.int32(0), 0)
            kv_rows = 0
        else:
            kv_ptr = st.input(kv)
            row_vec = limits.HEAD_DIM * kv.dtype.itemsize // 16
            bt = dev["block_table"]
            commit = (
                kv_ptr,
                np.int32(row_vec),
                np.int32(kv.shape[1]),
                st.input(bt),
                np.int32(bt.shape[1]),
                st.input(dev["prefix_lens"]),
            )
            kv_rows = kv.shape[0] * kv.shape[1]
        flag_ptr = flag.allocate(st) if flag is not None else 0
        advance = (commit[5], roots.ptr) if roots is not None else (0, 0)
        # the check's bitmap of the cache's rows (an alias of two commit rows finds its bit set)
        words = (kv_rows + 31) // 32 if deferred else 0
        seen = st.scratch(4 * words) if words else 0
    except BaseException:
        st.close()
        raise
    args = (*ins, np.int32(D), np.int32(L), *(outs[f][1] for f in Accept.FIELDS), *commit, *advance, flag_ptr)
    check_args = (*ins, np.int32(D), np.int32(L), np.int64(kv_rows), commit[2], commit[3], commit[4], commit[5], seen,
                  flag_ptr)  # fmt: skip

    def launch():
        if flag is not None:
            flag.clear(st)
            if words:
                check(driver().cuMemsetD32Async(seen, 0, words, launch_stream(st).handle))
            launch_kernel(spec, bs, smem, *check_args, entry="tree_accept_check_kernel")
        launch_kernel(spec, bs, smem, *args)

    def collect():
        res = {f: st.result(outs[f][0]) for f in Accept.FIELDS}
        if kv is not None and not isinstance(kv, DeviceArray):  # the in-place commit, back into the caller's array
            check(driver().cuMemcpyDtoHAsync(kv.ctypes.data, commit[0], kv.nbytes, st.g.stream.handle))
            st.g.stream.sync()
        return Accept(**res)

    return st, launch, collect


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

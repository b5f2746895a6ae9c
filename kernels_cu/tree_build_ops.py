"""Launch of a tree_build kernel spec: validation by the contract (on host copies of device inputs), the
geometry from the kernel's own header (through its query kernel), buffers, the launch, the results."""

from __future__ import annotations

import numpy as np

from contract import TREE_BUILD, Tree

from . import geometry, runtime
from .arrays import Prepared, Staging, call_args, launch_kernel, run, split_args
from .specs import KernelSpec


def prepare(spec: KernelSpec, *args, **kwargs) -> Prepared:
    """Validate a tree_build call (the contract's signature) and set it up on the device for `spec`."""
    lib, like, host, dev = split_args(TREE_BUILD, TREE_BUILD.bind(*args, **kwargs))
    checked = TREE_BUILD.validate(**host)
    if dev["prefix_lens"] is None:  # the contract's default (zeros), staged from the host
        dev["prefix_lens"] = checked.args["prefix_lens"]
    bs, L, K_in, B, F = (checked.dims[k] for k in ("bs", "L", "K_in", "B", "F"))
    stage_policy = int(spec.all_defines()["KDTR_TB_STAGE_LP"])
    smem, lp_in_smem = geometry.tree_build(B, L, K_in, runtime.smem_optin_limit(), stage_policy)
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("top_logp", "top_ids", "root_tokens", "prefix_lens")]
        outs = {}
        for o in TREE_BUILD.outputs:
            shape = tuple(checked.dims[s] if isinstance(s, str) else s for s in o.shape)
            outs[o.name] = st.output(shape, np.uint8 if o.dtype == "bool" else o.dtype)
    except BaseException:
        st.close()
        raise
    ptrs = [outs[f][1] for f in Tree.FIELDS]
    ptrs[-1] = ptrs[-1] if F else 0  # no FULL_MASK asked: the kernel skips it
    args = (*ins, np.int32(L), np.int32(K_in), np.int32(B), np.int32(lp_in_smem), *ptrs)

    def collect():
        res = {f: st.result(outs[f][0]) for f in Tree.FIELDS}
        if lib in (None, "cupy"):
            res["full_mask"] = res["full_mask"].view(bool)
        return Tree(**res)

    return Prepared(st, lambda: launch_kernel(spec, bs, smem, *args), collect)


def bind(spec: KernelSpec):
    """The op function of `spec`, with the contract's signature and documentation."""

    @TREE_BUILD.implements
    def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
        return run(prepare(spec, **call_args(TREE_BUILD, locals())))

    tree_build.__doc__ = f"CUDA tree_build, variant {spec.variant}: {spec.description}.\n\n{tree_build.__doc__}"
    return tree_build

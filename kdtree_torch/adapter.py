"""The operators as one more implementation under test: `pytest conformance --impl torch-ops` runs every clause through
torch.ops.kdtree.* (an adapters.Implementation of torch CUDA tensors, docs/ADAPTERS.md).

Each function has the contract's signature: the contract's shape-only checks on the tensors first (so that an argument
the harness hands over as it is, a list or a foreign array, gets the contract's own message), then the operator with a
new error flag, then kdtree_torch.check(flag), which raises the contract's named error where the device refused a
value. The adapter reads nothing else on the host but tree_verify's prefix lengths, for the operator's max_context (the
most keys of any request, which a serving engine knows) and, for tree_build's FULL_MASK (which the operators do not
make: its size reads prefix_lens' values), the contract's full check of a case that asks for one; it declares
`with_full_mask` False only, so TB.3.4 is not claimed.

torch is imported when an op runs (the module loads without it, so `--impl torch-ops` is a skip with the reason on a
machine without torch, not a usage error).
"""

from __future__ import annotations

import importlib.util

import numpy as np

import contract
from adapters import Capabilities, Implementation, Op, torch_inputs
from contract import DRAFT_TOPK, TREE_ACCEPT, TREE_BUILD, TREE_VERIFY, limits


def _ops():
    from . import ops

    return ops


def _torch():
    import torch

    return torch


def _is_tensor(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr")


def _ready(named: dict, in_place: tuple[str, ...] = ()) -> dict:
    """The call's tensors as the operators take them: a non-contiguous one (a broadcast view the harness staged)
    made contiguous, except those written in place (the operator then refuses them by name)."""
    return {k: v.contiguous() if _is_tensor(v) and k not in in_place and not v.is_contiguous() else v
            for k, v in named.items()}  # fmt: skip


def _shapes(c: contract.OpContract, named: dict) -> contract.Checked:
    """The contract's shape-only checks, each tensor by its shape and dtype (anything else as it is), before any
    broadcast view is made contiguous (a refused shape may be terabytes)."""
    ops = _ops()
    torch_inputs.refuse_stand_ins(c, named)
    infos = {}
    for k, v in named.items():
        if _is_tensor(v) and v.device.type == "cuda":
            infos[k] = contract.ArrayInfo(tuple(v.shape), ops.numpy_dtype(k, v), c_contiguous=v.is_contiguous())
        else:
            infos[k] = v
    return c.validate_shapes(**infos)


def _flag(like):
    return _ops().new_error_flag(like.device)


def _host(t) -> np.ndarray:
    return t.detach().cpu().numpy()


@DRAFT_TOPK.implements
def draft_topk(logits, K):
    """torch.ops.kdtree.draft_topk."""
    named = {"logits": logits, "K": K}
    _shapes(DRAFT_TOPK, named)
    named = _ready(named)
    flag = _flag(named["logits"])
    top = _torch().ops.kdtree.draft_topk(named["logits"], int(K), flag)
    _ops().check(flag)
    return contract.TopK(*top)


@TREE_BUILD.implements
def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
    """torch.ops.kdtree.tree_build (no FULL_MASK: a case asking for one gets the contract's full check, and is not
    taken when it passes)."""
    named = {"top_logp": top_logp, "top_ids": top_ids, "root_tokens": root_tokens, "budget": budget,
             "prefix_lens": prefix_lens, "with_full_mask": with_full_mask}  # fmt: skip
    if with_full_mask is True:
        host = {k: _host(v) if _is_tensor(v) else v for k, v in named.items()}
        TREE_BUILD.validate(**host)
        raise NotImplementedError("with_full_mask: the operators make no FULL_MASK (its size reads prefix_lens)")
    _shapes(TREE_BUILD, named)
    named = _ready(named)
    flag = _flag(named["top_logp"])
    tree = _torch().ops.kdtree.tree_build(named["top_logp"], named["top_ids"], named["root_tokens"], int(budget),
                                          named["prefix_lens"], flag)  # fmt: skip
    _ops().check(flag)
    fields = dict(zip(_ops().OUTPUTS["tree_build"], tree))
    fields["visibility"] = fields["visibility"].view(_torch().uint32)  # the contract's dtype
    fields["full_mask"] = np.zeros(0, bool)
    return contract.Tree(**fields)


@TREE_VERIFY.implements
def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """torch.ops.kdtree.tree_verify, max_context the batch's longest request."""
    named = {"q": q, "kv_cache": kv_cache, "block_table": block_table, "prefix_lens": prefix_lens,
             "visibility": visibility, "softmax_scale": softmax_scale}  # fmt: skip
    checked = _shapes(TREE_VERIFY, named)
    named = _ready(named)
    Q = checked.dims["Q"]
    longest = int(_host(named["prefix_lens"]).astype(np.int64).max()) + Q
    max_context = min(max(longest, Q), limits.MAX_CONTEXT)  # a request past it is refused on the device, by name
    flag = _flag(named["q"])
    out, lse = _torch().ops.kdtree.tree_verify(named["q"], named["kv_cache"], named["block_table"],
                                               named["prefix_lens"], named["visibility"], float(softmax_scale),
                                               max_context, flag)  # fmt: skip
    _ops().check(flag)
    return contract.Verified(out, lse)


@TREE_ACCEPT.implements
def tree_accept(tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None,
                prefix_lens=None):  # fmt: skip
    """torch.ops.kdtree.tree_accept, or tree_accept_commit where the commit is given."""
    named = {"tokens": tokens, "first_child": first_child, "next_sibling": next_sibling,
             "target_tokens": target_tokens, "max_depth": max_depth, "kv_cache": kv_cache, "block_table": block_table,
             "prefix_lens": prefix_lens}  # fmt: skip
    _shapes(TREE_ACCEPT, named)
    named = _ready(named, in_place=("kv_cache",))
    flag = _flag(named["tokens"])
    walk = [named[k] for k in ("tokens", "first_child", "next_sibling", "target_tokens")]
    kd = _torch().ops.kdtree
    if named["kv_cache"] is None:
        acc = kd.tree_accept(*walk, int(max_depth), flag)
    else:
        commit = [named[k] for k in ("kv_cache", "block_table", "prefix_lens")]
        acc = kd.tree_accept_commit(*walk, int(max_depth), *commit, flag, None)
    _ops().check(flag)
    return contract.Accept(*acc)


def _available() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install torch)"
    torch = _torch()
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA GPU"
    from kernels_cu import cuda_env

    p = cuda_env.probe()
    return None if p.ok else f"GPU unavailable: {p.reason}"


def _version() -> str:
    try:
        import importlib.metadata

        return importlib.metadata.version("kdtree-conformance")
    except Exception:  # a checkout that is not installed
        return "0.1.0"


IMPLEMENTATION = Implementation(
    name="torch-ops",
    version=_version(),
    arrays="device",
    available=_available,
    description="torch.ops.kdtree.*: the kernels' deferred paths as PyTorch operators (kdtree_torch/ops.py)",
    ops={
        "draft_topk": Op(draft_topk),
        "tree_build": Op(tree_build, Capabilities(dims={"with_full_mask": {False}})),
        "tree_verify": Op(tree_verify),
        "tree_accept": Op(tree_accept),
    },
)

"""An op's inputs as torch CUDA tensors, checked by the contract before any GPU work: the arrays whose values
the checks read copied to the host (small: token ids, lengths, block tables, visibility masks, log-probs), the
others by shape and dtype alone (contract.ArrayInfo, no copy: q, the KV cache). Anything that is not a torch CUDA
tensor goes to the contract as it is, so a masked array or a foreign CUDA array gets the contract's own message.
`validate_op(CONTRACT, ...)` does it for any op (what a device-array adapter calls first, docs/ADAPTERS.md);
`validate(...)` is tree_verify's, with the checked call in a form the peer adapters use. Imports torch lazily."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import contract
from contract.trees import unpack_visibility

_HOST = ("block_table", "prefix_lens", "visibility")


def _torch():
    import torch

    return torch


def is_torch_cuda(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch" and getattr(getattr(x, "device", None), "type", "") == "cuda"


def np_dtype(t) -> np.dtype:
    """A torch tensor's dtype as numpy's (bf16 as ml_dtypes')."""
    name = str(t.dtype).removeprefix("torch.")
    return contract.BF16 if name == "bfloat16" else np.dtype(name)


def host(t) -> np.ndarray:
    """A small torch tensor copied to the host (bf16 through int16)."""
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.detach().view(torch.int16).cpu().numpy().view(contract.BF16)
    return t.detach().cpu().numpy()


@dataclasses.dataclass
class Checked:
    """The validated call: device tensors as given, host copies of the small arrays, the contract's dims."""

    q: Any  # torch tensors (torch is optional: not a type the module can name at import)
    kv_cache: Any
    block_table: np.ndarray
    prefix_lens: np.ndarray
    visibility: np.ndarray
    softmax_scale: float
    dims: dict

    def chain(self) -> bool:
        """Is every request's tree a chain of Q rows (row i sees tree rows 0..i)?"""
        Q = self.dims["Q"]
        return bool((unpack_visibility(self.visibility, Q) == np.tril(np.ones((Q, Q), bool))[None]).all())


def refuse_stand_ins(op: contract.OpContract, named: dict) -> None:
    """InputError naming an array argument given as a contract.ArrayInfo: the contract's shape checks take one as an
    array's stand-in (what this module makes of a device tensor), but a device implementation has no values behind
    it. Called before any tensor is described, so only the caller's own stand-ins are refused."""
    for a in op.args:
        if a.kind == "array" and isinstance(named.get(a.name), contract.ArrayInfo):
            raise contract.InputError(f"{a.name}: expected a torch CUDA tensor, got a contract.ArrayInfo (a shape and "
                                      "dtype alone; a device implementation reads values)")  # fmt: skip


def validate(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale) -> Checked:
    """The contract's tree_verify checks on device inputs; InputError naming the argument."""
    given = {"q": q, "kv_cache": kv_cache, "block_table": block_table, "prefix_lens": prefix_lens,
             "visibility": visibility}  # fmt: skip
    refuse_stand_ins(contract.TREE_VERIFY, given)
    args = {}
    for name, x in given.items():
        if not is_torch_cuda(x):
            args[name] = x
        elif name in _HOST:
            args[name] = host(x)
        else:
            args[name] = contract.ArrayInfo(tuple(x.shape), np_dtype(x))
    checked = contract.TREE_VERIFY.validate(**args, softmax_scale=softmax_scale)
    a = checked.args
    return Checked(q, kv_cache, a["block_table"], a["prefix_lens"], a["visibility"], a["softmax_scale"], checked.dims)


def validate_op(op: contract.OpContract, *args, **kwargs) -> contract.Checked:
    """`op`'s every input check on device inputs (the contract's signature, e.g. `validate_op(TREE_BUILD,
    top_logp, top_ids, root_tokens, budget)`); InputError naming the argument. An array the checks read is
    copied to the host (draft_topk's logits: bs·L·V elements); one they do not read is described by shape and
    dtype (contract.ArrayInfo)."""
    named = op.bind(*args, **kwargs)
    refuse_stand_ins(op, named)
    for a in op.args:
        x = named[a.name]
        if a.kind != "array" or not is_torch_cuda(x):
            continue
        if a.reads_values:
            named[a.name] = host(x)
        else:
            named[a.name] = contract.ArrayInfo(tuple(x.shape), np_dtype(x), c_contiguous=bool(x.is_contiguous()))
    return op.validate(**named)


def refuse(arg: str, why: str):
    """What an adapter raises for valid input it does not take (outside its declaration)."""
    raise NotImplementedError(f"{arg}: {why}")

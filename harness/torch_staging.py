"""numpy <-> torch CUDA tensors, for implementations that take device arrays (adapters.protocol, arrays =
"device"): the conformance cases are numpy; such an implementation gets each plain numpy argument as a
torch tensor on the GPU (bf16 through an int16 view: torch has no bf16 numpy interchange), anything else
(scalars, a masked array, a foreign CUDA array a bad-input test hands over) unchanged, so that its own
validation answers it. Results come back as numpy, and arguments the op writes in place are copied back.
torch is imported on first use."""

from __future__ import annotations

import functools

import numpy as np

import contract


def _torch():
    import torch

    return torch


def to_device(a: np.ndarray):
    """A plain numpy array as a contiguous torch tensor on the current CUDA device (same dtype and bits)."""
    torch = _torch()
    a = np.ascontiguousarray(a)
    if a.dtype == contract.BF16:
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(a).cuda()


def to_host(t) -> np.ndarray:
    """A torch tensor (any device) as numpy, bf16 as ml_dtypes bfloat16; numpy passes through."""
    torch = _torch()
    if isinstance(t, np.ndarray):
        return t
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"expected a torch tensor in the result, got {type(t).__name__}")
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).cpu().numpy().view(contract.BF16)
    return t.cpu().numpy()


def staged(fn, op: str):
    """`fn` (taking and returning torch CUDA tensors) as a function of numpy arguments returning numpy."""
    in_place = contract.OPS[op].in_place

    @functools.wraps(fn)
    def call(*args, **kwargs):
        named = contract.OPS[op].bind(*args, **kwargs)
        dev = {k: to_device(v) if type(v) is np.ndarray else v for k, v in named.items()}
        result = fn(**dev)
        for k in in_place:
            if type(named.get(k)) is np.ndarray:
                named[k][...] = to_host(dev[k])
        return type(result)(*(to_host(x) for x in result))

    return call

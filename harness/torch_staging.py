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
    """A plain numpy array as a torch tensor on the current CUDA device (same shape, dtype and bits).

    A broadcast view (a zero stride: the boundary cases' arrays of zeros of any shape) is staged as its
    distinct values, expanded on the device the way numpy views them: materialized it could need terabytes,
    and the implementation must still see the shape it has to refuse. 0-d arrays stay 0-d (numpy's
    ascontiguousarray would make them 1-d, and a rank check would then see the wrong rank)."""
    torch = _torch()
    if a.size and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape, strict=True)):
        distinct = a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]
        return to_device(np.ascontiguousarray(distinct)).expand(a.shape)
    if not a.flags.c_contiguous:
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

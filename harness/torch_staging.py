"""numpy <-> torch CUDA tensors, for implementations that take device arrays (adapters.protocol, arrays =
"device"): the conformance cases are numpy; such an implementation gets each plain numpy argument as a
torch tensor on the GPU (bf16 through an int16 view: torch has no bf16 numpy interchange), anything else
(scalars, a masked array, a foreign CUDA array a bad-input test hands over) unchanged, so that its own
validation answers it. Results come back as numpy, and arguments the op writes in place are copied back.
torch is imported on first use."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

import contract


def _torch():
    import torch

    return torch


def distinct_values(a: np.ndarray) -> np.ndarray | None:
    """The values a broadcast view repeats (its zero-stride axes cut to length 1), or None for any other array."""
    if a.size and any(st == 0 and n > 1 for st, n in zip(a.strides, a.shape, strict=True)):
        return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]
    return None


def to_device(a: np.ndarray):
    """A plain numpy array as a torch tensor on the current CUDA device (same shape, dtype and bits).

    A broadcast view (a zero stride: the boundary cases' arrays of zeros of any shape) is staged as its
    distinct values, expanded on the device the way numpy views them: materialized it could need terabytes,
    and the implementation must still see the shape it has to refuse. 0-d arrays stay 0-d (numpy's
    ascontiguousarray would make them 1-d, and a rank check would then see the wrong rank)."""
    torch = _torch()
    distinct = distinct_values(a)
    if distinct is not None:
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


class CannotStage(Exception):
    """The case's arrays do not fit on the device: an implementation of device arrays cannot be called with
    them at all (a test skips, with this message)."""


def staged_bytes(a: np.ndarray) -> int:
    """Device memory to_device takes for `a` (a broadcast view only its distinct values)."""
    distinct = distinct_values(a)
    return a.nbytes if distinct is None else distinct.nbytes


def check_fits(arrays: dict) -> None:
    """CannotStage when the arrays would not fit in the device's free memory (a boundary case's cache of
    2^31 rows in reserved address space is 4.6 TB: its check lives in the implementation, which such an
    input can never reach as a device tensor)."""
    need = sum(staged_bytes(a) for a in arrays.values())
    free, _total = _torch().cuda.mem_get_info()
    if need > free:
        big = max(arrays, key=lambda k: staged_bytes(arrays[k]))
        raise CannotStage(
            f"{big}: {staged_bytes(arrays[big]) / 2**30:.0f} GiB cannot be staged on the device "
            f"({free / 2**30:.0f} GiB free), so an implementation of device arrays cannot be called with it"
        )


def staged(fn, op: str):
    """`fn` (taking and returning torch CUDA tensors) as a function of numpy arguments returning numpy."""
    in_place = contract.OPS[op].in_place

    @functools.wraps(fn)
    def call(*args, **kwargs):
        named = contract.OPS[op].bind(*args, **kwargs)
        # an array written in place that is read-only or not C-contiguous is refused by the contract whatever the
        # implementation, and a device copy would be neither: it reaches the function as it is
        kept = {k for k in in_place if type(named.get(k)) is np.ndarray and not
                (named[k].flags.writeable and named[k].flags.c_contiguous)}  # fmt: skip
        staged = {k: v for k, v in named.items() if type(v) is np.ndarray and k not in kept}
        check_fits(staged)
        dev = {k: to_device(v) if k in staged else v for k, v in named.items()}
        result = fn(**dev)
        for k in in_place:
            if k in staged:
                named[k][...] = to_host(dev[k])
        if dataclasses.is_dataclass(result):  # TopK, Tree, Accept (Verified is a tuple)
            return type(result)(**{f: to_host(getattr(result, f)) for f in result.FIELDS})
        return type(result)(*(to_host(x) for x in result))

    return call

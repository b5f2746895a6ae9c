"""The checks every op's `validate()` is made of: each raises `InputError` whose message starts with the
argument's name and says what is wrong (shape, dtype, range, ...), before any work is done."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)


class InputError(ValueError):
    """Bad input to an op. The message names the argument and what is wrong."""


def fail(arg: str, problem: str):
    raise InputError(f"{arg}: {problem}")


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """Shape and dtype of an array whose values `validate()` does not read (a device cache, say), so a
    device caller can have it checked without copying it to the host."""

    shape: tuple[int, ...]
    dtype: np.dtype
    writeable: bool = True
    c_contiguous: bool = True

    @property
    def ndim(self) -> int:
        return len(self.shape)


def type_name(x) -> str:
    t = type(x)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__.split('.')[0]}.{t.__qualname__}"


def is_device_array(x) -> bool:
    """A CUDA array by the usual conventions (cupy, numba and friends; torch tensors on a GPU)."""
    if hasattr(type(x), "__cuda_array_interface__") or hasattr(x, "__cuda_array_interface__"):
        return True
    return type(x).__module__.split(".")[0] == "torch" and getattr(getattr(x, "device", None), "type", "") == "cuda"


def host_array(arg: str, a, *, shape_only: bool = False):
    """A plain numpy array (or, where `shape_only`, an ArrayInfo). Subclasses are refused: a masked array
    hides values from the checks and a matrix changes what indexing means."""
    if isinstance(a, ArrayInfo):
        if shape_only:
            return a
        fail(arg, "expected a numpy array, got a contract.ArrayInfo (a shape and dtype alone; this call reads values)")
    if type(a) is np.ndarray:
        return a
    if isinstance(a, np.ndarray):
        fail(
            arg, f"expected a plain numpy.ndarray, got the subclass {type_name(a)} (its values could escape the checks)"
        )
    if is_device_array(a):
        fail(
            arg,
            f"expected a numpy array on the host, got a CUDA array ({type_name(a)}); "
            "the cuda implementation takes those",
        )
    fail(arg, f"expected a numpy array, got {type_name(a)}")


def dtype_name(dt) -> str:
    return str(np.dtype(dt))


def integer(arg: str, v, lo: int, hi: int) -> int:
    """A Python or numpy integer (not a bool) in lo..hi."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        fail(arg, f"expected an integer, got {type_name(v)}")
    if not lo <= int(v) <= hi:
        fail(arg, f"{int(v)} is outside {lo}..{hi}")
    return int(v)


def flag(arg: str, v) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        fail(arg, f"expected True or False, got {type_name(v)}")
    return bool(v)


def positive_float32(arg: str, v) -> float:
    """A real number (int or float, not bool) whose float32 value is finite and > 0: the kernels use the
    float32 value, so 1e39 (inf) and 1e-50 (0) are refused rather than silently changed."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        fail(arg, f"expected a real number, got {type_name(v)}")
    if isinstance(v, (float, np.floating)) and not np.isfinite(v):
        fail(arg, f"{v!r} is not finite")
    with np.errstate(over="ignore", under="ignore"):
        f32 = np.float32(v)
    if not np.isfinite(f32):
        fail(arg, f"{v!r} overflows float32 (the kernels use its float32 value)")
    if f32 <= 0:
        what = "rounds to 0 in float32 (the kernels use its float32 value)" if v > 0 else "must be > 0"
        fail(arg, f"{v!r} {what}")
    return float(v)


def first_bad(mask: np.ndarray) -> tuple:
    """Index of the first True of a mask, as a tuple of ints (for messages)."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def non_negative(arg: str, a: np.ndarray, what: str) -> None:
    if (a < 0).any():
        fail(arg, f"negative {what} at {first_bad(a < 0)}")

"""Comparison helpers for conformance tests (spec/compare semantics; see notes in README).

`assert_bit_exact` compares raw bits: -0.0 != +0.0 and NaN payloads count.
`assert_close` needs an explicit tolerance: `max_ulp=`, or `rtol=` and `atol=` together (both or
neither, as torch.testing does, so that atol=0 cannot pass silently through a forgotten rtol).
Failure messages name the output and the clause and show the mismatch count, the first mismatching
index (C order), the worst ulp/abs/rel errors with their indices, a hex window around the first
mismatch, and a repro hint.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping

import numpy as np

from . import verdict

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
WINDOW = 4
_ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e5m2"}


def is_float(dt: np.dtype) -> bool:
    """numpy floats plus the ml_dtypes ones (bf16, fp8), whose dtype kind is 'V'."""
    return dt.kind == "f" or dt.name in _ML_FLOATS


def _bits(a: np.ndarray) -> np.ndarray:
    """Raw-bit view of an array (complex arrays are compared as their float parts)."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind == "c":
        a = a.view(a.real.dtype)
    if a.dtype.kind == "b":
        return a.view(np.uint8)
    return a.view(_UINT[a.dtype.itemsize])


def _ordered(a: np.ndarray) -> np.ndarray:
    """Map float bits to a signed line where adjacent floats differ by 1 and -0 == +0."""
    bits = _bits(a).astype(np.int64) if a.dtype.itemsize < 8 else _bits(a).view(np.int64)
    nbits = a.dtype.itemsize * 8
    if a.dtype.itemsize < 8:
        sign = 1 << (nbits - 1)
        mag = bits & (sign - 1)
        return np.where(bits & sign, -mag, mag)
    return np.where(bits < 0, -(bits & np.int64(0x7FFFFFFFFFFFFFFF)), bits)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULP distance per element as uint64; NaN against anything, or two NaNs, is the maximum."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or not is_float(a.dtype):
        raise TypeError(f"ulp_distance needs two float arrays of one dtype, got {a.dtype} and {b.dtype}")
    oa, ob = _ordered(a), _ordered(b)
    d = np.abs(oa.astype(object) - ob.astype(object)) if a.dtype.itemsize == 8 else np.abs(oa - ob)
    d = np.asarray(d, dtype=np.uint64) if a.dtype.itemsize == 8 else d.astype(np.uint64)
    nan = np.isnan(a.astype(np.float64)) | np.isnan(b.astype(np.float64))
    return np.where(nan, np.uint64(np.iinfo(np.uint64).max), d)


@dataclasses.dataclass
class Mismatch:
    what: str
    spec_id: str | None
    dtype: str
    shape: tuple
    count: int
    total: int
    first_index: tuple
    first_actual: object
    first_expected: object
    worst: dict
    window: str
    context: Mapping[str, object]
    exact: bool

    def format(self) -> str:
        tag = f" [{self.spec_id}]" if self.spec_id else ""
        kind = "bit-exact" if self.exact else "within tolerance"
        lines = [
            f"output {self.what!r} is not {kind}{tag}",
            f"  {self.dtype} {self.shape}: {self.count} / {self.total} elements differ "
            f"({100.0 * self.count / max(self.total, 1):.3g}%)",
            f"  first mismatch at {self.first_index}: actual={self.first_actual} expected={self.first_expected}",
        ]
        if self.worst:
            lines.append("  worst: " + "  ".join(f"{k}={v[0]:.4g} at {v[1]}" for k, v in self.worst.items()))
        lines.append(self.window)
        if self.context:
            lines.append("  case: " + " ".join(f"{k}={v}" for k, v in self.context.items()))
        lines.append(
            "  repro: rerun the failing test id with -x -p no:randomly; hypothesis prints the "
            "falsifying example and @reproduce_failure blob above"
        )
        return "\n".join(lines)


def _fmt(v, dt: np.dtype) -> str:
    arr = np.asarray(v, dtype=dt).reshape(1)
    # decimal as numpy prints it (the shortest string that reads back: 1.0000001, not np.float32(1.0000001)),
    # and a float's bits in hex beside it
    return f"{arr[0]} (0x{int(_bits(arr)[0]):0{dt.itemsize * 2}x})" if is_float(dt) or dt.kind == "c" else str(arr[0])


def _window(actual: np.ndarray, expected: np.ndarray, flat: int) -> str:
    """Elements around the first mismatch: floats as their bits in hex (bit-exactness is about bits), integers
    and bools in decimal (what a reader compares)."""
    hexed = is_float(actual.dtype) or actual.dtype.kind == "c"
    if hexed:
        a, e = _bits(actual).reshape(-1), _bits(expected).reshape(-1)
    else:
        a, e = actual.reshape(-1).astype(np.int64), expected.reshape(-1).astype(np.int64)
    lo, hi = max(0, flat - WINDOW), min(a.size, flat + WINDOW + 1)
    if hexed:
        w = a.dtype.itemsize * 2
        row = lambda x: " ".join(f"{int(v):0{w}x}" for v in x[lo:hi])
    else:
        w = max(len(str(int(v))) for v in np.concatenate([a[lo:hi], e[lo:hi]]))
        row = lambda x: " ".join(f"{int(v):>{w}d}" for v in x[lo:hi])
    caret = " ".join(("^" * w) if i == flat else (" " * w) for i in range(lo, hi))
    return (
        f"  flat[{lo}:{hi}] actual   {row(a)}\n  {' ' * len(f'flat[{lo}:{hi}]')} expected {row(e)}\n"
        f"  {' ' * len(f'flat[{lo}:{hi}]')}          {caret}"
    )


def _preconditions(actual, expected, what: str) -> tuple[np.ndarray, np.ndarray]:
    __tracebackhide__ = True
    if not isinstance(actual, np.ndarray) or not isinstance(expected, np.ndarray):
        raise TypeError(f"{what}: compare numpy arrays, got {type(actual).__name__} and {type(expected).__name__}")
    if actual.dtype != expected.dtype:
        raise AssertionError(f"output {what!r}: dtype {actual.dtype}, expected {expected.dtype}")
    if actual.shape != expected.shape:
        raise AssertionError(f"output {what!r}: shape {actual.shape}, expected {expected.shape}")
    return actual, expected


def _mismatch(actual, expected, bad, *, what, spec_id, context, exact) -> Mismatch:
    flat = int(np.flatnonzero(bad.reshape(-1))[0])
    idx = tuple(int(i) for i in np.unravel_index(flat, actual.shape)) if actual.ndim else ()
    worst = {}
    if is_float(actual.dtype):
        a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
        with np.errstate(all="ignore"):
            ab = np.abs(a64 - e64)
            rel = ab / np.abs(e64)
        ulp = ulp_distance(actual, expected).astype(np.float64)
        for name, v in (("ulp", ulp), ("abs", ab), ("rel", rel)):
            v = np.where(np.isnan(v), np.inf, v)
            j = int(np.argmax(v.reshape(-1)))
            worst[name] = (float(v.reshape(-1)[j]), tuple(int(i) for i in np.unravel_index(j, actual.shape)))
    return Mismatch(
        what,
        spec_id,
        str(actual.dtype),
        actual.shape,
        int(bad.sum()),
        int(bad.size),
        idx,
        _fmt(actual.reshape(-1)[flat], actual.dtype),
        _fmt(expected.reshape(-1)[flat], expected.dtype),
        worst,
        _window(actual, expected, flat),
        dict(context or {}),
        exact,
    )


def check_bit_exact(actual, expected, *, what: str, spec_id: str | None = None, context=None) -> Mismatch | None:
    actual, expected = _preconditions(actual, expected, what)
    bad = _bits(actual) != _bits(expected)
    if actual.dtype.kind == "c":
        bad = bad.reshape(actual.shape + (2,)).any(-1)
    if not bad.any():
        return None
    return _mismatch(actual, expected, bad, what=what, spec_id=spec_id, context=context, exact=True)


def assert_bit_exact(actual, expected, *, what: str, spec_id: str | None = None, context=None) -> None:
    __tracebackhide__ = True
    with _blamed_on(spec_id):  # a dtype or shape that differs fails the clause too
        m = check_bit_exact(actual, expected, what=what, spec_id=spec_id, context=context)
    _raise_or_pass(m, spec_id)


def check_close(
    actual,
    expected,
    *,
    what: str,
    max_ulp: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    spec_id: str | None = None,
    context=None,
) -> Mismatch | None:
    """Tolerance check; NaN must meet NaN at the same place, infinities must match exactly."""
    if (rtol is None) != (atol is None):
        raise ValueError("give rtol and atol together, or neither")
    if (max_ulp is None) == (rtol is None):
        raise ValueError("give exactly one tolerance: max_ulp=, or rtol= with atol=")
    actual, expected = _preconditions(actual, expected, what)
    if not is_float(actual.dtype):
        return check_bit_exact(actual, expected, what=what, spec_id=spec_id, context=context)
    a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    inf_e = np.isinf(e64)
    if max_ulp is not None:
        bad = ulp_distance(actual, expected) > np.uint64(max_ulp)
    else:
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(a64 - e64) <= atol + rtol * np.abs(e64))
    bad = np.where(nan_a & nan_e, False, bad | (nan_a != nan_e))
    bad = np.where(inf_e, a64 != e64, bad)
    if not bad.any():
        return None
    return _mismatch(actual, expected, bad, what=what, spec_id=spec_id, context=context, exact=False)


def assert_close(
    actual,
    expected,
    *,
    what: str,
    max_ulp: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    spec_id: str | None = None,
    context=None,
) -> None:
    __tracebackhide__ = True
    with _blamed_on(spec_id):
        m = check_close(
            actual, expected, what=what, max_ulp=max_ulp, rtol=rtol, atol=atol, spec_id=spec_id, context=context
        )
    _raise_or_pass(m, spec_id)


def _blamed_on(spec_id: str | None):
    """Failures of the preconditions (dtype, shape) are the clause's failures as well."""
    return contextlib.nullcontext() if spec_id is None else verdict.clause(spec_id)


def _raise_or_pass(m: Mismatch | None, spec_id: str | None) -> None:
    """A mismatch fails its clause (harness/verdict.py); no mismatch is a passed check of it."""
    __tracebackhide__ = True
    if m is None:
        verdict.passed(spec_id)
    elif spec_id:
        raise verdict.ClauseFailure(spec_id, m.format())
    else:
        raise AssertionError(m.format())


def cosine_diff(actual, expected) -> float:
    """1 − cosine similarity over the finite entries, in FlashMLA's form 1 − 2·(a·e)/(a·a + e·e): it also
    grows when the magnitudes differ, not only the directions."""
    a = np.asarray(actual, np.float64).ravel()
    e = np.asarray(expected, np.float64).ravel()
    ok = np.isfinite(a) & np.isfinite(e)
    a, e = a[ok], e[ok]
    denom = float(a @ a + e @ e)
    return 0.0 if denom == 0.0 else 1.0 - 2.0 * float(a @ e) / denom


def assert_cosine(actual, expected, *, what: str, spec_id: str, max_cos_diff: float | None = None) -> None:
    """The cosine check of a `cos(D)` clause (D from the clause unless given)."""
    __tracebackhide__ = True
    if max_cos_diff is None:
        from . import spec

        max_cos_diff = spec.clause(spec_id).tolerance()["max_cos_diff"]
    d = cosine_diff(actual, expected)
    verdict.expect(d <= max_cos_diff, spec_id, f"{what}: 1 - cosine similarity = {d:.3g} > {max_cos_diff:g}")

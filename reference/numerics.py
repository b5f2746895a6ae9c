"""Arithmetic whose float32 results do not depend on the machine: not on the BLAS kernel, not on numpy's
SIMD dispatch, not on memory layout (spec TV.2.2's production numerics).

- Sums of products (`matmul_f32`, `sum_f32`): the exact sum, rounded to float64 (as math.fsum does), then
  to float32. Computed fast with a float64 BLAS product; each entry is *certified*: the worst-case float64
  error of any summation order (γ_n·Σ|x|, Higham §3.1) plus the final float64 rounding must leave it strictly
  between the two float32 rounding midpoints around it, so every order rounds to the same float32. Entries
  that are not certified (rare: cancellation or a near-midpoint sum) and zeros (whose sign depends on the
  order) are recomputed with math.fsum. Inputs must be float32/bf16 values held in float64: their products
  are exact in float64.
- `exp_f64`, `log_f64`: fixed sequences of IEEE elementwise operations (range reduction + polynomial), never
  a libm or SIMD implementation, accurate to a few float64 ulps; callers round the result to float32 once.
"""

from __future__ import annotations

import math

import numpy as np

_U = 2.0**-53
_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k * _LN2_HI is exact for |k| < 2**20
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00


def _certified(c: np.ndarray, abs_sum: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(float32 of c, mask of entries where every summation order gives that float32)."""
    gamma = n * _U / (1 - n * _U)
    bound = gamma * abs_sum * (1 + 2 * gamma) + 2 * np.spacing(np.abs(c) + gamma * abs_sum)
    with np.errstate(over="ignore", invalid="ignore"):
        r = c.astype(np.float32)
        up = np.nextafter(r, np.float32(np.inf)).astype(np.float64)
        down = np.nextafter(r, np.float32(-np.inf)).astype(np.float64)
        r64 = r.astype(np.float64)
        ok = (c - bound > (r64 + down) / 2) & (c + bound < (r64 + up) / 2)
    return r, ok & np.isfinite(r) & (r != 0)


def matmul_f32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float32 of the exactly rounded a @ b, for float64 a [m, n] and b [n, k] holding float32/bf16 values."""
    n = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        c = a @ b
        r, ok = _certified(c, np.abs(a) @ np.abs(b), n)
    for i, j in zip(*np.nonzero(~ok)):
        r[i, j] = np.float32(_fsum(a[i] * b[:, j]))
    return r


def sum_f32(x: np.ndarray) -> np.ndarray:
    """float32 of the exactly rounded sum over the last axis of float64 x [m, n] (float32 values)."""
    n = x.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        r, ok = _certified(x.sum(axis=-1), np.abs(x).sum(axis=-1), n)
    for i in np.flatnonzero(~ok):
        r[i] = np.float32(_fsum(x[i]))
    return r


def _fsum(x: np.ndarray) -> float:
    if not np.isfinite(x).all():  # inf/NaN: no exactness to speak of; one canonical answer
        s = float(np.sum(x))
        return float("nan") if math.isnan(s) else s
    return math.fsum(x.tolist())


def exp_f64(x: np.ndarray) -> np.ndarray:
    """exp(x) for float64 x <= 0 (the softmax's s - m), -inf -> 0."""
    x = np.asarray(x, np.float64)
    safe = np.maximum(x, -746.0)  # exp(-746) underflows to 0 in float64 already
    k = np.rint(safe * _INV_LN2)
    r = (safe - k * _LN2_HI) - k * _LN2_LO  # |r| <= ln2/2 + tiny
    p = np.ones_like(r)
    for i in range(17, 0, -1):  # Horner on the Taylor series: 1 + r(1 + r/2(1 + r/3(...)))
        p = 1.0 + (r / i) * p
    return np.where(x < -746.0, 0.0, np.ldexp(p, k.astype(np.int64)))


def log_f64(x: np.ndarray) -> np.ndarray:
    """log(x) for float64 x >= 1 (the softmax's denominator)."""
    x = np.asarray(x, np.float64)
    m, e = np.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    small = m < 0.7071067811865476
    m = np.where(small, m * 2.0, m)
    e = np.where(small, e - 1, e).astype(np.float64)
    t = (m - 1.0) / (m + 1.0)  # log m = 2 atanh t, |t| <= 0.1716
    t2 = t * t
    s = np.zeros_like(t)
    for i in range(41, 0, -2):  # 2 (t + t^3/3 + t^5/5 + ...), Horner from the high terms
        s = 1.0 / i + t2 * s
    return (e * _LN2_HI + 2.0 * t * s) + e * _LN2_LO

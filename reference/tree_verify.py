"""Reference tree-verify attention in MLA absorb form (spec/tree_verify.md).

q [bs, Q, H, 576] = absorbed q_nope (512) ‖ q_pe (64); the latent cache [num_pages, page_size, 576] holds
c_kv (512) ‖ k_pe (64) per token; V is the first 512 columns of the same rows. Request b's logical
position p lives at page block_table[b, p // page_size], row p % page_size. The tree's own rows are at
prefix_len .. prefix_len + Q - 1. Query i sees every prefix position and the tree rows its visibility row
marks.

Production numerics (`tree_verify`, TV.2.2), pinned so that no BLAS kernel, SIMD dispatch or
memory layout changes a bit (reference/numerics.py):
  s    = fl32( fl32(Σ_d q_d·k_d) · fl32(softmax_scale) )          dot product exact, rounded once
  m    = max over visible keys;  e_j = fl32(exp(s_j − m))          exp in fixed float64 arithmetic
  l    = fl32(Σ_j e_j);  p_j = fl32(e_j / l);  bf16 inputs: p_j rounded to bf16 (as DeepSeek-V3 does)
  out  = fl32(Σ_j p_j·v_j), then rounded to the input dtype;  lse = fl32(m + log l)
where every Σ is the exact sum rounded to float64 and then to float32, over the visible keys only.
`tree_verify_float64` is the oracle: the same maths in float64 (BLAS, libm), no rounding of P or of out.
Invisible rows (NaN-poisoned or not) never enter a sum: their logits are replaced, not masked by
multiplication, so they cannot touch an output bit.
"""

from __future__ import annotations

import numpy as np

from contract import BF16, TREE_VERIFY, Verified, limits
from contract.paged import cache_rows
from contract.trees import unpack_visibility

from . import numerics as nx


@TREE_VERIFY.implements
def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """numpy reference of tree_verify (production numerics); `tree_verify_float64` is the oracle."""
    return _run(
        TREE_VERIFY.validate_host(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale), "production"
    )


def tree_verify_float64(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """The float64 oracle: out float64 [bs, Q, H, 512], lse float64 [bs, Q, H]."""
    return _run(TREE_VERIFY.validate_host(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale), "float64")


def round_probabilities(p: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """TV.2.2: for bf16 inputs P is rounded to bf16 before P·V (float32 inputs keep float32 P)."""
    return p.astype(BF16).astype(np.float32) if dtype == BF16 else p


def _run(checked, precision: str) -> Verified:
    a, d = checked.args, checked.dims
    q, kv, bt, pre, vis = a["q"], a["kv_cache"], a["block_table"], a["prefix_lens"], a["visibility"]
    bs, Q, H = d["bs"], d["Q"], d["H"]
    wide = precision == "float64"
    out = np.empty((bs, Q, H, limits.LATENT), np.float64 if wide else q.dtype)
    lse = np.empty((bs, Q, H), np.float64 if wide else np.float32)
    for b in range(bs):
        P = int(pre[b])
        keys = cache_rows(kv, bt, b, np.arange(P + Q)).astype(np.float64)  # [n, 576], n = P + Q
        seen = np.concatenate([np.ones((Q, P), bool), unpack_visibility(vis[b], Q)], axis=1)  # [Q, n]
        qb = q[b].astype(np.float64).reshape(Q * H, limits.HEAD_DIM)
        rows_seen = np.repeat(seen, H, axis=0)  # [Q*H, n]
        step = _float64 if wide else _production
        o, l = step(qb, keys, rows_seen, a["softmax_scale"], q.dtype)
        out[b] = o.reshape(Q, H, limits.LATENT).astype(out.dtype)
        lse[b] = l.reshape(Q, H)
    return Verified(out, lse)


def _float64(qb, keys, seen, scale, dtype):
    clean = np.where(np.isfinite(keys).all(axis=1)[:, None], keys, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        s = (qb @ clean.T) * scale
        s = np.where(seen, s, -np.inf)
        s = _visible_non_finite(s, qb, keys, seen, scale)
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        l = e.sum(axis=1, keepdims=True)
        return (e / l) @ clean[:, : limits.LATENT] + _poison(e, keys, seen), (m + np.log(l))[:, 0]


def _production(qb, keys, seen, scale, dtype):
    finite = np.isfinite(keys).all(axis=1)
    clean = np.where(finite[:, None], keys, 0.0)  # invisible poisoned rows must not reach a product
    with np.errstate(invalid="ignore", over="ignore"):
        dot = nx.matmul_f32(qb, clean.T)
        s = dot * np.float32(scale)  # float32 multiply: one rounding
        s = np.where(seen, s, np.float32(-np.inf))
        s = _visible_non_finite(s, qb, keys, seen, np.float32(scale)).astype(np.float32)
        m = s.max(axis=1, keepdims=True)
        e = nx.exp_f64(s.astype(np.float64) - m.astype(np.float64)).astype(np.float32)
        e = np.where(seen, e, np.float32(0))  # exact zeros: they add nothing to any sum below
        l = nx.sum_f32(e.astype(np.float64))[:, None]
        p = round_probabilities(e / l, dtype)
        o = nx.matmul_f32(p.astype(np.float64), clean[:, : limits.LATENT]) + _poison(p, keys, seen)
        lse = (m.astype(np.float64) + nx.log_f64(l.astype(np.float64))).astype(np.float32)[:, 0]
    return o, lse


def _visible_non_finite(s, qb, keys, seen, scale):
    """A visible non-finite key makes the logit NaN or ±inf; computed directly (the products were zeroed)."""
    bad_rows = ~np.isfinite(keys).all(axis=1)
    if bad_rows.any():
        hit = seen & bad_rows[None, :]
        r, j = np.nonzero(hit)
        s[r, j] = (np.sum(qb[r] * keys[j], axis=1) * scale).astype(s.dtype)
    return s


def _poison(p, keys, seen):
    """NaN where a query's output takes a visible non-finite value row (0 elsewhere): the zeroed rows would
    otherwise hide it. Canonical NaN, so the bits do not depend on how the sum was formed."""
    bad = ~np.isfinite(keys[:, : limits.LATENT])
    if not bad.any():
        return 0.0
    touched = (seen.astype(np.float64) @ bad.astype(np.float64)) > 0
    return np.where(touched, np.nan, 0.0)

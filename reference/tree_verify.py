"""Reference tree-verify attention in MLA absorb form (spec/tree_verify.md).

q [bs, Q, H, 576] = absorbed q_nope (512) ‖ q_pe (64); the latent cache [num_pages, page_size, 576] holds
c_kv (512) ‖ k_pe (64) per token; V is the first 512 columns of the same rows. Request b's logical
position p lives at page block_table[b, p // page_size], row p % page_size. The tree's own rows are at
prefix_len .. prefix_len + Q - 1. Query i sees every prefix position and the tree rows its visibility row
marks.

Numerics (`precision="production"`): inputs upcast to float32, logits = (q·k) · softmax_scale in float32,
softmax in float32 with lse = m + log(sum exp(s - m)) (natural log); for bf16 inputs the normalized
probabilities P are rounded to bf16 before P·V (DeepSeek-V3's reference casts the softmax to the input
dtype), P·V accumulates in float32, and the output is rounded to the input dtype. `precision="float64"`
is the oracle: the same maths in float64 with no rounding of P or of the output.
Only visible rows are gathered, so invisible rows (NaN-poisoned or not) cannot touch an output bit.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import validate as v
from .tree_build import unpack_visibility

BF16 = np.dtype(ml_dtypes.bfloat16)


def validate_inputs(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    v.array("q", q, (np.float32, BF16), 4)
    bs, Q, H, Dq = q.shape
    if Dq != v.HEAD_DIM:
        v.fail("q", f"last dim {Dq}, expected {v.HEAD_DIM} (512 absorbed q_nope + 64 q_pe)")
    if not 1 <= bs <= v.MAX_BATCH:
        v.fail("q", f"batch size {bs} is outside 1..{v.MAX_BATCH}")
    if not 1 <= Q <= 1 + v.MAX_BUDGET:
        v.fail("q", f"Q={Q} is outside 1..{1 + v.MAX_BUDGET}")
    if H < 1:
        v.fail("q", "needs at least one head")
    v.array("kv_cache", kv_cache, (q.dtype,), 3)
    if kv_cache.shape[2] != v.HEAD_DIM or kv_cache.shape[0] < 1 or kv_cache.shape[1] < 1:
        v.fail("kv_cache", f"shape {kv_cache.shape}, expected [num_pages >= 1, page_size >= 1, {v.HEAD_DIM}]")
    v.array("block_table", block_table, (np.int32,), 2)
    if block_table.shape[0] != bs:
        v.fail("block_table", f"shape {block_table.shape}, expected [{bs}, max_pages]")
    v.array("prefix_lens", prefix_lens, (np.int32,), 1)
    v.shape("prefix_lens", prefix_lens, (bs,))
    W = (Q + 31) // 32
    v.array("visibility", visibility, (np.uint32,), 3)
    v.shape("visibility", visibility, (bs, Q, W))
    if not isinstance(softmax_scale, (float, np.floating)) or not np.isfinite(softmax_scale) or softmax_scale <= 0:
        v.fail("softmax_scale", f"{softmax_scale!r} must be a finite float > 0")
    if (prefix_lens < 0).any():
        v.fail("prefix_lens", f"negative length at {v.first_bad(prefix_lens < 0)}")
    v.paged_rows(kv_cache.shape, block_table, prefix_lens, Q)
    check_visibility("visibility", visibility, Q)
    return bs, Q, H


def check_visibility(arg: str, visibility: np.ndarray, Q: int) -> None:
    """The mask must be the ancestor-or-self closure of a tree whose parents precede children: row i has
    bit i and bit 0, nothing above i, and equals its parent's row plus bit i, where the parent is the
    highest other bit set. Bits beyond Q in the last word must be 0."""
    W = visibility.shape[-1]
    if Q % 32 and (visibility[..., W - 1] >> np.uint32(Q % 32)).any():
        v.fail(arg, f"bits beyond Q={Q} are set")
    bits = unpack_visibility(visibility, Q)
    eye = np.eye(Q, dtype=bool)
    if not bits[..., eye].all():
        b, i = v.first_bad(~bits[..., eye])
        v.fail(arg, f"request {b} row {i} does not see itself")
    if not bits[..., :, 0].all():
        b, i = v.first_bad(~bits[..., :, 0])
        v.fail(arg, f"request {b} row {i} does not see the root")
    if (bits & ~np.tril(np.ones((Q, Q), bool))).any():
        b, i, j = v.first_bad(bits & ~np.tril(np.ones((Q, Q), bool)))
        v.fail(arg, f"request {b} row {i} sees a later row {j} (not a tree with parents before children)")
    for i in range(1, Q):
        others = bits[:, i, :i]
        parent = i - 1 - np.argmax(others[:, ::-1], axis=1)
        expect = bits[np.arange(bits.shape[0]), parent].copy()
        expect[:, i] = True
        bad = (expect != bits[:, i]).any(axis=1)
        if bad.any():
            v.fail(
                arg,
                f"request {int(np.argmax(bad))} row {i} is not its parent's row plus itself (not an ancestor closure)",
            )


def cache_rows(kv_cache, block_table, b: int, positions: np.ndarray) -> np.ndarray:
    page_size = kv_cache.shape[1]
    return kv_cache[block_table[b, positions // page_size], positions % page_size]


def round_probabilities(p: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """TV.2.2: for bf16 inputs P is rounded to bf16 before P·V (float32 inputs keep float32 P)."""
    return p.astype(BF16).astype(np.float32) if dtype == BF16 else p


def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, *, precision: str = "production"):
    """Returns (out [bs, Q, H, 512] in q's dtype (float64 for the oracle), lse float32 [bs, Q, H])."""
    bs, Q, H = validate_inputs(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
    if precision not in ("production", "float64"):
        v.fail("precision", f"{precision!r} is not 'production' or 'float64'")
    wide = np.float64 if precision == "float64" else np.float32
    out_dtype = np.float64 if precision == "float64" else q.dtype
    bits = unpack_visibility(visibility, Q)
    out = np.empty((bs, Q, H, v.LATENT), out_dtype)
    lse = np.empty((bs, Q, H), np.float64 if precision == "float64" else np.float32)
    scale = wide(softmax_scale)
    for b in range(bs):
        P = int(prefix_lens[b])
        for i in range(Q):
            pos = np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])])
            k = cache_rows(kv_cache, block_table, b, pos).astype(wide)  # [n, 576]
            s = (q[b, i].astype(wide) @ k.T) * scale  # [H, n]
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            l = e.sum(axis=1, keepdims=True)
            p = e / l
            if precision == "production":
                p = round_probabilities(p, q.dtype)
            out[b, i] = (p @ k[:, : v.LATENT]).astype(out_dtype)
            lse[b, i] = (m + np.log(l))[:, 0]
    return out, lse

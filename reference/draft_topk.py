"""Reference draft_topk: the drafter's logits to tree_build's top-k inputs (spec/draft_topk.md).

Per row (request b, depth d) of V logits x, read exactly (bf16, fp16 and fp32 values are float64 values):
- the K token ids ranked by (logit descending, token id ascending): a stable sort of the negated logits, so
  equal logits (±0.0 included, and -inf) keep ascending id order, and the K-th place among ties goes to the
  lower ids;
- the row's log-sum-exp in float64, m + log Σ exp(x - m) with m the row's largest logit (no overflow near
  float32's largest value); a row of -inf only has lse -inf;
- each log-prob (x - m) - log Σ, in float64, rounded once to float32: -inf for a -inf logit (never
  -inf - -inf), and -inf where it lies below float32's range.
The steps are named functions (`ranked`, `row_lse`, `log_probs`) so the reference mutants (harness/mutants.py)
can replace one at a time.
"""

from __future__ import annotations

import numpy as np

from contract import DRAFT_TOPK, TopK


def ranked(x: np.ndarray, K: int) -> np.ndarray:
    """The first K token ids of a float64 row ordered by (logit descending, token id ascending)."""
    return np.argsort(-x, kind="stable")[:K]


def row_lse(x: np.ndarray) -> tuple[float, float]:
    """(m, log Σ exp(x - m)) of a float64 row, m its largest logit; (-inf, 0.0) for a row of -inf only."""
    m = float(np.max(x))
    if m == -np.inf:
        return m, 0.0
    return m, float(np.log(np.sum(np.exp(x - m))))


def log_probs(x_sel: np.ndarray, m: float, log_sum: float) -> np.ndarray:
    """float32 of (x - m) - log Σ for the chosen logits; -inf logits (and every logit of an all -inf row) give
    -inf."""
    if m == -np.inf:
        return np.full(x_sel.shape, -np.inf, np.float32)
    with np.errstate(over="ignore"):  # below float32's range: -inf
        return ((x_sel - m) - log_sum).astype(np.float32)


def topk_row(x: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """One row: (log-probs float32 [K], ids int32 [K]) of float64 logits x [V]."""
    x = x + 0.0  # -0.0 -> +0.0: the two are one value (DT.2.2), and no -0.0 log-prob comes of it
    ids = ranked(x, K)
    m, log_sum = row_lse(x)
    return log_probs(x[ids], m, log_sum), ids.astype(np.int32)


@DRAFT_TOPK.implements
def draft_topk(logits, K):
    """numpy reference of draft_topk: per row a stable sort by (logit descending, token id ascending) and a
    float64 log-sum-exp, log-probs rounded once to float32."""
    checked = DRAFT_TOPK.validate_host(logits, K)
    bs, L, _V = logits.shape
    K = checked.args["K"]
    top_logp = np.empty((bs, L, K), np.float32)
    top_ids = np.empty((bs, L, K), np.int32)
    for b in range(bs):
        x_b = logits[b].astype(np.float64)
        for d in range(L):
            top_logp[b, d], top_ids[b, d] = topk_row(x_b[d], K)
    return TopK(top_logp, top_ids)

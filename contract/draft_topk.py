"""Contract of draft_topk: the drafter's per-depth logits to tree_build's top-k inputs (spec/draft_topk.md).

Also the accuracy class of its log-probs (DT.2.4), written once: `logp_tolerance` is the bound every
implementation's log-probs must meet against the float64 oracle, derived in the spec.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from . import checks as c
from . import limits
from .op import Arg, Bound, OpContract, Output, Symbol


@dataclasses.dataclass
class TopK:
    """Outputs of draft_topk: exactly tree_build's `top_logp` and `top_ids`."""

    top_logp: np.ndarray  # float32 [bs, L, K], rows non-increasing, <= 0 or -inf
    top_ids: np.ndarray  # int32 [bs, L, K], distinct per row, ranked (logit descending, token id ascending)

    FIELDS = ("top_logp", "top_ids")


def _where(index: tuple) -> str:
    b, d, v = index
    return f"[request {b}, depth {d}, token {v}]"


def _dims(a: dict, dims: dict) -> None:
    if a["K"] > dims["V"]:
        c.fail("K", f"{a['K']} > V={dims['V']} (the vocabulary size: K tokens cannot be chosen from V)")


def _check_values(a: dict, dims: dict) -> None:
    _dims(a, dims)
    x = a["logits"]
    with np.errstate(invalid="ignore"):
        x64 = x.astype(np.float64)
    if np.isnan(x64).any():
        c.fail("logits", f"NaN at {_where(c.first_bad(np.isnan(x64)))}")
    if (x64 == np.inf).any():
        c.fail("logits", f"+inf at {_where(c.first_bad(x64 == np.inf))} (-inf masks a token; +inf has no log-prob)")


# --- DT.2.4: the accuracy class of the log-probs -------------------------------------------------------------
U32 = 2.0**-24  # float32 unit roundoff
# The longest chain of float32 additions one term of the row sum may go through (the summation depth): a
# blocked sum, ceil(V / 256) terms per thread then a tree, stays within it up to V = 262,144.
SUM_DEPTH_ALLOWANCE = 1024


def sum_depth(V: int) -> int:
    """The summation depth DT.2.4 allows for a row of V logits: V - 1 (any order) up to the allowance, plus the
    tree that joins the partial sums."""
    return min(max(V - 1, 0), SUM_DEPTH_ALLOWANCE + math.ceil(math.log2(max(V, 2))))


def lse_error_bound(V: int) -> float:
    """Absolute error allowed in the row's log-sum-exp (natural log) over V logits, float32 arithmetic
    (spec DT.2.4): the sum's rounding γ(n) over n = sum_depth(V) additions, the exponentials' arguments and
    results (u·ln V + 2u per term, relative), the logarithm (2u·ln V + u), and the underflow of float32 terms
    (V·2^-149); with a factor 2 of margin on each."""
    n = sum_depth(V)
    gamma = n * U32 / (1 - n * U32)
    lnV = math.log(max(V, 1))
    return 2 * (gamma + (lnV + 2) * U32 + (2 * lnV + 1) * U32 + V * 2.0**-149)


def logp_tolerance(V: int, oracle: np.ndarray) -> np.ndarray:
    """Per element: how far a finite log-prob may lie from the float64 oracle's (spec DT.2.4), 3u·|lp| (the
    rounding of x - m and of the final subtraction, with margin) plus lse_error_bound(V)."""
    with np.errstate(invalid="ignore"):
        return 3 * U32 * np.abs(oracle) + lse_error_bound(V)


CONTRACT = OpContract(
    slug="draft_topk",
    summary="the drafter's logits to tree_build's top-k inputs: fused log-softmax and top-k per depth, ranked by "
    "(logit descending, token id ascending)",
    args=(
        Arg(
            "logits",
            "array",
            "the drafter's logits per request and depth; -inf masks a token, NaN and +inf are refused",
            ("bfloat16", "float16", "float32"),
            ("bs", "L", "V"),
            reads_values=True,
        ),
        Arg("K", "int", "candidates kept per depth (tree_build's K_in), at most V", lo=1, hi=limits.MAX_TOPK),
    ),
    symbols=(
        Symbol("bs", 1, limits.MAX_BATCH, "batch size"),
        Symbol("L", 0, limits.MAX_DEPTH, "depth"),
        Symbol("V", 1, limits.MAX_VOCAB, "vocabulary"),
    ),
    outputs=(
        Output("top_logp", "float32", ("bs", "L", "K"), "log-probs of the K best logits, rows non-increasing"),
        Output("top_ids", "int32", ("bs", "L", "K"), "their token ids, (logit descending, token id ascending)"),
    ),
    result=TopK,
    check_values=_check_values,
    check_shapes=_dims,
    bounds=(
        Bound("K.at_most_V", "K", "at_most_dim", "DT.1.1", dim="V"),
        Bound("logits.no_nan", "logits", "no_nan", "DT.1.2"),
        Bound("logits.no_plus_inf", "logits", "no_plus_inf", "DT.1.2"),
    ),
    errors=(
        "a dtype, rank or shape is wrong, or a dimension is outside its limit; K is outside 1..MAX_TOPK or "
        "greater than V;",
        "a logit is NaN or +inf (named by its [request, depth, token] index).",
    ),
)

"""draft_topk's results against the float64 oracle (spec/draft_topk.md): the ids bit for bit (DT.2.1), the
log-probs within DT.2.4's bound, and the outputs as tree_build's inputs (DT.2.3, tree_build's own check)."""

from __future__ import annotations

import numpy as np

import contract
from contract.draft_topk import logp_tolerance
from harness import verdict
from harness.compare import assert_bit_exact
from reference import oracles

FLT_MAX = float(np.finfo(np.float32).max)


def assert_tree_build_inputs(got, K: int, context=None) -> None:
    """DT.2.3: float32 / int32 [bs, L, K] that tree_build's contract takes (TB.1.3: no NaN, <= 0, rows
    non-increasing, ids distinct and >= 0)."""
    lp, ids = np.asarray(got.top_logp), np.asarray(got.top_ids)
    verdict.expect(
        lp.dtype == np.float32 and ids.dtype == np.int32, "DT.2.3", f"dtypes {lp.dtype}, {ids.dtype} {context}"
    )
    verdict.expect(
        lp.shape == ids.shape and lp.ndim == 3 and lp.shape[2] == K, "DT.2.3", f"shapes {lp.shape}, {ids.shape}, K={K}"
    )
    bs = lp.shape[0]
    try:
        contract.TREE_BUILD.validate_host(lp, ids, np.zeros(bs, np.int32), 0)
    except contract.InputError as e:
        raise verdict.ClauseFailure("DT.2.3", f"the outputs are not tree_build inputs: {e} {context or ''}") from None
    verdict.passed("DT.2.3")


def assert_log_probs(lp: np.ndarray, want: np.ndarray, V: int, context=None, clause_id: str = "DT.2.4") -> None:
    """DT.2.4 per element (or the clause given, for an edge whose clause states the log-probs): -inf exactly
    where the oracle is -inf, -inf or within the bound where the oracle lies below float32's range, else
    |lp - lp64| <= logp_tolerance(V, lp64)."""
    lp64 = lp.astype(np.float64)
    ninf = want == -np.inf
    bad = ninf != (lp64 == -np.inf)
    below = want < -FLT_MAX * (1 - 4 * contract.draft_topk.U32)  # float32 rounds it to -inf or -FLT_MAX
    bad &= ~(below & (lp64 == -np.inf))
    with np.errstate(invalid="ignore"):
        err = np.abs(lp64 - want)
    tol = logp_tolerance(V, want)
    bad |= ~ninf & ~(below & (lp64 == -np.inf)) & ~(err <= tol)
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise verdict.ClauseFailure(
            clause_id,
            f"top_logp{list(i)} = {lp[i]!r}, float64 oracle {want[i]!r} (|error| {err[i]:.3g}, bound "
            f"{tol[i]:.3g} at V={V}); {int(bad.sum())} of {bad.size} entries off {context or ''}",
        )
    verdict.passed(clause_id)


def clause_of_ids(logits: np.ndarray, got_ids: np.ndarray, want_ids: np.ndarray, default: str = "DT.2.1") -> str:
    """The clause the first differing id breaks: DT.3.2 in a row of -inf only, DT.3.1 in the -inf tail, DT.2.2
    where a +0.0 and a -0.0 logit were told apart, else `default` (the order by logit, ties to the lower id)."""
    bad = np.argwhere(got_ids != want_ids)
    if not len(bad):
        return default
    b, d, k = (int(j) for j in bad[0])
    x = np.asarray(logits[b, d], np.float64)
    w, g = int(want_ids[b, d, k]), int(got_ids[b, d, k])
    if np.isneginf(x).all():
        return "DT.3.2"
    if np.isneginf(x[w]):
        return "DT.3.1"
    if 0 <= g < len(x) and x[g] == 0 and x[w] == 0 and np.signbit(x[g]) != np.signbit(x[w]):
        return "DT.2.2"
    return default


# The clauses assert_matches_oracle may fail (a test using it carries them).
ORACLE_CLAUSES = ("DT.2.1", "DT.2.2", "DT.2.3", "DT.2.4", "DT.3.1", "DT.3.2")


def assert_matches_oracle(
    got, logits: np.ndarray, K: int, *, id_clause: str = "DT.2.1", lp_clause: str = "DT.2.4", context=None
) -> None:
    """Every check of a result against the oracle: DT.2.3, the ids (bit for bit; a difference fails the clause
    it breaks, `id_clause` for the order itself), the log-probs (`lp_clause`, DT.2.4 unless an edge's clause
    states them)."""
    assert_tree_build_inputs(got, K, context)
    want_lp, want_ids = oracles.topk_log_probs(logits, K)
    ids = np.asarray(got.top_ids)
    which = clause_of_ids(logits, ids, want_ids, id_clause)
    assert_bit_exact(ids, want_ids.astype(np.int32), what="top_ids", spec_id=which, context=context)
    verdict.passed(id_clause)
    assert_log_probs(np.asarray(got.top_logp), want_lp, logits.shape[2], context, lp_clause)

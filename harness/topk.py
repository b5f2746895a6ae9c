"""draft_topk's results against the float64 oracle (spec/draft_topk.md): the ids bit for bit (DT.2.1), the
log-probs within DT.2.4's bound, and the outputs as tree_build's inputs (DT.2.3, tree_build's own check)."""

from __future__ import annotations

import numpy as np

import contract
from contract.draft_topk import logp_tolerance
from harness.compare import assert_bit_exact
from reference import oracles

FLT_MAX = float(np.finfo(np.float32).max)


def assert_tree_build_inputs(got, K: int, context=None) -> None:
    """DT.2.3: float32 / int32 [bs, L, K] that tree_build's contract takes (TB.1.3: no NaN, <= 0, rows
    non-increasing, ids distinct and >= 0)."""
    lp, ids = np.asarray(got.top_logp), np.asarray(got.top_ids)
    assert lp.dtype == np.float32 and ids.dtype == np.int32, f"[DT.2.3] dtypes {lp.dtype}, {ids.dtype} {context}"
    assert lp.shape == ids.shape and lp.ndim == 3 and lp.shape[2] == K, f"[DT.2.3] shapes {lp.shape}, {ids.shape}"
    bs = lp.shape[0]
    try:
        contract.TREE_BUILD.validate_host(lp, ids, np.zeros(bs, np.int32), 0)
    except contract.InputError as e:
        raise AssertionError(f"[DT.2.3] the outputs are not tree_build inputs: {e} {context or ''}") from None


def assert_log_probs(lp: np.ndarray, want: np.ndarray, V: int, context=None) -> None:
    """DT.2.4 per element: -inf exactly where the oracle is -inf, -inf or within the bound where the oracle
    lies below float32's range, else |lp - lp64| <= logp_tolerance(V, lp64)."""
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
        raise AssertionError(
            f"[DT.2.4] top_logp{list(i)} = {lp[i]!r}, float64 oracle {want[i]!r} (|error| {err[i]:.3g}, bound "
            f"{tol[i]:.3g} at V={V}); {int(bad.sum())} of {bad.size} entries off {context or ''}"
        )


def assert_matches_oracle(got, logits: np.ndarray, K: int, *, id_clause: str = "DT.2.1", context=None) -> None:
    """Every check of a result against the oracle: DT.2.3, the ids (bit for bit, under `id_clause`), DT.2.4."""
    assert_tree_build_inputs(got, K, context)
    want_lp, want_ids = oracles.topk_log_probs(logits, K)
    assert_bit_exact(np.asarray(got.top_ids), want_ids.astype(np.int32), what="top_ids", spec_id=id_clause,
                     context=context)  # fmt: skip
    assert_log_probs(np.asarray(got.top_logp), want_lp, logits.shape[2], context)

"""draft_topk conformance (spec/draft_topk.md) for every implementation: the drafter's logits to tree_build's
top-k inputs, ranked by (logit descending, token id ascending), log-probs within DT.2.4 of the float64 oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract import InputError, TopK
from harness import claims, topk, verdict
from harness import strategies as hh
from harness.cases import run
from harness.compare import assert_bit_exact
from harness.verdict import expect
from reference import drafter, oracles

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [BF16, np.dtype(np.float16), np.dtype(np.float32)]
DTYPE_IDS = ["bf16", "fp16", "fp32"]
DTYPE_NAMES = ["bfloat16", "float16", "float32"]
FLT_MAX = float(np.finfo(np.float32).max)
spec = pytest.mark.spec


def case(logits, K):
    return hh.topk_logits_case(logits, K)


def row(values, dtype=np.float32):
    """One request, one depth: logits [1, 1, V]."""
    with np.errstate(over="ignore"):
        return np.asarray(values, np.float64).astype(np.float32).astype(dtype)[None, None]


def good():
    """A valid case, in a dtype the implementation under test declares (float32 when it declares all)."""
    caps = claims.declared("draft_topk")
    dtype = np.float32 if caps is None or caps.dtypes is None else DTYPES[DTYPE_NAMES.index(caps.dtypes[0])]
    return case(hh.logit_rows(np.random.default_rng(1), (2, 3, 40), dtype, "normal"), 5)


def _bad(c, message, clause, name):
    return pytest.param(c, message, id=name, marks=clause)


# --- DT.1 Inputs ------------------------------------------------------------------------------------------------
BAD = [
    _bad(case(np.zeros((1, 2, 8)), 3), "logits: dtype float64, expected", spec("DT.1.1"), "fp64"),
    _bad(
        case(np.zeros((2, 8), np.float32), 3),
        r"logits: shape \(2, 8\) has 2 dims, expected 3",
        spec("DT.1.1"),
        "rank-2",
    ),
    _bad(
        case(np.zeros((1, 1, 0), np.float32), 1),
        "logits: vocabulary V=0 is outside 1..262144",
        spec("DT.1.1"),
        "V-zero",
    ),
    _bad(
        case(np.zeros((1, 1, 262_145), BF16), 1),
        "logits: vocabulary V=262145 is outside",
        spec("DT.1.1"),
        "V-too-large",
    ),
    _bad(
        case(np.zeros((1025, 1, 2), np.float32), 1),
        "logits: batch size bs=1025 is outside 1..1024",
        spec("DT.1.1"),
        "bs-too-large",
    ),
    _bad(
        case(np.zeros((1, 33, 2), np.float32), 1), "logits: depth L=33 is outside 0..32", spec("DT.1.1"), "L-too-deep"
    ),
    _bad(case(np.zeros((1, 1, 4), np.float32), 0), "K: 0 is outside 1..1024", spec("DT.1.1"), "K-zero"),
    _bad(case(np.zeros((1, 1, 2000), np.float32), 1025), "K: 1025 is outside 1..1024", spec("DT.1.1"), "K-too-large"),
    _bad(case(np.zeros((1, 1, 4), np.float32), True), "K: expected an integer", spec("DT.1.1"), "K-bool"),
    _bad(case(np.zeros((1, 2, 8), np.float32), 9), r"K: 9 > V=8", spec("DT.1.1"), "K-above-V"),
    _bad(case(np.zeros((1, 1, 1), BF16), 2), r"K: 2 > V=1", spec("DT.1.1"), "K-above-V-1"),
    _bad(
        case(np.ma.masked_array(np.zeros((1, 1, 4), np.float32)), 1),
        "logits: expected a plain numpy.ndarray",
        spec("DT.1.1"),
        "masked-array",
    ),
]
for _dt, _name in zip(DTYPES, DTYPE_IDS, strict=True):
    _x = np.zeros((2, 3, 5), _dt)
    _x[1, 2, 4] = np.nan
    _x[0, 0, 0] = -np.inf
    BAD.append(_bad(case(_x, 2), r"logits: NaN at \[request 1, depth 2, token 4\]", spec("DT.1.2"), f"nan-{_name}"))
    _y = np.zeros((2, 3, 5), _dt)
    _y[0, 1, 3] = np.inf
    BAD.append(_bad(case(_y, 2), r"logits: \+inf at \[request 0, depth 1, token 3\]", spec("DT.1.2"), f"inf-{_name}"))
_z = np.zeros((1, 2, 3), np.float32)
_z[0, 1, 0], _z[0, 0, 2] = np.inf, np.nan  # both: the NaN is named first (the contract's order)
BAD.append(_bad(case(_z, 1), r"logits: NaN at \[request 0, depth 0, token 2\]", spec("DT.1.2"), "nan-before-inf"))


@pytest.mark.parametrize("c,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, c, message):
    with pytest.raises(InputError, match=message):
        run(impl, c)


@pytest.mark.spec("DT.1.3")
def test_usable_after_bad_input(impl):
    """A rejected call leaves the implementation usable: the next valid call answers as it did before any bad
    input (whether that answer is right is the other clauses' business)."""
    g = good()
    want = run(impl, g)
    for bad in BAD:
        with pytest.raises(InputError):
            run(impl, bad.values[0])
        again = run(impl, g)
        assert_bit_exact(again.top_ids, want.top_ids, what="top_ids", spec_id="DT.1.3")
        assert_bit_exact(again.top_logp, want.top_logp, what="top_logp", spec_id="DT.1.3")


@pytest.mark.spec("DT.1.2", "DT.3.6", *topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_minus_inf_and_largest_finite_are_accepted(impl, dtype):
    """Accepted (DT.1.2); the answer for the dtype's largest values is DT.3.6's (and the oracle's)."""
    x = row([hh.dtype_max(dtype), -np.inf, -hh.dtype_max(dtype), 0.0, -np.inf], dtype)
    with verdict.clause("DT.1.2"):
        got = run(impl, case(x, 5))
    topk.assert_matches_oracle(got, x, 5, id_clause="DT.3.6", lp_clause="DT.3.6")


# --- DT.2 Selection, order and log-probs --------------------------------------------------------------------
@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@given(c=hh.logits_cases())
def test_equals_the_float64_oracle(impl, c):
    got = run(impl, c)
    topk.assert_matches_oracle(got, c.logits, c.K)


@pytest.mark.spec("DT.2.1")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ties_go_to_the_lower_id_at_the_kth_place(impl, dtype):
    """Ten tokens tie for the top, scattered; K = 4 keeps the four lowest ids, in ascending order; a tie group
    straddling the K-th place keeps its lowest ids too."""
    x = np.full(64, -3.0)
    top = [50, 3, 61, 17, 8, 33, 40, 12, 29, 5]
    x[top] = 2.0
    x[[9, 60, 2]] = 1.0
    got = run(impl, case(row(x, dtype), 4))
    expect(got.top_ids[0, 0].tolist() == [3, 5, 8, 12], "DT.2.1", f"{got.top_ids[0, 0].tolist()}")
    got = run(impl, case(row(x, dtype), 12))
    expect(got.top_ids[0, 0].tolist() == sorted(top) + [2, 9], "DT.2.1", f"{got.top_ids[0, 0].tolist()}")


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float32)], ids=["bf16", "fp32"])
@pytest.mark.parametrize(
    "V,K,tied",
    [
        # one block per row (V <= 4,096): a thread's tokens lie 256 apart, so the lowest tied ids (255, 256, 511,
        # 512, ...) come half from the last warp's last lane and half from the first warp's first lane
        (4096, 8, [255 + 256 * j for j in range(8)] + [256 * j for j in range(1, 9)]),
        # splits of 4,096 tokens and a merge over their 8 candidates each (40 splits: 320 candidates, a thread's
        # two 256 apart): one tie in every fourth split from split 1, so the merge's first warp holds splits 1
        # and 33 side by side
        (163_840, 8, [4096 * s + 7 for s in range(1, 40, 4)]),
    ],
    ids=["one-block", "splits"],
)
def test_kth_tie_is_not_decided_by_arrival(impl, dtype, V, K, tied):
    """More tokens tie at the K-th place than fit, placed so that no order in which a kernel's threads, warps or
    splits might reach them is the ids' order: the K lowest ids must be kept all the same, ascending."""
    x = np.random.default_rng(V).uniform(-8.0, -4.0, (1, 1, V))
    x[0, 0, tied] = 2.0
    x = x.astype(np.float32).astype(dtype)
    got = run(impl, case(x, K))
    expect(got.top_ids[0, 0].tolist() == sorted(tied)[:K], "DT.2.1", f"{got.top_ids[0, 0].tolist()}")
    topk.assert_matches_oracle(got, x, K)


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("period,allowed", [(256, 224), (256, 32), (64, 60), (8192, 100)])
@pytest.mark.parametrize("V", [4096, 40_000])
@pytest.mark.parametrize("K", [1, 8, 64])
@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float32)], ids=["bf16", "fp32"])
def test_periodic_masks(impl, period, allowed, V, K, dtype):
    """A vocabulary masked in a periodic pattern (only the first `allowed` tokens of every `period` may be drawn,
    as a grammar or reserved id ranges mask it): the finite logits crowd into some stretches of each row and are
    absent from others, the worst case of a kernel that bounds its candidates by a sample of each stretch."""
    x = hh.logit_rows(np.random.default_rng(period + allowed + V), (2, 2, V), np.float32, "normal")
    x[..., np.arange(V) % period >= allowed] = -np.inf
    x = x.astype(dtype)
    got = run(impl, case(x, K))
    topk.assert_matches_oracle(got, x, K)


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_subnormal_logits_are_exact_values(impl, dtype):
    """Subnormal logits (fp16's from 6e-8, fp32's and bf16's from 1e-45 and 9e-41) beside ±0 and the smallest
    normals: compared as the exact values they are, never flushed to zero (a flush would tie them with the zeros
    and hand the place to the lower id), and their log-probs within DT.2.4 of the float64 oracle."""
    pool = hh.subnormal_pool(dtype)
    x = np.stack([np.random.default_rng(k).permutation(np.resize(pool, 40)) for k in range(4)]).reshape(2, 2, 40)
    x = x.astype(np.float32).astype(dtype)
    got = run(impl, case(x, 12))
    topk.assert_matches_oracle(got, x, 12)


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
def test_bf16_ties_over_a_large_row(impl):
    """bf16 logits over 32,000 tokens tie in long runs (8 bits of mantissa): the order is still exact."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((1, 2, 32_000)) * 2).astype(np.float32).astype(BF16)
    got = run(impl, case(x, 64))
    topk.assert_matches_oracle(got, x, 64)
    top = np.sort(x.astype(np.float64)[0, 0])[-64:]  # the case's own property, not the implementation's
    assert (top[1:] == top[:-1]).sum() > 5, "the case has ties in its top 64"


@pytest.mark.spec("DT.2.2", *topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_signed_zeros_are_one_value(impl, dtype):
    x = row([-1.0, 0.0, -0.0, -2.0, -0.0, 0.0, -np.inf], dtype)
    got = run(impl, case(x, 7))
    expect(got.top_ids[0, 0].tolist() == [1, 2, 4, 5, 0, 3, 6], "DT.2.2", f"ids {got.top_ids[0, 0].tolist()}")
    lp = got.top_logp[0, 0]
    expect((lp[:4] == lp[0]).all(), "DT.2.2", f"the four zeros' log-probs differ: {lp[:4]}")
    topk.assert_matches_oracle(got, x, 7, id_clause="DT.2.2")
    only = run(impl, case(row([-0.0, 0.0], dtype), 2))  # the whole mass on ±0.0: log-probs -ln 2, no -0.0
    expect(only.top_ids[0, 0].tolist() == [0, 1], "DT.2.2", f"ids {only.top_ids[0, 0].tolist()} for [-0.0, 0.0]")
    one = run(impl, case(row([-0.0], dtype), 1))
    expect(one.top_logp[0, 0, 0] == 0 and not np.signbit(one.top_logp[0, 0, 0]), "DT.2.2", "a -0.0 log-prob")


@pytest.mark.spec("DT.2.3")
@settings(max_examples=20)
@given(c=hh.logits_cases(max_bs=2, max_L=3, max_V=60))
def test_outputs_build_a_tree(impl, c):
    """The outputs go straight into tree_build (the reference), and its tree equals the brute-force oracle's."""
    from reference.tree_build import tree_build

    got = run(impl, c)
    topk.assert_tree_build_inputs(got, c.K)
    bs, L = c.logits.shape[:2]
    B = min(6, c.K * L)
    tree = tree_build(got.top_logp, got.top_ids, np.zeros(bs, np.int32), B)
    for b in range(bs):
        par, _dep, tok, _rk, _sc = oracles.brute_force_tree(got.top_logp[b], got.top_ids[b], B)
        assert tree.tokens[b, 1 : 1 + len(tok)].tolist() == tok and tree.parents[b, 1 : 1 + len(par)].tolist() == par


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("V", [1_000, 32_000, 163_840])
def test_log_probs_within_the_bound_over_large_vocabularies(impl, V):
    """fp32 logits of a realistic spread (a peaked head, a long tail) at large V, against the exact sum."""
    rng = np.random.default_rng(V)
    x = (rng.standard_normal((1, 2, V)) * 2.5).astype(np.float32)
    x[0, 0, rng.integers(0, V, 5)] += 12.0
    got = run(impl, case(x, 16))
    topk.assert_matches_oracle(got, x, 16)


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("V", [4000, 4096, 4099])
@pytest.mark.parametrize("where", ["first", "last", "middle"])
def test_every_token_counts_in_the_sum(impl, where, V):
    """A flat row with one token 3 nats above the rest, at the row's first, last or middle place: a sum that
    leaves out part of the row (a last block, a thread's last element, a first element) misses it, or a share of
    the mass. V around 4,096 (a power of two, a little below, not a multiple of any block size): rows that one
    block holds whole and rows a kernel splits."""
    x = np.zeros((1, 1, V), np.float32)
    x[0, 0, {"first": 0, "last": V - 1, "middle": V // 2}[where]] = 3.0
    x[0, 0, -5:] += 1.0
    got = run(impl, case(x, 8))
    topk.assert_matches_oracle(got, x, 8)


@pytest.mark.spec("DT.2.5")
def test_ranking_is_by_logit_not_by_rounded_log_prob(impl):
    x = row([10.0, -30.0, np.float32(-30.0) + np.float32(2e-6)])
    got = run(impl, case(x, 3))
    assert got.top_logp[0, 0, 1] == got.top_logp[0, 0, 2], "the case needs two log-probs that round to one"
    expect(got.top_ids[0, 0].tolist() == [0, 2, 1], "DT.2.5", f"{got.top_ids[0, 0].tolist()}: ranked by log-prob")


@pytest.mark.spec("DT.2.5")
@pytest.mark.parametrize("noise_scale", [0.0, 0.5, 3.0])
def test_the_test_drafter_is_this_op(impl, noise_scale):
    """reference/drafter.py's top-k equals this op on the drafter's float32 perturbed logits (ids bit for bit,
    log-probs within DT.2.4): the test drafter and the op agree."""
    rng = np.random.default_rng(11)
    L, V, K, P = 3, 500, 16, 17
    target = (rng.standard_normal((L, V)) * 3).astype(np.float32)
    lp, ids = drafter.draft_topk(target, P, K, seed=5, noise_scale=noise_scale, temperature=0.8)
    z = np.stack(
        [target[d - 1].astype(np.float64) / 0.8 + noise_scale * drafter.noise(5, P, d, V) for d in range(1, L + 1)]
    ).astype(np.float32)[None]
    got = run(impl, case(z, K))
    assert_bit_exact(got.top_ids[0], ids, what="top_ids", spec_id="DT.2.5")
    topk.assert_log_probs(lp[None], oracles.topk_log_probs(z, K)[0], V, clause_id="DT.2.5")  # the drafter's


# --- DT.3 Edges -----------------------------------------------------------------------------------------------
@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("finite", [0, 1, 3, 5, 6])
def test_fewer_than_k_finite_logits_give_a_tail_of_the_lowest_masked_ids(impl, dtype, finite):
    V, K = 12, 5
    rng = np.random.default_rng(finite)
    x = np.full(V, -np.inf)
    places = rng.choice(V, finite, replace=False)
    x[places] = rng.uniform(-5, 5, finite)
    got = run(impl, case(row(x, dtype), K))
    lp, ids = got.top_logp[0, 0], got.top_ids[0, 0]
    F = min(finite, K)
    expect(int((lp == -np.inf).sum()) == K - F, "DT.3.1", f"{int((lp == -np.inf).sum())} -inf entries, want {K - F}")
    masked = [v for v in range(V) if v not in set(places.tolist())]
    expect(ids[F:].tolist() == masked[: K - F], "DT.3.1", f"tail ids {ids[F:].tolist()}, want {masked[: K - F]}")
    expect(np.isfinite(lp[:F]).all(), "DT.3.1", f"a finite logit's log-prob is not finite: {lp[:F]}")
    topk.assert_matches_oracle(got, row(x, dtype), K, id_clause="DT.3.1")


@pytest.mark.spec(*topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_row_of_minus_inf_only(impl, dtype):
    x = np.zeros((2, 2, 9), np.float32)
    x[1, 0] = -np.inf
    x[0, 1, 3] = 5.0
    got = run(impl, case(x.astype(dtype), 4))
    expect((got.top_logp[1, 0] == -np.inf).all() and not np.isnan(got.top_logp).any(), "DT.3.2", "log-probs")
    expect(got.top_ids[1, 0].tolist() == [0, 1, 2, 3], "DT.3.2", f"ids {got.top_ids[1, 0].tolist()}")
    topk.assert_matches_oracle(got, x.astype(dtype), 4, id_clause="DT.3.2")


@pytest.mark.spec("DT.3.3", *topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("V", [2, 7, 256, 1024])
def test_k_equal_to_v_ranks_the_whole_row(impl, V):
    x = hh.logit_rows(np.random.default_rng(V), (2, 2, V), BF16, "normal")
    got = run(impl, case(x, V))
    expect((np.sort(got.top_ids, axis=-1) == np.arange(V)).all(), "DT.3.3", "not a permutation of 0..V-1")
    topk.assert_matches_oracle(got, x, V, id_clause="DT.3.3")


@pytest.mark.spec("DT.3.4")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_a_vocabulary_of_one(impl, dtype):
    big = hh.dtype_max(dtype)
    x = np.array([[[big]], [[-big]], [[-np.inf]], [[0.25]]], np.float64).astype(np.float32).astype(dtype)
    got = run(impl, case(x, 1))
    assert got.top_ids.tolist() == [[[0]]] * 4
    assert got.top_logp[:3, 0, 0].tolist()[:2] == [0.0, 0.0] and got.top_logp[2, 0, 0] == -np.inf
    assert got.top_logp[3, 0, 0] == 0.0, "[DT.3.4] a finite logit alone has log-prob 0"


@pytest.mark.spec("DT.3.5")
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("value", ["largest", "smallest", "one"])
def test_one_huge_logit_beside_minus_infs(impl, dtype, value):
    big = hh.dtype_max(dtype)
    v = {"largest": big, "smallest": -big, "one": 1.0}[value]
    x = np.full(300, -np.inf)
    x[217] = v
    got = run(impl, case(row(x, dtype), 4))
    assert got.top_ids[0, 0].tolist() == [217, 0, 1, 2], f"[DT.3.5] ids {got.top_ids[0, 0].tolist()}"
    assert got.top_logp[0, 0].tolist() == [0.0, -np.inf, -np.inf, -np.inf], f"[DT.3.5] {got.top_logp[0, 0]}"


@pytest.mark.spec("DT.3.6", *topk.ORACLE_CLAUSES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_logits_near_the_largest_value_do_not_overflow(impl, dtype):
    big = hh.dtype_max(dtype)
    x = np.stack([np.full(7, big), [big, -big, big, 0.0, -np.inf, big / 2, -big / 2]])[None]
    x = x.astype(np.float32).astype(dtype)
    got = run(impl, case(x, 7))
    expect(not np.isnan(got.top_logp).any(), "DT.3.6", f"NaN among the log-probs {got.top_logp}")
    expect(
        np.isfinite(got.top_logp[0, 0]).all(), "DT.3.6", f"a row of the largest value overflowed: {got.top_logp[0, 0]}"
    )
    topk.assert_log_probs(got.top_logp[:, :1], np.full((1, 1, 7), -np.log(7.0)), 7, clause_id="DT.3.6")
    topk.assert_matches_oracle(got, x, 7, id_clause="DT.3.6", lp_clause="DT.3.6")
    if dtype == np.float32:  # [FLT_MAX, -FLT_MAX]: the second below float32's range
        two = run(impl, case(row([FLT_MAX, -FLT_MAX]), 2))
        expect(two.top_logp[0, 0].tolist() == [0.0, -np.inf], "DT.3.6", f"{two.top_logp[0, 0]}")


# --- DT.4 Execution properties -------------------------------------------------------------------------------
@pytest.mark.spec("DT.4.1")
@settings(max_examples=10)
@given(c=hh.logits_cases(max_bs=5, max_L=3, max_V=200))
def test_deterministic(impl, c):
    first = run(impl, c)
    for _ in range(impl.reruns):
        again = run(impl, c)
        for f in TopK.FIELDS:
            assert_bit_exact(getattr(again, f), getattr(first, f), what=f, spec_id="DT.4.1")


@pytest.mark.spec("DT.4.2")
@settings(max_examples=10)
@given(c=hh.logits_cases(max_bs=5, max_L=3, max_V=200), order=st.randoms(use_true_random=False))
def test_batch_invariant(impl, c, order):
    """(apart from DT.4.1's test: an implementation may promise determinism without batch invariance)"""
    first = run(impl, c)
    x = c.logits
    for b in range(x.shape[0]):  # each request alone
        one = run(impl, case(x[b : b + 1], c.K))
        for f in TopK.FIELDS:
            assert_bit_exact(getattr(one, f), getattr(first, f)[b : b + 1], what=f, spec_id="DT.4.2")
    perm = list(range(x.shape[0]))
    order.shuffle(perm)
    if x.shape[1] > 1:  # depths reversed too: a row's position does not matter
        shuffled = run(impl, case(np.ascontiguousarray(x[perm][:, ::-1]), c.K))
        want = [getattr(first, f)[perm][:, ::-1] for f in TopK.FIELDS]
    else:
        shuffled = run(impl, case(np.ascontiguousarray(x[perm]), c.K))
        want = [getattr(first, f)[perm] for f in TopK.FIELDS]
    for f, w in zip(TopK.FIELDS, want, strict=True):
        assert_bit_exact(getattr(shuffled, f), np.ascontiguousarray(w), what=f, spec_id="DT.4.2")

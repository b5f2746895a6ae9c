"""tree_build conformance (spec/tree_build.md) for every implementation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from contract import InputError, Tree, limits
from contract.trees import unpack_visibility
from harness import strategies as hh
from harness import tree_results, verdict
from harness.cases import run
from harness.compare import assert_bit_exact
from harness.verdict import expect
from reference import oracles

ORACLE_CANDIDATES = 3000  # keep the brute-force enumeration small


def valid_case(bs=2, L=3, K=4, B=6):
    rng = np.random.default_rng(7)
    lp = hh.logp_rows(rng, (bs, L, K), "bf16", 0.0)
    ids = np.stack([np.stack([rng.permutation(100)[:K] for _ in range(L)]) for _ in range(bs)]).astype(np.int32)
    return hh.topk_case(lp, ids, np.arange(bs, dtype=np.int32) + 500, B, np.full(bs, 5, np.int32))


def _lp_with(fn):
    lp = valid_case().top_logp.copy()
    fn(lp)
    return lp


def _ids_dup():
    ids = valid_case().top_ids.copy()
    ids[1, 2, 3] = ids[1, 2, 0]
    return ids


def _masked_nan():
    """A masked array whose NaN is masked out: numpy's own checks would not see it."""
    lp = _lp_with(lambda a: a.__setitem__((0, 1, 1), np.nan))
    return np.ma.masked_invalid(lp)


class _ForeignCudaArray:
    """An object that says it is a CUDA array (as numba's are) but is neither cupy nor torch."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": (2,), "typestr": "<i4", "data": (0, False), "version": 3}


spec = pytest.mark.spec


def _bad(arg, value, message, clause, name):
    return pytest.param(arg, value, message, id=name, marks=clause)


# --- TB.1 Inputs ------------------------------------------------------------------------------------------
BAD = [
    _bad(
        "top_logp", valid_case().top_logp.astype(np.float64), "top_logp: dtype float64", spec("TB.1.1"), "logp-float64"
    ),
    _bad("top_logp", valid_case().top_logp[0], "top_logp: shape .* has 2 dims", spec("TB.1.1"), "logp-rank2"),
    _bad(
        "top_logp",
        _masked_nan(),
        "top_logp: expected a plain numpy.ndarray, got the subclass",
        spec("TB.1.1"),
        "logp-masked-array",
    ),
    _bad(
        "top_ids",
        valid_case().top_ids[:, :2],
        r"top_ids: shape \(2, 2, 4\), expected \(2, 3, 4\)",
        spec("TB.1.1"),
        "ids-shape",
    ),
    _bad("top_ids", valid_case().top_ids.astype(np.int64), "top_ids: dtype int64", spec("TB.1.1"), "ids-int64"),
    _bad("root_tokens", np.zeros(3, np.int32), r"root_tokens: shape \(3,\)", spec("TB.1.1"), "roots-shape"),
    _bad("root_tokens", [1, 2], "root_tokens: expected a numpy array, got list", spec("TB.1.1"), "roots-list"),
    _bad("root_tokens", _ForeignCudaArray(), "root_tokens: .*CUDA array", spec("TB.1.1"), "roots-foreign-cuda-array"),
    _bad("prefix_lens", np.zeros(2, np.int64), "prefix_lens: dtype int64", spec("TB.1.1"), "prefix-int64"),
    _bad("budget", 1025, "budget: 1025 is outside 0..1024", spec("TB.1.2"), "budget-too-large"),
    _bad("budget", -1, "budget: -1 is outside", spec("TB.1.2"), "budget-negative"),
    _bad("budget", 2.0, "budget: expected an integer", spec("TB.1.2"), "budget-float"),
    _bad("budget", True, "budget: expected an integer, got bool", spec("TB.1.2"), "budget-bool"),
    _bad(
        "root_tokens", np.array([1, -4], np.int32), "root_tokens: negative token id", spec("TB.1.2"), "roots-negative"
    ),
    _bad("prefix_lens", np.array([0, -1], np.int32), "prefix_lens: negative length", spec("TB.1.2"), "prefix-negative"),
    _bad(
        "prefix_lens",
        np.array([0, 2**31 - 1], np.int32),
        "prefix_lens: request 1: prefix 2147483647 .* exceeds the context limit 262144",
        spec("TB.1.2"),
        "prefix-int32-max",
    ),
    _bad(
        "prefix_lens",
        np.array([0, limits.MAX_CONTEXT - 6], np.int32),
        "prefix_lens: request 1: .* = 262145 exceeds",
        spec("TB.1.2"),
        "context-one-over",
    ),
    _bad(
        "top_logp",
        np.zeros((2, 33, 1), np.float32),
        "top_logp: depth L=33 is outside 0..32",
        spec("TB.1.2"),
        "L-too-large",
    ),
    _bad(
        "top_logp",
        np.zeros((1025, 1, 1), np.float32),
        "top_logp: batch size bs=1025 is outside 1..1024",
        spec("TB.1.2"),
        "bs-too-large",
    ),
    _bad(
        "top_logp",
        np.zeros((2, 1, 1025), np.float32),
        "top_logp: top-k K_in=1025 is outside 0..1024",
        spec("TB.1.2"),
        "K-too-large",
    ),
    _bad("with_full_mask", 1, "with_full_mask: expected True or False, got int", spec("TB.1.2"), "full-mask-int"),
    _bad(
        "top_logp",
        _lp_with(lambda a: a.__setitem__((1, 1, 2), np.nan)),
        r"top_logp: NaN at \(1, 1, 2\)",
        spec("TB.1.3"),
        "nan",
    ),
    _bad(
        "top_logp",
        _lp_with(lambda a: a.__setitem__((0, 0, 0), 0.5)),
        "top_logp: log-prob > 0",
        spec("TB.1.3"),
        "positive",
    ),
    _bad(
        "top_logp",
        _lp_with(lambda a: a.__setitem__((0, 0, 0), np.inf)),
        "top_logp: log-prob > 0",
        spec("TB.1.3"),
        "plus-inf",
    ),
    _bad(
        "top_logp",
        _lp_with(lambda a: a.__setitem__((1, 2, slice(None)), a[1, 2, ::-1].copy())),
        r"top_logp: row \[1, 2\] is not non-increasing",
        spec("TB.1.3"),
        "unsorted",
    ),
    _bad("top_ids", _ids_dup(), r"top_ids: row \[1, 2\] has duplicate token ids", spec("TB.1.3"), "duplicate-ids"),
    _bad("top_ids", -valid_case().top_ids - 1, "top_ids: negative token id", spec("TB.1.3"), "ids-negative"),
]


def _bad_case(arg, value):
    case = valid_case().with_args(**{arg: value})
    if arg == "top_logp" and getattr(value, "ndim", 0) == 3 and value.shape != case.top_ids.shape:
        bs, _, K = value.shape  # give the other inputs the same shape, so the error is about the limit
        ids = np.zeros(value.shape, np.int32) + np.arange(K, dtype=np.int32)
        case = case.with_args(top_ids=ids, root_tokens=np.zeros(bs, np.int32), prefix_lens=np.zeros(bs, np.int32))
    return case


@pytest.mark.parametrize("arg,value,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, arg, value, message):
    with pytest.raises(InputError, match=message):
        run(impl, _bad_case(arg, value))


@pytest.mark.spec("TB.1.2")
def test_full_mask_size_is_checked_before_anything_is_allocated(impl):
    """D·(prefix + D) bytes per request: 1024 requests near the context limit would take ~280 GB; refused
    with the argument named, while the same call without the layout is bounded by its bitmask."""
    bs, B = 1024, 1024
    lp = np.zeros((bs, 1, 1), np.float32)
    ids = np.zeros((bs, 1, 1), np.int32)
    case = hh.topk_case(lp, ids, np.zeros(bs, np.int32), B, np.full(bs, limits.MAX_CONTEXT - 1 - B, np.int32))
    with pytest.raises(InputError, match="with_full_mask: the FULL_MASK layout would take 27"):
        run(impl, case.with_args(with_full_mask=True))


@pytest.mark.spec("TB.1.4")
def test_usable_after_bad_input(impl):
    """A rejected call leaves the implementation (and the device) usable: the next valid call answers as it did
    before any bad input (whether that answer is right is the other clauses' business)."""
    good = valid_case()
    before = run(impl, good)
    for bad in BAD:
        arg, value, _ = bad.values
        with pytest.raises(InputError):
            run(impl, _bad_case(arg, value))
        got = run(impl, good)
        for f in Tree.FIELDS:
            assert_bit_exact(
                np.asarray(getattr(got, f)),
                np.asarray(getattr(before, f)),
                what=f,
                spec_id="TB.1.4",
                context={"after": bad.id},
            )


def runs(impl, case):
    """The op's results on `case`; for select_race twice: as launched (its launch hands budgets below its
    type's race_min_b to lane_cached's build) and with the race at every budget (the knob race_min_b = 1), so
    that these clauses check the race build itself on small trees too."""
    return [run(impl, case, race_min_b=m) for m in impl.knob_values("tree_build", "race_min_b", [None, 1])]


# --- TB.2 Algorithm ---------------------------------------------------------------------------------------
def check_matches_reference(got, case):
    """Every field equal to the reference's tree, each difference failing its own clause (tree_results)."""
    from reference import tree_build as ref

    tree_results.check_tree(got, ref.tree_build(**case.args))


# (s - lp[r]) + lp[r+1] and s + (lp[r+1] - lp[r]) differ here in float64: a fast-math kernel would fail.
REASSOCIATION = hh.topk_case(
    np.array([[[-2.3007946242659116e-11, -200.0], [-3.614973920207376e-08, -144.13876342773438]]], np.float32),
    np.array([[[1, 2], [3, 4]]], np.int32),
    np.array([0], np.int32),
    3,
    np.array([0], np.int32),
)
SIGNED_ZERO = hh.topk_case(
    np.array([[[-0.0, -1.0], [-0.0, -2.0]]], np.float32),
    np.array([[[1, 2], [3, 4]]], np.int32),
    np.array([0], np.int32),
    4,
    np.array([0], np.int32),
)


DEEP_TIES = hh.topk_case(  # a certain path to depth 8, then every candidate below ties with its cousins
    np.concatenate([np.tile(np.float32([0.0, -100.0]), (1, 8, 1)), np.full((1, 4, 2), -0.5, np.float32)], axis=1),
    np.arange(24, dtype=np.int32).reshape(1, 12, 2),  # ids ascending with rank: "the higher id" is the later rank
    np.array([0], np.int32),
    40,
    np.array([0], np.int32),
)


@pytest.mark.spec(*tree_results.CLAUSES)
@given(case=hh.topk_inputs(max_L=limits.MAX_DEPTH, max_candidates=ORACLE_CANDIDATES))
@example(
    case=hh.topk_case(
        np.array([[[-0.5, -0.5], [-0.5, -0.5]]], np.float32),
        np.array([[[1, 2], [3, 4]]], np.int32),
        np.array([9], np.int32),
        4,
        np.array([0], np.int32),
    )
)
@example(case=REASSOCIATION)
@example(case=SIGNED_ZERO)
@example(case=DEEP_TIES)
@settings(max_examples=max(400, settings().max_examples))  # the bar: >= 400 cases against the oracle
def test_equals_brute_force_oracle(impl, case):
    """Every field against the brute-force oracle's tree, to depth 32 where its candidates stay few (small
    top-k or budget): ties everywhere: (0,0) before (0,1) before (1,0) before (1,1)."""
    want = tree_results.oracle_tree(**case.args)
    for got in runs(impl, case):
        tree_results.check_tree(got, want)


@pytest.mark.spec("TB.2.2")
@given(case=hh.topk_inputs(max_bs=3, max_L=limits.MAX_DEPTH, max_K=8, max_B=128))
@example(case=DEEP_TIES)
def test_pop_order_is_the_total_order(impl, case):
    """Trees of any depth (no oracle needed): each node comes after the one before it in the total order,
    (score descending, rank tuple ascending), the rank tuples read from the tree's own parents and ranks."""
    for got in runs(impl, case):
        for b in range(case.top_logp.shape[0]):
            n = int(got.n_nodes[b])
            tuples = tree_results.rank_tuples(np.asarray(got.parents[b]), np.asarray(got.ranks[b]), n)
            keys = [(-float(got.scores[b, i + 1]), t) for i, t in enumerate(tuples) if t is not None]
            for i in range(1, len(keys)):
                expect(
                    keys[i - 1] < keys[i],
                    "TB.2.2",
                    f"request {b}: node {i + 1} (rank tuple {keys[i][1]}, score {-keys[i][0]!r}) pops after node "
                    f"{i} (rank tuple {keys[i - 1][1]}, score {-keys[i - 1][0]!r})",
                )


@pytest.mark.spec("TB.2.1")
@given(case=hh.topk_inputs(max_bs=2, max_L=limits.MAX_DEPTH, max_K=6, max_B=40))
@example(case=REASSOCIATION)
@example(case=SIGNED_ZERO)
def test_scores_are_the_float64_recursion(impl, case):
    """Recompute every score from its rank tuple with the recursion written out here (independent of the
    reference's code) and compare bits: first node float(lp[0][0]), child s + lp[d][0], sibling
    (s - lp[d-1][r]) + lp[d-1][r+1]."""
    lp = case.top_logp
    for got in runs(impl, case):
        for b in range(lp.shape[0]):
            for i in range(1, int(got.n_nodes[b])):
                chain = []
                j = i
                while j > 0:
                    chain.append(j)
                    j = int(got.parents[b, j])
                s = None
                for node in reversed(chain):  # root side first
                    d, r = int(got.depths[b, node]), int(got.ranks[b, node])
                    s = float(lp[b, 0, 0]) if d == 1 else s + float(lp[b, d - 1, 0])
                    for rr in range(r):
                        s = (s - float(lp[b, d - 1, rr])) + float(lp[b, d - 1, rr + 1])
                expect(
                    np.float64(s).view(np.uint64) == np.float64(got.scores[b, i]).view(np.uint64),
                    "TB.2.1",
                    f"request {b} node {i}: score {got.scores[b, i]!r}, recursion {s!r}",
                )


@pytest.mark.spec("TB.2.4", "TB.2.5")
@given(case=hh.topk_inputs(max_L=limits.MAX_DEPTH, max_K=6, max_B=64))
def test_node_count_and_no_inf(impl, case):
    lp, B = case.top_logp, case.budget
    for got in runs(impl, case):
        for b in range(lp.shape[0]):
            _L, K_in = lp.shape[1:]
            K = min(B, K_in)
            finite = 0 if K == 0 else _finite_candidates(lp[b, :, :K])
            expect(
                int(got.n_nodes[b]) == 1 + min(B, finite),
                "TB.2.4",
                f"request {b}: n_nodes {int(got.n_nodes[b])}, 1 + min(B, finite candidates) = {1 + min(B, finite)}",
            )
            n = int(got.n_nodes[b])
            expect(np.isfinite(got.scores[b, :n]).all(), "TB.2.5", f"request {b}: non-finite score selected")
            expect(not np.isnan(got.scores[b]).any(), "TB.2.5", f"request {b}: NaN in scores")


def _finite_candidates(lp) -> int:
    """Number of rank tuples with a finite score, capped (cheap: counts per depth multiply)."""
    total, paths = 0, 1
    for d in range(lp.shape[0]):
        paths *= int(np.isfinite(lp[d]).sum())
        total += paths
        if total > 10**6 or paths == 0:
            break
    return total


@pytest.mark.spec("TB.2.6", "TB.2.7")
@given(case=hh.topk_inputs(max_bs=3, max_L=limits.MAX_DEPTH, max_K=16, max_B=128))
def test_node_fields(impl, case):
    lp, ids, roots, B = case.top_logp, case.top_ids, case.root_tokens, case.budget
    for got in runs(impl, case):
        K = min(B, lp.shape[2])
        for b in range(lp.shape[0]):
            n = int(got.n_nodes[b])
            par, dep, tok, rk, sc = (got.parents[b], got.depths[b], got.tokens[b], got.ranks[b], got.scores[b])
            root = (int(par[0]), int(dep[0]), int(tok[0]), int(rk[0]), float(sc[0]))
            expect(root == (-1, 0, int(roots[b]), -1, 0.0), "TB.2.7", f"request {b}: root slot {root}")
            expect(np.float64(sc[0]).view(np.uint64) == 0, "TB.2.7", f"request {b}: root score must be +0.0")
            idx = np.arange(1, n)
            expect((par[1:n] < idx).all() and (par[1:n] >= 0).all(), "TB.2.6", f"request {b}: parent before child")
            with verdict.clause("TB.2.6"):
                assert (dep[1:n] == dep[par[1:n]] + 1).all() and ((dep[1:n] >= 1) & (dep[1:n] <= lp.shape[1])).all()
                assert ((rk[1:n] >= 0) & (rk[1:n] < K)).all(), f"request {b}: ranks outside 0..{K - 1}"
                assert (tok[1:n] == ids[b, dep[1:n] - 1, rk[1:n]]).all(), f"request {b}: tokens from ids"
                assert (np.diff(sc[1:n]) <= 0).all(), f"request {b}: scores non-increasing"
                seen = set()
                for i in range(1, n):
                    assert (par[i], tok[i]) not in seen, f"request {b}: duplicate sibling token at node {i}"
                    seen.add((par[i], tok[i]))


@pytest.mark.spec("TB.2.8")
@given(case=hh.topk_inputs(max_L=limits.MAX_DEPTH, max_K=3, max_B=64))
def test_pad_slots(impl, case):
    lp, roots, B, prefix = case.top_logp, case.root_tokens, case.budget, case.prefix_lens
    for got in runs(impl, case):
        D = 1 + B
        bits = unpack_visibility(np.asarray(got.visibility), D)
        for b in range(lp.shape[0]):
            n = int(got.n_nodes[b])
            pads = np.arange(n, D)
            if not len(pads):
                continue
            assert (got.parents[b, pads] == -1).all() and (got.depths[b, pads] == 0).all()
            assert (got.tokens[b, pads] == roots[b]).all() and (got.ranks[b, pads] == -1).all()
            assert (got.scores[b, pads] == -np.inf).all() and (got.positions[b, pads] == prefix[b]).all()
            assert not bits[b][np.ix_(np.setdiff1d(np.arange(D), pads), pads)].any(), "[TB.2.8] a pad is visible"
            for p in pads:
                assert set(np.flatnonzero(bits[b, p])) == {0, p}, f"[TB.2.8] pad {p} must see root and itself"
            assert not np.isin(pads, got.first_child[b]).any() and not np.isin(pads, got.next_sibling[b]).any()
            assert (got.first_child[b, pads] == -1).all() and (got.next_sibling[b, pads] == -1).all()


# --- TB.3 Layouts -----------------------------------------------------------------------------------------
@pytest.mark.spec("TB.3.1", "TB.3.2", "TB.3.3", "TB.3.4")
@given(case=hh.topk_inputs(max_bs=3, max_L=limits.MAX_DEPTH, max_K=8, max_B=70))
def test_layouts_consistent_with_parents(impl, case):
    """Each layout recomputed independently from the parent array (oracle: ancestor closure)."""
    lp, B, prefix = case.top_logp, case.budget, case.prefix_lens
    for got in runs(impl, case):
        D = 1 + B
        W = (D + 31) // 32
        expect(
            got.visibility.shape == (lp.shape[0], D, W) and got.visibility.dtype == np.uint32,
            "TB.3.1",
            f"visibility {got.visibility.dtype}{list(got.visibility.shape)}, expected uint32{[lp.shape[0], D, W]}",
        )
        offset = 0
        for b in range(lp.shape[0]):
            n = int(got.n_nodes[b])
            closure = oracles.ancestor_closure(got.parents[b], n)
            packed = np.zeros((D, W), np.uint32)
            for i, j in zip(*np.nonzero(closure)):
                packed[i, j // 32] |= np.uint32(1) << np.uint32(j % 32)
            assert_bit_exact(got.visibility[b], packed, what="visibility", spec_id="TB.3.1", context={"request": b})
            assert_bit_exact(
                got.positions[b], (prefix[b] + got.depths[b]).astype(np.int32), what="positions", spec_id="TB.3.2"
            )
            fc, ns = hh.links_of(got.parents[b, :n], D)
            assert_bit_exact(got.first_child[b], fc, what="first_child", spec_id="TB.3.3")
            assert_bit_exact(got.next_sibling[b], ns, what="next_sibling", spec_id="TB.3.3")
            if case.with_full_mask:
                size = D * (int(prefix[b]) + D)
                block = got.full_mask[offset : offset + size].reshape(D, int(prefix[b]) + D)
                want = np.concatenate([np.ones((D, int(prefix[b])), bool), closure], axis=1)
                assert_bit_exact(block, want, what="full_mask", spec_id="TB.3.4", context={"request": b})
                offset += size
        expect(got.full_mask.shape == (offset,), "TB.3.4", "FULL_MASK is made when asked for, and only then")


# --- TB.4 Execution properties ------------------------------------------------------------------------------
@pytest.mark.spec("TB.4.1")
@settings(max_examples=10)
@given(case=hh.topk_inputs(max_bs=8, max_L=limits.MAX_DEPTH, max_K=32, max_B=256))
def test_deterministic(impl, case):
    first = run(impl, case)
    for _ in range(impl.reruns):
        again = run(impl, case)
        for f in Tree.FIELDS:
            assert_bit_exact(np.asarray(getattr(again, f)), np.asarray(getattr(first, f)), what=f, spec_id="TB.4.1")


@pytest.mark.spec("TB.4.2")
@given(case=hh.topk_inputs(max_bs=6, max_L=limits.MAX_DEPTH, max_K=8, max_B=40), data=st.data())
def test_batch_invariant(impl, case, data):
    full = run(impl, case)
    b = data.draw(st.integers(0, case.top_logp.shape[0] - 1), label="request")
    one = slice(b, b + 1)
    alone = run(
        impl,
        case.with_args(
            top_logp=case.top_logp[one],
            top_ids=case.top_ids[one],
            root_tokens=case.root_tokens[one],
            prefix_lens=case.prefix_lens[one],
        ),
    )
    for f in Tree.FIELDS:
        if f == "full_mask":
            continue
        assert_bit_exact(
            np.asarray(getattr(alone, f))[:1], np.asarray(getattr(full, f))[b : b + 1], what=f, spec_id="TB.4.2"
        )


# --- the select-then-verify kernels' replay (kernels_cu/tree_build.cu: select_verify, select_warp, select_race) --
FALLBACK_CASES = hh.select_fallback_cases()


@pytest.mark.spec(*tree_results.CLAUSES)
@pytest.mark.parametrize("name", sorted(FALLBACK_CASES))
def test_inputs_that_force_the_select_fallback(impl, name):
    """Inputs on which a selection shortcut goes wrong (unstable sibling chains) or overflows (ties everywhere):
    every implementation is still the reference, bit for bit. test_select_fallback_is_taken shows that both
    select kernels replay on them; their mutants without the replay or the chain check fail here."""
    from reference import tree_build as ref

    case = FALLBACK_CASES[name]
    want = ref.tree_build(**case.args)
    if name == "unstable_chains":  # the input does what it claims: the shortcut misses nodes of the tree
        lp = case.top_logp
        misses = sum(
            _chain_shortcut_misses(lp[b], want.ranks[b], want.depths[b], want.parents[b], want.scores[b])
            for b in range(lp.shape[0])
        )
        assert misses > 0
    for got in runs(impl, case):
        check_matches_reference(got, case)


def _chain_shortcut_misses(lp, ranks, depths, parents, scores) -> int:
    """How many nodes of one request's tree have a score that the chain shortcut t_0 + lp[r] (t_0 = s_0 - lp[0],
    s_0 the first sibling's score) gets wrong: where a kernel that skipped its stability check would differ."""
    misses = 0
    for i in range(1, len(ranks)):
        r, d = int(ranks[i]), int(depths[i])
        if r < 1 or parents[i] < 0:
            continue
        row = lp[d - 1].astype(np.float64)
        p = int(parents[i])
        s0 = float(row[0]) if d == 1 else float(scores[p]) + float(row[0])
        misses += (s0 - float(row[0])) + float(row[r]) != float(scores[i])
    return misses


SELECT_VARIANTS = ("select_verify", "select_warp", "select_race")


def _select_reporting_fallbacks(variant):
    """A select-then-verify variant of tree_build built to report its replays in n_nodes (-1 a check failed,
    -2 overflow)."""
    from harness import device
    from kernels_cu import specs, tree_build_ops

    if not device.probe().ok:
        pytest.skip(f"GPU unavailable: {device.probe().reason}")
    spec = specs.get("tree_build", variant).with_defines(f"{variant}_report", TB_FALLBACK="2")
    return tree_build_ops.bind(spec, race_min_b=1 if "race_min_b" in spec.knobs else None)  # race at every budget


@pytest.mark.gpu
@pytest.mark.spec("TB.2.3")
@pytest.mark.parametrize("variant", SELECT_VARIANTS)
def test_select_fallback_is_taken(variant):
    build = _select_reporting_fallbacks(variant)
    for name, why in (("unstable_chains", -1), ("all_ties", -2)):
        got = build(**FALLBACK_CASES[name].args)
        assert (np.asarray(got.n_nodes) == why).any(), (name, got.n_nodes)


@pytest.mark.gpu
@pytest.mark.spec(*tree_results.CLAUSES)
@pytest.mark.parametrize("B, L, K", [(12, 4, 6), (520, 3, 24)])
def test_race_beyond_a_wave_replays_alone(B, L, K):
    """For more requests than a wave of races (one per SM, two at B >= 512) select_race hands the batch to the
    replay's own build (lane_cached, small CTAs): that launch gives the reference's tree too."""
    from harness import device
    from kernels_cu import geometry, runtime, specs, tree_build_ops

    if not device.probe().ok:
        pytest.skip(f"GPU unavailable: {device.probe().reason}")
    bs = 2 * runtime.sm_count() + 1
    race = specs.get("tree_build", "select_race")
    plan = geometry.tree_build_launch(
        "select_race", tree_build_ops.policy(race), bs, B, L, K, 1 << 40, runtime.sm_count(), 1
    )
    assert plan["variant"] == "lane_cached", "the rule changed"
    rng = np.random.default_rng(B)
    lp = hh.logp_rows(rng, (bs, L, K), "bf16", 0.3)
    case = hh.topk_case(lp, hh.distinct_ids(rng, (bs, L, K)), np.arange(bs, dtype=np.int32), B, np.zeros(bs, np.int32))
    got = tree_build_ops.bind(specs.get("tree_build", "select_race"), race_min_b=1)(**case.args)
    check_matches_reference(got, case)


@pytest.mark.gpu
@pytest.mark.spec(*tree_results.CLAUSES)
@pytest.mark.parametrize("variant", SELECT_VARIANTS)
@pytest.mark.parametrize("B", [16, 64, 256, 1024])
def test_select_path_serves_drafter_like_inputs(variant, B):
    """On the benchmark's inputs (bf16-quantized log-probs, L = 15, K_in = B) the selection is verified and
    taken in every request, and the tree is the reference's, bit for bit."""
    build = _select_reporting_fallbacks(variant)
    rng = np.random.default_rng(B)
    bs, L = 4, 15
    lp = hh.logp_rows(rng, (bs, L, B), "bf16", 0.0)
    case = hh.topk_case(lp, hh.distinct_ids(rng, (bs, L, B)), np.arange(bs, dtype=np.int32), B, np.zeros(bs, np.int32))
    got = build(**case.args)
    assert (np.asarray(got.n_nodes) > 0).all(), f"fell back: {got.n_nodes}"
    check_matches_reference(got, case)

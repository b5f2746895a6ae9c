"""tree_accept conformance (spec/tree_accept.md) for every implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import strategies as hh
from harness.compare import assert_bit_exact
from reference import oracles
from reference import tree_accept as ref
from reference.validate import InputError

DTYPES = [np.float32, ml_dtypes.bfloat16]


def walk(impl, case, **commit):
    _par, _n, tok, fc, ns, tgt, L = case
    return impl.op("tree_accept")(tok, fc, ns, tgt, max_depth=L, **commit)


def commit_inputs(case, dtype, page_size, seed):
    """A paged cache holding each request's prefix + tree rows, with poisoned unused rows."""
    _par, _n, tok, _fc, _ns, _tgt, _L = case
    bs, D = tok.shape
    rng = np.random.default_rng(seed)
    prefix = rng.choice([0, 1, 63, 64, 65], bs).astype(np.int32)
    _, kv, bt = hh.build_paged_cache(rng, dtype, prefix, D, page_size, 1)
    return kv, bt, prefix


def small_tree():
    # root -> 1 (tok 5) -> 3 (tok 7); root -> 2 (tok 6); node 4 is a pad
    par = np.array([[-1, 0, 0, 1, -1]], np.int32)
    tok = np.array([[9, 5, 6, 7, 9]], np.int32)
    fc, ns = hh.links_of(par[0, :4], 5)
    tgt = np.array([[5, 7, 0, 1, 0]], np.int32)
    return hh.AcceptCase((par, np.array([4], np.int32), tok, fc[None], ns[None], tgt, 2))


def _with(i, value):
    c = list(small_tree())
    c[i] = value
    return hh.AcceptCase(tuple(c))


def _fc(fn):
    fc = small_tree()[3].copy()
    fn(fc)
    return fc


# --- TA.1 Inputs ------------------------------------------------------------------------------------------
BAD = [
    pytest.param(
        _with(2, small_tree()[2].astype(np.int64)),
        {},
        "tokens: dtype int64",
        id="tokens-int64",
        marks=pytest.mark.spec("TA.1.1"),
    ),
    pytest.param(
        _with(5, small_tree()[5][:, :3]),
        {},
        r"target_tokens: shape \(1, 3\)",
        id="target-shape",
        marks=pytest.mark.spec("TA.1.1"),
    ),
    pytest.param(_with(6, 40), {}, "max_depth: 40 is outside 0..32", id="max-depth", marks=pytest.mark.spec("TA.1.1")),
    pytest.param(
        small_tree(),
        {"kv_cache": np.zeros((2, 4, 576), np.float32)},
        "kv_cache: the commit needs kv_cache, block_table and prefix_lens together",
        id="commit-partial",
        marks=pytest.mark.spec("TA.1.1"),
    ),
    pytest.param(
        small_tree(),
        {
            "kv_cache": np.zeros((2, 4, 512), np.float32),
            "block_table": np.zeros((1, 2), np.int32),
            "prefix_lens": np.zeros(1, np.int32),
        },
        "kv_cache: shape",
        id="kv-dim",
        marks=pytest.mark.spec("TA.1.1"),
    ),
    pytest.param(
        small_tree(),
        {
            "kv_cache": np.zeros((2, 4, 576), np.float16),
            "block_table": np.zeros((1, 2), np.int32),
            "prefix_lens": np.zeros(1, np.int32),
        },
        "kv_cache: dtype float16",
        id="kv-fp16",
        marks=pytest.mark.spec("TA.1.1"),
    ),
    pytest.param(
        _with(3, _fc(lambda a: a.__setitem__((0, 1), 0))),
        {},
        r"first_child: \[0, 1\] = 0 must be -1 or an index in 2..4",
        id="cycle",
        marks=pytest.mark.spec("TA.1.2"),
    ),
    pytest.param(
        _with(3, _fc(lambda a: a.__setitem__((0, 2), 3))),
        {},
        "node 3 has more than one incoming link",
        id="two-parents",
        marks=pytest.mark.spec("TA.1.2"),
    ),
    pytest.param(
        _with(3, _fc(lambda a: a.__setitem__((0, 3), 9))),
        {},
        r"first_child: \[0, 3\] = 9",
        id="out-of-range",
        marks=pytest.mark.spec("TA.1.2"),
    ),
    pytest.param(
        _with(6, 1), {}, "node 3 is at depth 2 > max_depth 1", id="too-deep", marks=pytest.mark.spec("TA.1.2")
    ),
    pytest.param(
        _with(4, np.array([[2, -1, -1, -1, -1]], np.int32)),
        {},
        "next_sibling: root of request 0 has a sibling",
        id="root-sibling",
        marks=pytest.mark.spec("TA.1.2"),
    ),
    pytest.param(
        small_tree(),
        {
            "kv_cache": np.zeros((2, 4, 576), np.float32),
            "block_table": np.array([[0, 5]], np.int32),
            "prefix_lens": np.zeros(1, np.int32),
        },
        r"block_table: \[0, 1\] = 5 is not a page index",
        id="bad-page",
        marks=pytest.mark.spec("TA.1.3"),
    ),
    pytest.param(
        small_tree(),
        {
            "kv_cache": np.zeros((2, 4, 576), np.float32),
            "block_table": np.array([[0]], np.int32),
            "prefix_lens": np.zeros(1, np.int32),
        },
        "block_table: request 0 needs 2 pages",
        id="short-table",
        marks=pytest.mark.spec("TA.1.3"),
    ),
    pytest.param(
        small_tree(),
        {
            "kv_cache": np.zeros((2, 4, 576), np.float32),
            "block_table": np.array([[0, 1]], np.int32),
            "prefix_lens": np.array([-1], np.int32),
        },
        "prefix_lens: negative length",
        id="prefix-negative",
        marks=pytest.mark.spec("TA.1.3"),
    ),
]


@pytest.mark.parametrize("case,commit,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, case, commit, message):
    kv = commit.get("kv_cache")
    before = None if kv is None else kv.copy()
    with pytest.raises(InputError, match=message):
        walk(impl, case, **commit)
    if kv is not None:
        assert_bit_exact(kv, before, what="kv_cache", spec_id="TA.1.3")  # nothing was written


# --- TA.2 Walk ---------------------------------------------------------------------------------------------
@pytest.mark.spec("TA.2.1", "TA.2.2", "TA.2.3")
@given(case=hh.accept_cases())
def test_walk_equals_parent_walk_oracle(impl, case):
    par, n, tok, _fc, _ns, tgt, L = case
    got = walk(impl, case)
    bs = tok.shape[0]
    for b in range(bs):
        path, bonus = oracles.parent_walk(par[b], tok[b], tgt[b], int(n[b]))
        k = len(path) - 1
        want_path = np.full(1 + L, -1, np.int32)
        want_path[: len(path)] = path
        want_emit = np.full(1 + L, -1, np.int32)
        want_emit[:k] = tok[b, path[1:]]
        want_emit[k] = bonus
        ctx = {"request": b}
        assert int(got.accept_len[b]) == k, f"[TA.2.1] request {b}: accept_len {int(got.accept_len[b])}, oracle {k}"
        assert_bit_exact(got.accept_path[b], want_path, what="accept_path", spec_id="TA.2.3", context=ctx)
        assert_bit_exact(got.emitted[b], want_emit, what="emitted", spec_id="TA.2.3", context=ctx)
        assert int(got.bonus[b]) == bonus, f"[TA.2.3] request {b}: bonus"


@pytest.mark.spec("TA.2.2")
def test_first_matching_sibling_wins(impl):
    par = np.array([[-1, 0, 0, 0, 1, 2]], np.int32)
    tok = np.array([[0, 4, 4, 4, 8, 8]], np.int32)
    fc, ns = hh.links_of(par[0], 6)
    tgt = np.array([[4, 8, 8, 0, 0, 0]], np.int32)
    got = walk(impl, hh.AcceptCase((par, np.array([6], np.int32), tok, fc[None], ns[None], tgt, 2)))
    assert got.accept_path[0].tolist() == [0, 1, 4] and got.accept_len[0] == 2


@pytest.mark.spec("TA.2.4")
@pytest.mark.parametrize("shape", ["root-only", "no-match", "full-depth"])
def test_edge_cases(impl, shape):
    if shape == "root-only":
        par, L = np.array([[-1, -1, -1]], np.int32), 0
        n = 1
    else:
        par, L, n = np.array([[-1, 0, 1, 2]], np.int32), 3, 4
    tok = np.array([[0, 10, 11, 12, 0][: par.shape[1]]], np.int32)
    fc, ns = hh.links_of(par[0, :n], par.shape[1])
    tgt = np.array([[10, 11, 12, 99][: par.shape[1]]], np.int32)
    if shape == "no-match":
        tgt[0, 0] = 77
    got = walk(impl, hh.AcceptCase((par, np.array([n], np.int32), tok, fc[None], ns[None], tgt, L)))
    k = {"root-only": 0, "no-match": 0, "full-depth": 3}[shape]
    assert int(got.accept_len[0]) == k
    assert int(got.bonus[0]) == {"root-only": 10, "no-match": 77, "full-depth": 99}[shape]
    assert got.emitted[0, k] == got.bonus[0] and (got.emitted[0, k + 1 :] == -1).all()


# --- TA.3 Commit -------------------------------------------------------------------------------------------
@pytest.mark.spec("TA.3.1", "TA.3.2", "TA.3.3")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@given(case=hh.accept_cases(vocab=3), page_size=st.sampled_from([1, 16, 64]), seed=st.integers(0, 2**32 - 1))
def test_commit_equals_sequential_copy(impl, dtype, case, page_size, seed):
    _par, _n, tok, _fc, _ns, _tgt, _L = case
    kv, bt, prefix = commit_inputs(case, dtype, page_size, seed)
    before = kv.copy()
    got = walk(impl, case, kv_cache=kv, block_table=bt, prefix_lens=prefix)
    want = before.copy()
    ps = kv.shape[1]
    for b in range(tok.shape[0]):
        P = int(prefix[b])
        for j in range(1, int(got.accept_len[b]) + 1):  # sequential, increasing j, straight from the spec
            s, d = P + int(got.accept_path[b, j]), P + j
            want[bt[b, d // ps], d % ps] = want[bt[b, s // ps], s % ps]
    assert_bit_exact(kv, want, what="kv_cache", spec_id="TA.3.1")
    assert_bit_exact(got.new_lens, (prefix + 1 + got.accept_len).astype(np.int32), what="new_lens", spec_id="TA.3.3")


@pytest.mark.spec("TA.3.1")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
def test_commit_overlapping_rows(impl, dtype):
    """path [0, 2, 3]: row 1 <- row 2, row 2 <- row 3: a decreasing-order copy would read row 2 too late."""
    par = np.array([[-1, 0, 0, 2]], np.int32)
    tok = np.array([[0, 5, 6, 7]], np.int32)
    fc, ns = hh.links_of(par[0], 4)
    tgt = np.array([[6, 0, 7, 1]], np.int32)
    kv = np.arange(2 * 4 * 576, dtype=np.float32).reshape(2, 4, 576).astype(dtype)
    bt = np.array([[1, 0]], np.int32)
    before = kv.copy()
    got = walk(
        impl,
        hh.AcceptCase((par, np.array([4], np.int32), tok, fc[None], ns[None], tgt, 2)),
        kv_cache=kv,
        block_table=bt,
        prefix_lens=np.array([2], np.int32),
    )
    assert got.accept_path[0].tolist() == [0, 2, 3]
    rows = lambda a, p: a[bt[0, p // 4], p % 4]
    assert_bit_exact(rows(kv, 3), rows(before, 4), what="row 3", spec_id="TA.3.1")
    assert_bit_exact(rows(kv, 4), rows(before, 5), what="row 4", spec_id="TA.3.1")
    assert_bit_exact(rows(kv, 5), rows(before, 5), what="row 5", spec_id="TA.3.2")


# --- TA.4 Execution properties -----------------------------------------------------------------------------
@pytest.mark.spec("TA.4.1")
@settings(max_examples=10)
@given(case=hh.accept_cases(max_bs=8))
def test_deterministic_and_batch_invariant(impl, case):
    first = walk(impl, case)
    for _ in range(100 if impl.name != "reference" else 3):
        again = walk(impl, case)
        for f in ref.Accept.FIELDS:
            assert_bit_exact(getattr(again, f), getattr(first, f), what=f, spec_id="TA.4.1")
    par, n, tok, fc, ns, tgt, L = case
    for b in range(tok.shape[0]):
        one = walk(
            impl,
            hh.AcceptCase(
                (par[b : b + 1], n[b : b + 1], tok[b : b + 1], fc[b : b + 1], ns[b : b + 1], tgt[b : b + 1], L)
            ),
        )
        for f in ref.Accept.FIELDS:
            assert_bit_exact(getattr(one, f)[:1], getattr(first, f)[b : b + 1], what=f, spec_id="TA.4.1")

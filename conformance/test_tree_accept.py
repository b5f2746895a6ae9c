"""tree_accept conformance (spec/tree_accept.md) for every implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract import Accept, InputError
from harness import strategies as hh
from harness import tree_results
from harness.cases import run
from harness.compare import assert_bit_exact
from harness.verdict import expect
from reference import oracles

DTYPES = [np.float32, ml_dtypes.bfloat16]


def commit_inputs(case, dtype, page_size, seed):
    """A paged cache holding each request's prefix + tree rows, with poisoned unused rows."""
    bs, D = case.tokens.shape
    rng = np.random.default_rng(seed)
    prefix = rng.choice([0, 1, 63, 64, 65], bs).astype(np.int32)
    _, kv, bt = hh.build_paged_cache(rng, dtype, prefix, D, page_size, 1)
    return {"kv_cache": kv, "block_table": bt, "prefix_lens": prefix}


def small_tree(**commit):
    # root -> 1 (tok 5) -> 3 (tok 7); root -> 2 (tok 6); node 4 is a pad
    par = np.array([[-1, 0, 0, 1, -1]], np.int32)
    tok = np.array([[9, 5, 6, 7, 9]], np.int32)
    fc, ns = hh.links_of(par[0, :4], 5)
    tgt = np.array([[5, 7, 0, 1, 0]], np.int32)
    return hh.accept_case(par, np.array([4], np.int32), tok, fc[None], ns[None], tgt, 2, **commit)


def _with(**changes):
    return small_tree().with_args(**changes)


def _fc(fn):
    fc = small_tree().first_child.copy()
    fn(fc)
    return fc


def _cache(shape=(2, 4, 576), dtype=np.float32, table=((0, 1),), prefix=(0,)):
    return {
        "kv_cache": np.zeros(shape, dtype),
        "block_table": np.array(table, np.int32),
        "prefix_lens": np.array(prefix, np.int32),
    }


spec = pytest.mark.spec


def _bad(case, message, clause, name):
    return pytest.param(case, message, id=name, marks=clause)


# --- TA.1 Inputs ------------------------------------------------------------------------------------------
BAD = [
    _bad(_with(tokens=small_tree().tokens.astype(np.int64)), "tokens: dtype int64", spec("TA.1.1"), "tokens-int64"),
    _bad(
        _with(target_tokens=small_tree().target_tokens[:, :3]),
        r"target_tokens: shape \(1, 3\)",
        spec("TA.1.1"),
        "target-shape",
    ),
    _bad(
        _with(tokens=np.ma.masked_array(small_tree().tokens)),
        "tokens: expected a plain numpy.ndarray",
        spec("TA.1.1"),
        "tokens-masked-array",
    ),
    _bad(_with(max_depth=40), "max_depth: 40 is outside 0..32", spec("TA.1.1"), "max-depth"),
    _bad(
        _with(kv_cache=np.zeros((2, 4, 576), np.float32)),
        "kv_cache: needs kv_cache, block_table, prefix_lens together",
        spec("TA.1.1"),
        "commit-partial",
    ),
    _bad(
        small_tree(**_cache(shape=(2, 4, 512))),
        r"kv_cache: shape \(2, 4, 512\), expected \(2, 4, 576\)",
        spec("TA.1.1"),
        "kv-dim",
    ),
    _bad(small_tree(**_cache(dtype=np.float16)), "kv_cache: dtype float16", spec("TA.1.1"), "kv-fp16"),
    _bad(
        small_tree(**_cache(shape=(2, 0, 576))),
        "kv_cache: page size page_size=0 is outside 1..1024",
        spec("TA.1.1"),
        "page-size-zero",
    ),
    _bad(small_tree(**_cache(shape=(0, 4, 576))), "kv_cache: pages num_pages=0 is outside", spec("TA.1.1"), "no-pages"),
    _bad(
        small_tree(**_cache(shape=(2, 1025, 576))),
        "kv_cache: page size page_size=1025 is outside 1..1024",
        spec("TA.1.1"),
        "page-size-too-large",
    ),
    _bad(
        _with(tokens=np.array([[9, 5, -1, 7, 9]], np.int32)),
        r"tokens: negative token id at \(0, 2\)",
        spec("TA.1.1"),
        "token-negative",
    ),
    _bad(
        _with(target_tokens=np.array([[5, 7, 0, 1, -1]], np.int32)),
        r"target_tokens: negative token id at \(0, 4\)",
        spec("TA.1.1"),
        "target-negative",
    ),
    _bad(
        _with(first_child=_fc(lambda a: a.__setitem__((0, 1), 0))),
        r"first_child: \[0, 1\] = 0 must be -1 or an index in 2..4",
        spec("TA.1.2"),
        "cycle",
    ),
    _bad(
        _with(first_child=_fc(lambda a: a.__setitem__((0, 2), 3))),
        "node 3 has more than one incoming link",
        spec("TA.1.2"),
        "two-parents",
    ),
    _bad(
        _with(first_child=_fc(lambda a: a.__setitem__((0, 3), 9))),
        r"first_child: \[0, 3\] = 9",
        spec("TA.1.2"),
        "out-of-range",
    ),
    _bad(_with(max_depth=1), "node 3 is at depth 2 > max_depth 1", spec("TA.1.2"), "too-deep"),
    _bad(
        _with(next_sibling=np.array([[2, -1, -1, -1, -1]], np.int32)),
        "next_sibling: root of request 0 has a sibling",
        spec("TA.1.2"),
        "root-sibling",
    ),
    _bad(
        small_tree(**_cache(table=((0, 5),))),
        r"block_table: \[0, 1\] = 5 is not a page index",
        spec("TA.1.3"),
        "bad-page",
    ),
    _bad(small_tree(**_cache(table=((0,),))), "block_table: request 0 needs 2 pages", spec("TA.1.3"), "short-table"),
    _bad(small_tree(**_cache(prefix=(-1,))), "prefix_lens: negative length", spec("TA.1.3"), "prefix-negative"),
    _bad(
        small_tree(**_cache(shape=(1, 4, 576), table=((0, 0),))),
        "block_table: request 0 position 0 and request 0 position 4 map to the same cache row 0",
        spec("TA.1.3"),
        "alias-within-request",
    ),
    _bad(
        small_tree(**_cache(prefix=(2**31 - 1,))),
        "prefix_lens: request 0: prefix 2147483647 .* exceeds the context",
        spec("TA.1.3"),
        "prefix-int32-max",
    ),
]


def _two_requests_sharing_a_page():
    """Two requests whose tree rows land on the same physical page: on a GPU their commits would race."""
    par = np.array([[-1, 0, 1], [-1, 0, 1]], np.int32)
    tok = np.array([[0, 1, 2], [0, 1, 2]], np.int32)
    fc, ns = hh.links_of(par[0], 3)
    links = (np.stack([fc, fc]), np.stack([ns, ns]))
    commit = _cache(shape=(3, 4, 576), table=((0, 1), (2, 1)), prefix=(2, 2))
    return hh.accept_case(par, np.array([3, 3], np.int32), tok, *links, tok, 2, **commit)


BAD.append(
    _bad(
        _two_requests_sharing_a_page(),
        "block_table: request 0 position 4 and request 1 position 4 map to the same cache row 4",
        spec("TA.1.3"),
        "alias-across-requests",
    )
)


@pytest.mark.parametrize("case,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, case, message):
    case = case.copy()
    kv = case.args.get("kv_cache")
    before = None if kv is None else np.array(kv)
    with pytest.raises(InputError, match=message):
        run(impl, case)
    if kv is not None:  # nothing was written (the refusal's own clause: the case's mark)
        assert_bit_exact(kv, before, what="kv_cache (refused: nothing may be written)")


@pytest.mark.spec("TA.1.4")
def test_usable_after_bad_input(impl):
    """A rejected call leaves the implementation (and the device) usable: the next valid call answers as it did
    before any bad input (whether that answer is right is the other clauses' business)."""
    good = small_tree()
    first = run(impl, good)
    for bad in BAD:
        with pytest.raises(InputError):
            run(impl, bad.values[0].copy())
        got = run(impl, good)
        for f in Accept.FIELDS:
            assert_bit_exact(getattr(got, f), getattr(first, f), what=f, spec_id="TA.1.4", context={"after": bad.id})


# --- TA.2 Walk ---------------------------------------------------------------------------------------------
@pytest.mark.spec("TA.2.1", "TA.2.2", "TA.2.3")
@given(case=hh.accept_cases())
def test_walk_equals_parent_walk_oracle(impl, case):
    par, n, tok, tgt, L = case.parents, case.n_nodes, case.tokens, case.target_tokens, case.max_depth
    got = run(impl, case)
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
        tree_results.check_walk(got, b, path, par[b], tok[b], tgt[b])
        expect(int(got.accept_len[b]) == k, "TA.2.1", f"request {b}: accept_len {int(got.accept_len[b])}, oracle {k}")
        assert_bit_exact(got.accept_path[b], want_path, what="accept_path", spec_id="TA.2.3", context=ctx)
        assert_bit_exact(got.emitted[b], want_emit, what="emitted", spec_id="TA.2.3", context=ctx)
        expect(int(got.bonus[b]) == bonus, "TA.2.3", f"request {b}: bonus {int(got.bonus[b])}, oracle {bonus}")


@pytest.mark.spec("TA.2.2", "TA.2.1")
def test_first_matching_sibling_wins(impl):
    """Three children of the root carry the target token: the walk takes the first in list order (TA.2.2),
    then goes on from it (the rest of the walk is TA.2.1's)."""
    par = np.array([[-1, 0, 0, 0, 1, 2]], np.int32)
    tok = np.array([[0, 4, 4, 4, 8, 8]], np.int32)
    fc, ns = hh.links_of(par[0], 6)
    tgt = np.array([[4, 8, 8, 0, 0, 0]], np.int32)
    got = run(impl, hh.accept_case(par, np.array([6], np.int32), tok, fc[None], ns[None], tgt, 2))
    expect(int(got.accept_path[0, 1]) == 1, "TA.2.2", f"the walk's first step went to {int(got.accept_path[0, 1])}")
    tree_results.check_walk(got, 0, [0, 1, 4], par[0], tok[0], tgt[0])
    expect(int(got.accept_len[0]) == 2, "TA.2.1", f"accept_len {int(got.accept_len[0])}, expected 2")


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
    got = run(impl, hh.accept_case(par, np.array([n], np.int32), tok, fc[None], ns[None], tgt, L))
    k = {"root-only": 0, "no-match": 0, "full-depth": 3}[shape]
    bonus = {"root-only": 10, "no-match": 77, "full-depth": 99}[shape]
    expect(int(got.accept_len[0]) == k, "TA.2.4", f"{shape}: accept_len {int(got.accept_len[0])}, expected {k}")
    expect(int(got.bonus[0]) == bonus, "TA.2.4", f"{shape}: bonus {int(got.bonus[0])}, expected {bonus}")
    emitted = got.emitted[0].tolist()
    expect(emitted[k] == bonus and all(x == -1 for x in emitted[k + 1 :]), "TA.2.4", f"{shape}: emitted {emitted}")


# --- TA.3 Commit -------------------------------------------------------------------------------------------
@pytest.mark.spec("TA.3.1", "TA.3.2", "TA.3.3")
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "bf16"])
@given(case=hh.accept_cases(vocab=3), page_size=st.sampled_from([1, 16, 64]), seed=st.integers(0, 2**32 - 1))
def test_commit_equals_sequential_copy(impl, dtype, case, page_size, seed):
    tok = case.tokens
    commit = commit_inputs(case, dtype, page_size, seed)
    kv, bt, prefix = commit["kv_cache"], commit["block_table"], commit["prefix_lens"]
    before = kv.copy()
    got = run(impl, case.with_args(**commit))
    assert tok.shape[0] == bt.shape[0]
    tree_results.check_commit(kv, before, bt, prefix, got.accept_path, got.accept_len)
    assert_bit_exact(got.new_lens, (prefix + 1 + got.accept_len).astype(np.int32), what="new_lens", spec_id="TA.3.3")


@pytest.mark.spec("TA.3.1", "TA.3.2")
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
    case = hh.accept_case(par, np.array([4], np.int32), tok, fc[None], ns[None], tgt, 2)
    got = run(impl, case.with_args(kv_cache=kv, block_table=bt, prefix_lens=np.array([2], np.int32)))
    # the commit of its own walk (path [0, 2, 3] when the walk is right: TA.2's tests check that)
    tree_results.check_commit(kv, before, bt, np.array([2], np.int32), got.accept_path, got.accept_len)


# --- TA.4 Execution properties -----------------------------------------------------------------------------
@pytest.mark.spec("TA.4.1")
@settings(max_examples=10)
@given(case=hh.accept_cases(max_bs=8))
def test_deterministic_and_batch_invariant(impl, case):
    first = run(impl, case)
    for _ in range(impl.reruns):
        again = run(impl, case)
        for f in Accept.FIELDS:
            assert_bit_exact(getattr(again, f), getattr(first, f), what=f, spec_id="TA.4.1")
    for b in range(case.tokens.shape[0]):
        one = run(
            impl,
            case.with_args(
                **{k: case.args[k][b : b + 1] for k in ("tokens", "first_child", "next_sibling", "target_tokens")}
            ),
        )
        for f in Accept.FIELDS:
            assert_bit_exact(getattr(one, f)[:1], getattr(first, f)[b : b + 1], what=f, spec_id="TA.4.1")

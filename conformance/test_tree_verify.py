"""tree_verify conformance (spec/tree_verify.md) for every implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import impls
from harness import spec as clauses
from harness import strategies as hh
from harness.compare import assert_bit_exact, assert_close
from reference import oracles
from reference import tree_verify as ref
from reference.validate import InputError

BF16 = ml_dtypes.bfloat16
HEAVY = settings(max_examples=max(10, settings().max_examples // 5))  # each example is many small matmuls


def run(impl, case, split_chunk=None):
    """Call the implementation. `split_chunk` forces the CUDA kernel's split-KV chunk (keys per split); the
    reference has no splits and ignores it."""
    try:
        fn = impl.op("tree_verify")
    except impls.Unavailable as e:
        pytest.skip(str(e))
    q, kv, bt, pre, vis, scale, *_ = case
    if split_chunk is None or impl.name == "reference":
        return fn(q, kv, bt, pre, vis, scale)
    return fn(q, kv, bt, pre, vis, scale, split_chunk=split_chunk)


def tol(clause_id):
    return clauses.clause(clause_id).tolerance()


def valid_case(Q=3, H=2, prefix=(5,)):
    rng = np.random.default_rng(3)
    par = np.array([-1, 0, 0][:Q], np.int32)
    pre = np.array(prefix, np.int32)
    from reference.tree_build import layouts

    vis = layouts(
        np.tile(par, (len(pre), 1)), np.tile(hh.depths_of(par), (len(pre), 1)), np.full(len(pre), Q, np.int32), pre
    )[0]
    q, kv, bt = hh.build_paged_cache(rng, np.float32, pre, Q, 4, H)
    return [q, kv, bt, pre, vis, 0.130861, np.tile(par, (len(pre), 1)), np.full(len(pre), Q, np.int32)]


def _with(i, fn):
    c = valid_case()
    c[i] = fn(c[i])
    return c


def _vis(fn):
    def f(v):
        v = v.copy()
        fn(v)
        return v

    return f


# --- TV.1 Inputs -------------------------------------------------------------------------------------------
BAD = [
    pytest.param(
        _with(0, lambda q: q.astype(np.float16)), "q: dtype float16", id="q-fp16", marks=pytest.mark.spec("TV.1.1")
    ),
    pytest.param(_with(0, lambda q: q[..., :512]), "q: last dim 512", id="q-dim", marks=pytest.mark.spec("TV.1.1")),
    pytest.param(
        _with(1, lambda k: k.astype(BF16)),
        "kv_cache: dtype bfloat16, expected float32",
        id="kv-dtype-mismatch",
        marks=pytest.mark.spec("TV.1.1"),
    ),
    pytest.param(
        _with(4, lambda v: v[:, :2]), r"visibility: shape \(1, 2, 1\)", id="vis-shape", marks=pytest.mark.spec("TV.1.1")
    ),
    pytest.param(
        _with(5, lambda s: float("nan")),
        "softmax_scale: nan must be a finite float > 0",
        id="scale-nan",
        marks=pytest.mark.spec("TV.1.1"),
    ),
    pytest.param(_with(5, lambda s: 0.0), "softmax_scale: 0.0", id="scale-zero", marks=pytest.mark.spec("TV.1.1")),
    pytest.param(
        _with(2, lambda t: np.where(t == t[0, 0], 999, t).astype(np.int32)),
        r"block_table: \[0, 0\] = 999 is not a page index",
        id="page-range",
        marks=pytest.mark.spec("TV.1.2"),
    ),
    pytest.param(
        _with(3, lambda p: np.array([40], np.int32)),
        "block_table: request 0 needs 11 pages",
        id="table-short",
        marks=pytest.mark.spec("TV.1.2"),
    ),
    pytest.param(
        _with(3, lambda p: np.array([-3], np.int32)),
        "prefix_lens: negative length",
        id="prefix-negative",
        marks=pytest.mark.spec("TV.1.2"),
    ),
    pytest.param(
        _with(4, _vis(lambda v: v.__setitem__((0, 1, 0), 2))),
        "row 1 does not see the root",
        id="no-root",
        marks=pytest.mark.spec("TV.1.3"),
    ),
    pytest.param(
        _with(4, _vis(lambda v: v.__setitem__((0, 1, 0), 1))),
        "row 1 does not see itself",
        id="no-self",
        marks=pytest.mark.spec("TV.1.3"),
    ),
    pytest.param(
        _with(4, _vis(lambda v: v.__setitem__((0, 1, 0), 0b111))),
        "row 1 sees a later row 2",
        id="sees-later",
        marks=pytest.mark.spec("TV.1.3"),
    ),
    pytest.param(
        _with(4, _vis(lambda v: v.__setitem__((0, 0, 0), 0b1001))),
        "bits beyond Q=3 are set",
        id="beyond-Q",
        marks=pytest.mark.spec("TV.1.3"),
    ),
    pytest.param(
        _with(4, _vis(lambda v: v.__setitem__((0, 2, 0), 0b110))),
        "row 2 does not see the root",
        id="not-closure",
        marks=pytest.mark.spec("TV.1.3"),
    ),
]


@pytest.mark.parametrize("case,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, case, message):
    with pytest.raises(InputError, match=message):
        run(impl, case)


@pytest.mark.spec("TV.1.3")
def test_non_closure_mask_rejected(impl):
    """Row 3 with parent 2 must contain all of row 2 (0, 1, 2); 0b1101 drops node 1."""
    par = np.array([-1, 0, 1, 2], np.int32)
    c = valid_case(Q=3)
    from reference.tree_build import layouts

    vis = layouts(par[None], hh.depths_of(par)[None], np.array([4], np.int32), np.array([5], np.int32))[0]
    vis[0, 3, 0] = 0b1101  # sees 0, 2, 3 but not 1, an ancestor of its parent 2
    rng = np.random.default_rng(0)
    q, kv, bt = hh.build_paged_cache(rng, np.float32, np.array([5], np.int32), 4, 4, 2)
    with pytest.raises(InputError, match="row 3 is not its parent's row plus itself"):
        run(impl, [q, kv, bt, np.array([5], np.int32), vis, c[5]])


# --- TV.2 Numerics ------------------------------------------------------------------------------------------
@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
@HEAVY
@given(data=st.data())
def test_matches_float64_oracle(impl, dtype, data):
    case = data.draw(hh.paged_cases(dtype=dtype), label="case")
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case)
    o64, l64 = ref.tree_verify(q, kv, bt, pre, vis, scale, precision="float64")
    cid = "TV.2.1" if dtype == np.float32 else "TV.2.2"
    assert out.dtype == q.dtype and out.shape == q.shape[:3] + (512,)
    assert lse.dtype == np.float32 and lse.shape == q.shape[:3]
    assert_close(out.astype(np.float64), o64, what="out", spec_id=cid, **tol(cid))
    assert_close(lse.astype(np.float64), l64, what="lse", spec_id=cid, **tol(cid))


@pytest.mark.spec("TV.2.3", "TV.2.5")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 8, 64)))
def test_branch_decomposition_and_natural_log_lse(impl, case):
    """Node i == chain attention over prefix + its root path (keys gathered by walking parents)."""
    q, kv, bt, pre, _vis, scale, parents, n_nodes = case
    out, lse = run(impl, case)
    for b in range(q.shape[0]):
        P = int(pre[b])
        for i in range(q.shape[1]):
            path, j = [], i
            while j != -1:
                path.append(j)
                j = int(parents[b, j]) if i < n_nodes[b] else (0 if j != 0 else -1)
            keys = ref.cache_rows(kv, bt, b, np.concatenate([np.arange(P), P + np.array(sorted(path))]))
            o, l = oracles.chain_attention(q[b, i], keys, scale)
            assert_close(out[b, i].astype(np.float64), o, what=f"out[{b},{i}]", spec_id="TV.2.5", **tol("TV.2.5"))
            assert_close(lse[b, i].astype(np.float64), l, what=f"lse[{b},{i}]", spec_id="TV.2.3", **tol("TV.2.3"))


@pytest.mark.spec("TV.2.4")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 2, 4), max_bs=2), seed=st.integers(0, 2**32 - 1))
def test_absorb_equals_non_absorbed_mla(impl, case, seed):
    q, kv, bt, pre, vis, scale, _parents, _n_nodes = case
    bs, Q, H, _ = q.shape
    rng = np.random.default_rng(seed)
    w_uk = rng.standard_normal((H, 128, 512)) / np.sqrt(512)
    w_uv = rng.standard_normal((H, 512, 128)) / np.sqrt(512)
    q_nope = rng.standard_normal((bs, Q, H, 128))
    q_abs = np.concatenate([np.einsum("bqhd,hdl->bqhl", q_nope, w_uk), q[..., 512:].astype(np.float64)], -1)
    q_abs = q_abs.astype(np.float32)
    out, _ = run(impl, [q_abs, kv, bt, pre, vis, scale])
    bits = ref.unpack_visibility(vis, Q)
    for b in range(bs):
        P = int(pre[b])
        rows = ref.cache_rows(kv, bt, b, np.arange(P + Q)).astype(np.float64)
        for i in range(Q):
            visible = np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])])
            # q_nope is taken back from the fp32-rounded absorbed q so both sides see the same inputs
            want = oracles.non_absorbed_attention(
                q_nope[b, i], q[b, i, :, 512:], rows[:, :512], rows[:, 512:], w_uk, w_uv, scale, visible
            )
            got = np.einsum("hl,hld->hd", out[b, i].astype(np.float64), w_uv)
            ref_abs = np.einsum("hl,hld->hd", oracles.chain_attention(q_abs[b, i], rows[visible], scale)[0], w_uv)
            assert_close(ref_abs, want, what=f"oracle consistency [{b},{i}]", spec_id="TV.2.4", rtol=1e-6, atol=1e-6)
            assert_close(got, want, what=f"out·W_UV[{b},{i}]", spec_id="TV.2.4", **tol("TV.2.4"))


@pytest.mark.spec("TV.2.6")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 8), prefixes=(1, 63, 300)), c=st.sampled_from([0.5, 2.0, 4.0]))
def test_scale_applies_once_to_logits(impl, case, c):
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case)
    q2 = (q.astype(np.float64) * c).astype(np.float32)
    out2, lse2 = run(impl, [q2, kv, bt, pre, vis, scale / c])
    assert_close(
        out2.astype(np.float64), out.astype(np.float64), what="out (q*c, scale/c)", spec_id="TV.2.6", **tol("TV.2.6")
    )
    assert_close(
        lse2.astype(np.float64), lse.astype(np.float64), what="lse (q*c, scale/c)", spec_id="TV.2.6", **tol("TV.2.6")
    )
    out3, _ = run(impl, [q, kv, bt, pre, vis, scale * c])
    assert np.abs(out3.astype(np.float64) - out).max() > 1e-4, "[TV.2.6] output ignores softmax_scale"


# --- TV.3 Exact properties ------------------------------------------------------------------------------------
def hide_from(kv, bt, pre, vis, b, i, *, huge):
    """TV.3.1's poisoning for query i of request b: every cache row that no query of request b sees (other
    requests' rows, rows past its length, unreferenced pages) becomes NaN; its tree rows that query i does
    not see (but a sibling may) become `huge` (finite, alternating sign)."""
    Q = vis.shape[1]
    bits = ref.unpack_visibility(vis, Q)
    ps = kv.shape[1]
    mine = np.zeros(kv.shape[:2], bool)
    for p in range(int(pre[b]) + Q):
        mine[bt[b, p // ps], p % ps] = True
    kv2 = kv.copy()
    hh.poison(kv2, ~mine)
    for j in np.flatnonzero(~bits[b, i]):
        p = int(pre[b]) + j
        kv2[bt[b, p // ps], p % ps] = (np.where(np.arange(576) % 2, -huge, huge)).astype(kv.dtype)
    return kv2


@pytest.mark.spec("TV.3.1")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # siblings that see the huge rows overflow (not checked)
@HEAVY
@given(case=hh.paged_cases(), data=st.data())
def test_invisible_rows_do_not_change_a_bit(impl, case, data):
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case)
    bs, Q = q.shape[:2]
    b = data.draw(st.integers(0, bs - 1), label="request")
    i = data.draw(st.integers(0, Q - 1), label="query")
    huge = data.draw(st.sampled_from([1e30, 3.0e38]), label="huge")
    kv2 = hide_from(kv, bt, pre, vis, b, i, huge=huge)
    out2, lse2 = run(impl, [q, kv2, bt, pre, vis, scale])
    assert_bit_exact(out2[b, i], out[b, i], what=f"out[{b},{i}]", spec_id="TV.3.1")
    assert_bit_exact(lse2[b, i : i + 1], lse[b, i : i + 1], what=f"lse[{b},{i}]", spec_id="TV.3.1")


@pytest.mark.spec("TV.3.2", "TV.3.3")
@HEAVY
@given(case=hh.paged_cases(max_bs=3, heads=(1, 8, 64)), data=st.data())
def test_deterministic_and_batch_invariant(impl, case, data):
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case)
    again = run(impl, case)
    assert_bit_exact(again[0], out, what="out", spec_id="TV.3.2")
    assert_bit_exact(again[1], lse, what="lse", spec_id="TV.3.2")
    b = data.draw(st.integers(0, q.shape[0] - 1), label="request")
    one = run(impl, [q[b : b + 1], kv, bt[b : b + 1], pre[b : b + 1], vis[b : b + 1], scale])
    assert_bit_exact(one[0], out[b : b + 1], what="out", spec_id="TV.3.3")
    assert_bit_exact(one[1], lse[b : b + 1], what="lse", spec_id="TV.3.3")


# --- Targeted shapes: splits, heads, wide trees, pages, masks (the CUDA kernel's corners) ---------------------
DTYPES = [pytest.param(np.float32, id="fp32"), pytest.param(BF16, id="bf16")]


def _cid(dtype):
    return "TV.2.1" if np.dtype(dtype) == np.float32 else "TV.2.2"


def _random_tree(rng, n, shape="random"):
    """A parent array of n nodes: 'random' (parents anywhere earlier), 'bushy' (parents among the first few
    nodes), 'chain'."""
    if shape == "chain":
        return np.arange(-1, n - 1, dtype=np.int32)
    if shape == "bushy":
        par = rng.integers(0, np.maximum(1, np.minimum(np.arange(n), 4)))
    else:
        par = (rng.random(n) * np.arange(n)).astype(np.int64)
    par[0] = -1
    return par.astype(np.int32)


def _case(dtype, trees, prefix, page_size, H, *, seed=0, q_scale=1.0, scale=0.130861):
    rng = np.random.default_rng(seed)
    pars = [t if isinstance(t, np.ndarray) else _random_tree(rng, *t) for t in trees]
    return hh.paged_case(rng, dtype, pars, prefix, page_size, H, q_scale=q_scale, scale=scale)


def _chunks(impl, *chunks):
    """Split chunks to run: the reference has no splits, so it runs once."""
    return (None,) if impl.name == "reference" else chunks


_ORACLE: dict[int, tuple] = {}


def _oracle(case):
    """float64 oracle of a case, computed once per case object (tests check several chunk sizes)."""
    if id(case) not in _ORACLE or _ORACLE[id(case)][0] is not case:
        q, kv, bt, pre, vis, scale, *_ = case
        _ORACLE.clear()
        _ORACLE[id(case)] = (case, *ref.tree_verify(q, kv, bt, pre, vis, scale, precision="float64"))
    return _ORACLE[id(case)][1:]


def _check_oracle(out, lse, case, cid, what=""):
    q = case[0]
    o64, l64 = _oracle(case)
    assert out.dtype == q.dtype and out.shape == q.shape[:3] + (512,)
    assert lse.dtype == np.float32 and lse.shape == q.shape[:3]
    assert_close(out.astype(np.float64), o64, what=f"out{what}", spec_id=cid, **tol(cid))
    assert_close(lse.astype(np.float64), l64, what=f"lse{what}", spec_id=cid, **tol(cid))


CHUNKS = [1, 7, 32, 64, 100, None]  # keys per split; None = the kernel's own rule (no split at these sizes)


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.3.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_forced_splits_match_oracle_and_repeat_bit_for_bit(impl, dtype):
    """Split-KV at small shapes: every chunk size is within tolerance of the float64 oracle (so of each
    other), including 1-key splits that some queries see nothing of, and each repeats bit for bit."""
    case = _case(dtype, [(23, "random"), (40, "bushy"), (9, "chain")], [300, 77, 0], 16, 3, seed=1)
    for chunk in _chunks(impl, *CHUNKS):
        out, lse = run(impl, case, split_chunk=chunk)
        _check_oracle(out, lse, case, _cid(dtype), what=f" (split_chunk={chunk})")
        again = run(impl, case, split_chunk=chunk)
        assert_bit_exact(again[0], out, what=f"out (split_chunk={chunk})", spec_id="TV.3.2")
        assert_bit_exact(again[1], lse, what=f"lse (split_chunk={chunk})", spec_id="TV.3.2")


def _request(case, idx):
    q, kv, bt, pre, vis, scale, par, n = case
    idx = list(idx)
    return [q[idx], kv, bt[idx], pre[idx], vis[idx], scale, par[idx], n[idx]]


@pytest.mark.spec("TV.3.3")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [7, 64, None])
def test_split_requests_are_batch_invariant(impl, dtype, chunk):
    """With the same split chunk, a request's bits do not depend on the batch around it: alone, first,
    last, or beside requests of other lengths (so other split counts)."""
    case = _case(dtype, [(30, "random"), (12, "bushy"), (30, "chain")], [700, 5, 129], 16, 8, seed=2)
    full = run(impl, case, split_chunk=chunk)
    for order in ([0], [1], [2], [2, 0, 1], [1, 2]):
        got = run(impl, _request(case, order), split_chunk=chunk)
        for k, b in enumerate(order):
            assert_bit_exact(got[0][k], full[0][b], what=f"out[{b}] in batch {order}", spec_id="TV.3.3")
            assert_bit_exact(got[1][k], full[1][b], what=f"lse[{b}] in batch {order}", spec_id="TV.3.3")


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [1, 3, 8, 16, 64, 128])
def test_head_counts(impl, dtype, H):
    """H need not be a multiple of 16: the (query, head) rows tile across CTAs in any grouping."""
    case = _case(dtype, [(7, "random"), (5, "bushy")], [70, 33], 16, H, seed=3)
    out, lse = run(impl, case)
    _check_oracle(out, lse, case, _cid(dtype))


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "Q,shape,prefix",
    [(33, "random", [40]), (65, "bushy", [0]), (200, "random", [64]), (1025, "random", [37]), (1025, "chain", [0])],
    ids=["Q33", "Q65-prefix0", "Q200", "Q1025", "Q1025-chain"],
)
def test_wide_trees_span_several_visibility_words(impl, dtype, Q, shape, prefix):
    """Trees of up to 1 + the largest budget (1025 nodes, 33 visibility words per row), forced splits too."""
    case = _case(dtype, [(Q, shape)], prefix, 64, 2, seed=4)
    for chunk in _chunks(impl, None, 96):
        out, lse = run(impl, case, split_chunk=chunk)
        _check_oracle(out, lse, case, _cid(dtype), what=f" (split_chunk={chunk})")


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 7, 16, 64, 100])
def test_page_sizes(impl, dtype, page_size):
    """Any page size (not only powers of two); prefixes 0, inside a page and across page boundaries."""
    case = _case(dtype, [(9, "random"), (6, "chain"), (9, "bushy")], [0, 99, 250], page_size, 4, seed=5)
    for chunk in _chunks(impl, None, 50):
        out, lse = run(impl, case, split_chunk=chunk)
        _check_oracle(out, lse, case, _cid(dtype), what=f" (page_size={page_size}, split_chunk={chunk})")


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_prefix(impl, dtype):
    """prefix_len = 0 everywhere: the root is the first key; 3-key splits leave most queries blind in most
    splits (partial lse = -inf must weigh nothing)."""
    case = _case(dtype, [(17, "random"), (17, "chain")], [0, 0], 16, 5, seed=6)
    for chunk in _chunks(impl, None, 3):
        out, lse = run(impl, case, split_chunk=chunk)
        _check_oracle(out, lse, case, _cid(dtype), what=f" (split_chunk={chunk})")


@pytest.mark.spec("TV.3.1")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # siblings that see the huge rows overflow (not checked)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [None, 16])
def test_mask_isolation_nan_and_huge_rows(impl, dtype, chunk):
    """TV.3.1 at every query of a bushy tree: NaN in every row the request does not see, the largest finite
    values in its tree rows the query does not see; the query's out and lse keep every bit."""
    case = _case(dtype, [(12, "bushy"), (12, "random")], [45, 3], 16, 16, seed=7)
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case, split_chunk=chunk)
    huge = float(ml_dtypes.finfo(BF16).max) if np.dtype(dtype) == BF16 else float(np.finfo(np.float32).max)
    for b in range(q.shape[0]):
        for i in range(q.shape[1]):
            kv2 = hide_from(kv, bt, pre, vis, b, i, huge=huge)
            out2, lse2 = run(impl, [q, kv2, bt, pre, vis, scale], split_chunk=chunk)
            assert_bit_exact(out2[b, i], out[b, i], what=f"out[{b},{i}]", spec_id="TV.3.1")
            assert_bit_exact(lse2[b, i], lse[b, i], what=f"lse[{b},{i}]", spec_id="TV.3.1")


@pytest.mark.spec("TV.2.2")
@pytest.mark.parametrize("chunk", [None, 40])
def test_q_times_100_does_not_overflow(impl, chunk):
    """FlashInfer's overflow case (q x 100, logits in the hundreds) in bf16: the running max keeps exp finite.
    (fp32 at q x 100 is outside TV.2.1's stated input range: its rounding alone exceeds atol.)"""
    case = _case(BF16, [(20, "random"), (8, "chain")], [260, 31], 16, 8, seed=8, q_scale=100.0)
    out, lse = run(impl, case, split_chunk=chunk)
    assert np.isfinite(out.astype(np.float32)).all() and np.isfinite(lse).all()
    _check_oracle(out, lse, case, "TV.2.2")


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_chain_tree_is_causal_attention(impl, dtype):
    """A chain-shaped tree is causal attention: query i sees positions 0 .. prefix + i (mask built here from
    positions, not from the visibility bits)."""
    Q = 40
    case = _case(dtype, [(Q, "chain"), (Q, "chain")], [100, 0], 16, 4, seed=9)
    q, kv, bt, pre, *_ = case
    cid = _cid(dtype)
    for chunk in _chunks(impl, None, 33):
        out, lse = run(impl, case, split_chunk=chunk)
        for b in range(2):
            rows = ref.cache_rows(kv, bt, b, np.arange(int(pre[b]) + Q))
            for i in range(Q):
                o, l = oracles.chain_attention(q[b, i], rows[: int(pre[b]) + i + 1], case[5])
                assert_close(out[b, i].astype(np.float64), o, what=f"out[{b},{i}] causal", spec_id=cid, **tol(cid))
                assert_close(lse[b, i].astype(np.float64), l, what=f"lse[{b},{i}] causal", spec_id=cid, **tol(cid))

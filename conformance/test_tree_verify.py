"""tree_verify conformance (spec/tree_verify.md) for every implementation."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract import InputError, limits
from contract.paged import cache_rows
from contract.trees import unpack_visibility
from harness import profiles, tree_results
from harness import spec as clauses
from harness import strategies as hh
from harness.cases import run
from harness.compare import assert_bit_exact, assert_close, assert_cosine
from harness.verdict import clause, expect
from reference import oracles
from reference import tree_verify as ref

BF16 = ml_dtypes.bfloat16
HEAVY = settings(max_examples=profiles.heavy_examples())  # each example is many small matmuls


def tol(clause_id):
    return clauses.clause(clause_id).tolerance()


def out_tol(dtype):
    return tol("TV.2.1" if np.dtype(dtype) == np.float32 else "TV.2.2")


def tree_case(parents, prefix, H=2, page_size=4, dtype=np.float32, seed=3, q_scale=1.0, scale=0.130861):
    """A case over one tree shape shared by every request (parents [Q], parents before children)."""
    pars = [np.asarray(parents, np.int32)] * len(prefix)
    rng = np.random.default_rng(seed)
    return hh.paged_case(rng, dtype, pars, prefix, page_size, H, q_scale=q_scale, scale=scale)


def valid_case():
    return tree_case([-1, 0, 0], [5])


def oracle(case):
    return ref.tree_verify_float64(**case.args)


def _vis(fn):
    v = valid_case().visibility.copy()
    fn(v)
    return v


class _ForeignCudaArray:
    @property
    def __cuda_array_interface__(self):
        return {"shape": (1, 3, 2, 576), "typestr": "<f4", "data": (0, False), "version": 3}


spec = pytest.mark.spec


def _bad(changes, message, clause, name):
    return pytest.param(changes, message, id=name, marks=clause)


# --- TV.1 Inputs -------------------------------------------------------------------------------------------
BAD = [
    _bad({"q": valid_case().q.astype(np.float16)}, "q: dtype float16", spec("TV.1.1"), "q-fp16"),
    _bad(
        {"q": valid_case().q[..., :512]},
        r"q: shape \(1, 3, 2, 512\), expected \(1, 3, 2, 576\)",
        spec("TV.1.1"),
        "q-dim",
    ),
    _bad({"q": np.ma.masked_array(valid_case().q)}, "q: expected a plain numpy.ndarray", spec("TV.1.1"), "q-masked"),
    _bad({"q": _ForeignCudaArray()}, "q: .*CUDA array", spec("TV.1.1"), "q-foreign-cuda-array"),
    _bad(
        {"q": np.zeros((1, 3, 129, 576), np.float32)}, "q: heads H=129 is outside 1..128", spec("TV.1.1"), "heads-129"
    ),
    _bad({"q": np.zeros((1, 3, 0, 576), np.float32)}, "q: heads H=0 is outside 1..128", spec("TV.1.1"), "heads-0"),
    _bad(
        {"kv_cache": valid_case().kv_cache.astype(BF16)},
        "kv_cache: dtype bfloat16, expected float32",
        spec("TV.1.1"),
        "kv-dtype-mismatch",
    ),
    _bad(
        {"kv_cache": np.zeros((2, 0, 576), np.float32)},
        "kv_cache: page size page_size=0 is outside 1..1024",
        spec("TV.1.1"),
        "page-size-zero",
    ),
    _bad({"kv_cache": np.zeros((0, 4, 576), np.float32)}, "kv_cache: pages num_pages=0", spec("TV.1.1"), "no-pages"),
    _bad({"visibility": valid_case().visibility[:, :2]}, r"visibility: shape \(1, 2, 1\)", spec("TV.1.1"), "vis-shape"),
    _bad({"softmax_scale": float("nan")}, "softmax_scale: nan is not finite", spec("TV.1.1"), "scale-nan"),
    _bad({"softmax_scale": 0.0}, "softmax_scale: 0.0 must be > 0", spec("TV.1.1"), "scale-zero"),
    _bad({"softmax_scale": -0.1}, "softmax_scale: -0.1 must be > 0", spec("TV.1.1"), "scale-negative"),
    _bad({"softmax_scale": 1e39}, "softmax_scale: 1e\\+39 overflows float32", spec("TV.1.1"), "scale-overflows-fp32"),
    _bad(
        {"softmax_scale": 1e-50}, "softmax_scale: 1e-50 rounds to 0 in float32", spec("TV.1.1"), "scale-underflows-fp32"
    ),
    _bad({"softmax_scale": True}, "softmax_scale: expected a real number, got bool", spec("TV.1.1"), "scale-bool"),
    _bad({"softmax_scale": "0.1"}, "softmax_scale: expected a real number, got str", spec("TV.1.1"), "scale-str"),
    _bad(
        {
            "block_table": np.where(
                valid_case().block_table == valid_case().block_table[0, 0], 999, valid_case().block_table
            ).astype(np.int32)
        },
        r"block_table: \[0, 0\] = 999 is not a page index",
        spec("TV.1.2"),
        "page-range",
    ),
    _bad(
        {"prefix_lens": np.array([40], np.int32)},
        "block_table: request 0 needs 11 pages",
        spec("TV.1.2"),
        "table-short",
    ),
    _bad({"prefix_lens": np.array([-3], np.int32)}, "prefix_lens: negative length", spec("TV.1.2"), "prefix-negative"),
    _bad(
        {"prefix_lens": np.array([2**31 - 1], np.int32)},
        "prefix_lens: request 0: prefix 2147483647 \\+ 3 tree rows .* exceeds the context limit 262144",
        spec("TV.1.2"),
        "prefix-int32-max",
    ),
    _bad(
        {"visibility": _vis(lambda v: v.__setitem__((0, 1, 0), 2))},
        "row 1 does not see the root",
        spec("TV.1.3"),
        "no-root",
    ),
    _bad(
        {"visibility": _vis(lambda v: v.__setitem__((0, 1, 0), 1))},
        "row 1 does not see itself",
        spec("TV.1.3"),
        "no-self",
    ),
    _bad(
        {"visibility": _vis(lambda v: v.__setitem__((0, 1, 0), 0b111))},
        "row 1 sees a later row 2",
        spec("TV.1.3"),
        "sees-later",
    ),
    _bad(
        {"visibility": _vis(lambda v: v.__setitem__((0, 0, 0), 0b1001))},
        "bits beyond Q=3 are set",
        spec("TV.1.3"),
        "beyond-Q",
    ),
    _bad(
        {"visibility": _vis(lambda v: v.__setitem__((0, 2, 0), 0b110))},
        "row 2 does not see the root",
        spec("TV.1.3"),
        "not-closure",
    ),
]


@pytest.mark.parametrize("changes,message", BAD)
def test_bad_input_rejected_with_argument_named(impl, changes, message):
    with pytest.raises(InputError, match=message):
        run(impl, valid_case().with_args(**changes))


@pytest.mark.spec("TV.1.1")
def test_integer_scale_is_a_real_number(impl):
    """softmax_scale = 1 (an int) is a valid real number: the same result as 1.0."""
    case = valid_case()
    a = run(impl, case.with_args(softmax_scale=1))
    b = run(impl, case.with_args(softmax_scale=1.0))
    assert_bit_exact(a.out, b.out, what="out", spec_id="TV.1.1")


@pytest.mark.spec("TV.1.3")
def test_non_closure_mask_rejected(impl):
    """Row 3 with parent 2 must contain all of row 2 (0, 1, 2); 0b1101 drops node 1."""
    case = tree_case([-1, 0, 1, 2], [5])
    vis = case.visibility.copy()
    vis[0, 3, 0] = 0b1101  # sees 0, 2, 3 but not 1, an ancestor of its parent 2
    with pytest.raises(InputError, match="row 3 is not its parent's row plus itself"):
        run(impl, case.with_args(visibility=vis))


@pytest.mark.spec("TV.1.4")
def test_usable_after_bad_input(impl):
    """A rejected call leaves the implementation (and the device) usable, with the right answer next."""
    good = valid_case()
    want = run(impl, good)
    for bad in BAD:
        changes, _ = bad.values
        with pytest.raises(InputError):
            run(impl, good.with_args(**changes))
        again = run(impl, good)
        assert_bit_exact(again.out, want.out, what="out", spec_id="TV.1.4")


# --- TV.2 Numerics ------------------------------------------------------------------------------------------
def lse_clause(dtype):
    return "TV.2.3" if np.dtype(dtype) == np.float32 else "TV.2.9"


def check_against_oracle(case, got, out_clause, lse_clause):
    o64, l64 = oracle(case)
    q = case.q
    tree_results.check_verified_shapes(case.q, got, out_clause, lse_clause)
    assert_close(got.out.astype(np.float64), o64, what="out", spec_id=out_clause, **tol(out_clause))
    assert_close(got.lse.astype(np.float64), l64, what="lse", spec_id=lse_clause, **tol(lse_clause))
    for b in range(q.shape[0]):
        assert_cosine(got.out[b].astype(np.float64), o64[b], what=f"out[{b}]", spec_id="TV.2.7")


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.7", "TV.2.9")
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
@HEAVY
@given(data=st.data())
def test_matches_float64_oracle(impl, dtype, data):
    case = data.draw(hh.paged_cases(dtype=dtype), label="case")
    got = run(impl, case)
    check_against_oracle(case, got, "TV.2.1" if dtype == np.float32 else "TV.2.2", lse_clause(dtype))


@pytest.mark.spec("TV.2.8")
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("H", [1, 64])
def test_large_logits_q_times_100(impl, dtype, H):
    """q × 100 (FlashInfer #1055): logits near 160 after the scale must not overflow the softmax, whole or
    split (the combine's weights are exp of differences of partial lse values)."""
    case = tree_case([-1, 0, 0, 1, 1, 2], [0, 70, 300], H=H, dtype=dtype, q_scale=100.0, page_size=16)
    o64, l64 = oracle(case)
    out_clause = "TV.2.8" if dtype == np.float32 else "TV.2.2"  # bf16: rounding P to bf16 dominates
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 40]):
        got = run(impl, case, split_chunk=chunk)
        expect(np.isfinite(got.out.astype(np.float32)).all() and np.isfinite(got.lse).all(), "TV.2.8", "overflow")
        what = f" (split_chunk={chunk})"
        assert_close(got.out.astype(np.float64), o64, what="out" + what, spec_id=out_clause, **tol(out_clause))
        assert_close(got.lse.astype(np.float64), l64, what="lse" + what, spec_id="TV.2.8", **tol("TV.2.8"))


@pytest.mark.spec("TV.2.3", "TV.2.5")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 8, 64)))
def test_branch_decomposition_and_natural_log_lse(impl, case):
    """Node i == chain attention over prefix + its root path (keys gathered by walking parents)."""
    got = run(impl, case)
    q, kv, bt, pre, parents, n_nodes = (
        case.q,
        case.kv_cache,
        case.block_table,
        case.prefix_lens,
        case.parents,
        case.n_nodes,
    )
    for b in range(q.shape[0]):
        P = int(pre[b])
        for i in range(q.shape[1]):
            path, j = [], i
            while j != -1:
                path.append(j)
                j = int(parents[b, j]) if i < n_nodes[b] else (0 if j != 0 else -1)
            keys = cache_rows(kv, bt, b, np.concatenate([np.arange(P), P + np.array(sorted(path))]))
            o, l = oracles.chain_attention(q[b, i], keys, case.softmax_scale)
            out_b = got.out[b, i].astype(np.float64)
            assert_close(out_b, o, what=f"out[{b},{i}]", spec_id="TV.2.5", **tol("TV.2.5"))
            assert_close(got.lse[b, i].astype(np.float64), l, what=f"lse[{b},{i}]", spec_id="TV.2.3", **tol("TV.2.3"))


@pytest.mark.spec("TV.2.5", "TV.2.3", "TV.2.9")
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["fp32", "bf16"])
def test_chain_tree_is_causal_attention(impl, dtype):
    """A chain-shaped tree (every node the child of the previous) is causal attention over prefix + tree."""
    Q = 40  # two visibility words
    case = tree_case(np.arange(-1, Q - 1), [0, 33], H=8, dtype=dtype, page_size=7)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 33]):
        got = run(impl, case, split_chunk=chunk)
        check_chain(case, got, Q, dtype)


def check_chain(case, got, Q, dtype):
    for b, P in enumerate(case.prefix_lens):
        keys = cache_rows(case.kv_cache, case.block_table, b, np.arange(P + Q))
        for i in range(Q):
            o, l = oracles.chain_attention(case.q[b, i], keys[: P + i + 1], case.softmax_scale)
            assert_close(got.out[b, i].astype(np.float64), o, what=f"out[{b},{i}]", spec_id="TV.2.5", **out_tol(dtype))
            lc = lse_clause(dtype)
            assert_close(got.lse[b, i].astype(np.float64), l, what=f"lse[{b},{i}]", spec_id=lc, **tol(lc))


@pytest.mark.spec("TV.2.4")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 2, 4), max_bs=2), seed=st.integers(0, 2**32 - 1))
def test_absorb_equals_non_absorbed_mla(impl, case, seed):
    q, kv, bt, pre, vis = case.q, case.kv_cache, case.block_table, case.prefix_lens, case.visibility
    scale = case.softmax_scale
    bs, Q, H, _ = q.shape
    rng = np.random.default_rng(seed)
    w_uk = rng.standard_normal((H, 128, 512)) / np.sqrt(512)
    w_uv = rng.standard_normal((H, 512, 128)) / np.sqrt(512)
    q_nope = rng.standard_normal((bs, Q, H, 128))
    q_abs = np.concatenate([np.einsum("bqhd,hdl->bqhl", q_nope, w_uk), q[..., 512:].astype(np.float64)], -1)
    q_abs = q_abs.astype(np.float32)
    got = run(impl, case.with_args(q=q_abs))
    bits = unpack_visibility(vis, Q)
    for b in range(bs):
        P = int(pre[b])
        rows = cache_rows(kv, bt, b, np.arange(P + Q)).astype(np.float64)
        for i in range(Q):
            visible = np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])])
            want = oracles.non_absorbed_attention(
                q_nope[b, i], q[b, i, :, 512:], rows[:, :512], rows[:, 512:], w_uk, w_uv, scale, visible
            )
            out = np.einsum("hl,hld->hd", got.out[b, i].astype(np.float64), w_uv)
            ref_abs = np.einsum("hl,hld->hd", oracles.chain_attention(q_abs[b, i], rows[visible], scale)[0], w_uv)
            assert_close(ref_abs, want, what=f"oracle consistency [{b},{i}]", spec_id="TV.2.4", rtol=1e-6, atol=1e-6)
            assert_close(out, want, what=f"out·W_UV[{b},{i}]", spec_id="TV.2.4", **tol("TV.2.4"))


@pytest.mark.spec("TV.2.6")
@HEAVY
@given(case=hh.paged_cases(heads=(1, 8), prefixes=(1, 63, 300)), c=st.sampled_from([0.5, 2.0, 4.0]))
def test_scale_applies_once_to_logits(impl, case, c):
    got = run(impl, case)
    q2 = (case.q.astype(np.float64) * c).astype(np.float32)
    got2 = run(impl, case.with_args(q=q2, softmax_scale=case.softmax_scale / c))
    kw = tol("TV.2.6")
    assert_close(
        got2.out.astype(np.float64), got.out.astype(np.float64), what="out (q*c, scale/c)", spec_id="TV.2.6", **kw
    )
    assert_close(
        got2.lse.astype(np.float64), got.lse.astype(np.float64), what="lse (q*c, scale/c)", spec_id="TV.2.6", **kw
    )
    got3 = run(impl, case.with_args(softmax_scale=case.softmax_scale * c))
    assert np.abs(got3.out.astype(np.float64) - got.out).max() > 1e-4, "[TV.2.6] output ignores softmax_scale"


# --- TV.3 Exact properties ------------------------------------------------------------------------------------
def seen_by(case, b, queries):
    """[num_pages, page_size] mask of the cache rows that any of request b's `queries` sees."""
    kv, bt, P = case.kv_cache, case.block_table, int(case.prefix_lens[b])
    bits = unpack_visibility(case.visibility, case.q.shape[1])
    seen = np.zeros(kv.shape[:2], bool)
    ps = kv.shape[1]
    for i in queries:
        for p in np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])]):
            seen[bt[b, p // ps], p % ps] = True
    return seen


@pytest.mark.spec("TV.3.1")
@HEAVY
@given(case=hh.paged_cases(), data=st.data())
def test_rows_no_query_sees_can_hold_any_bits(impl, case, data):
    """Rows no query of the request sees (pads, rows past its length, unreferenced pages) become NaN or
    ±Inf: none of the request's output bits move."""
    got = run(impl, case)
    bs, Q = case.q.shape[:2]
    b = data.draw(st.integers(0, bs - 1), label="request")
    poison = data.draw(st.sampled_from(["nan", "+inf", "-inf"]), label="poison")
    kv2 = case.kv_cache.copy()
    unseen = ~seen_by(case, b, range(Q))
    if poison == "nan":
        hh.poison(kv2, unseen)
    else:
        kv2[unseen] = np.inf if poison == "+inf" else -np.inf
    got2 = run(impl, case.with_args(kv_cache=kv2))
    assert_bit_exact(got2.out[b], got.out[b], what=f"out[{b}]", spec_id="TV.3.1")
    assert_bit_exact(got2.lse[b], got.lse[b], what=f"lse[{b}]", spec_id="TV.3.1")


@pytest.mark.spec("TV.3.5")
@HEAVY
@given(case=hh.paged_cases(max_nodes=40), data=st.data())
def test_tree_rows_seen_by_siblings_cannot_reach_a_query(impl, case, data):
    """Tree rows other queries of the request see, but query i does not, take huge finite values: query i's
    output bits do not move (a kernel multiplying a shared key tile must select, not multiply by zero)."""
    got = run(impl, case)
    bs, Q = case.q.shape[:2]
    b = data.draw(st.integers(0, bs - 1), label="request")
    i = data.draw(st.integers(0, Q - 1), label="query")
    others = seen_by(case, b, range(Q)) & ~seen_by(case, b, [i])
    kv2 = case.kv_cache.copy()
    huge = np.float32(3.0e38) if kv2.dtype == np.float32 else np.float32(3.0e38).astype(BF16)
    sign = np.where(
        np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed")).random(kv2.shape) < 0.5, -1, 1
    )
    kv2[others] = (sign[others] * huge).astype(kv2.dtype)
    got2 = run(impl, case.with_args(kv_cache=kv2))
    assert_bit_exact(got2.out[b, i], got.out[b, i], what=f"out[{b},{i}]", spec_id="TV.3.5")
    assert_bit_exact(got2.lse[b, i : i + 1], got.lse[b, i : i + 1], what=f"lse[{b},{i}]", spec_id="TV.3.5")


@pytest.mark.spec("TV.3.2")
@HEAVY
@given(case=hh.paged_cases(max_bs=3, heads=(1, 8, 64)))
def test_deterministic(impl, case):
    got = run(impl, case)
    for _ in range(min(impl.reruns, 5)):
        again = run(impl, case)
        assert_bit_exact(again.out, got.out, what="out", spec_id="TV.3.2")
        assert_bit_exact(again.lse, got.lse, what="lse", spec_id="TV.3.2")
    layout = run(impl, case.with_args(q=np.asfortranarray(case.q), kv_cache=np.asfortranarray(case.kv_cache)))
    assert_bit_exact(layout.out, got.out, what="out (Fortran-order inputs)", spec_id="TV.3.2")


@pytest.mark.spec("TV.3.3")
@HEAVY
@given(case=hh.paged_cases(max_bs=3, heads=(1, 8, 64)), data=st.data())
def test_batch_invariant(impl, case, data):
    """(apart from TV.3.2's test: an implementation may promise determinism without batch invariance)"""
    got = run(impl, case)
    b = data.draw(st.integers(0, case.q.shape[0] - 1), label="request")
    one = slice(b, b + 1)
    args = {k: case.args[k][one] for k in ("q", "block_table", "prefix_lens", "visibility")}
    alone = run(impl, case.with_args(**args))
    assert_bit_exact(alone.out, got.out[one], what="out", spec_id="TV.3.3")
    assert_bit_exact(alone.lse, got.lse[one], what="lse", spec_id="TV.3.3")


# --- Targeted shapes: splits, heads, wide trees, pages, masks (the CUDA kernels' corners) ---------------------
DTYPES = [pytest.param(np.float32, id="fp32"), pytest.param(BF16, id="bf16")]


def shaped_case(dtype, trees, prefix, page_size, H, *, seed=0, q_scale=1.0, scale=0.130861, strict_pages=False):
    rng = np.random.default_rng(seed)
    pars = [t if isinstance(t, np.ndarray) else hh.shaped_parents(rng, *t) for t in trees]
    return hh.paged_case(rng, dtype, pars, prefix, page_size, H, q_scale=q_scale, scale=scale,
                         strict_pages=strict_pages)  # fmt: skip


_ORACLE: dict[int, tuple] = {}


def cached_oracle(case):
    """float64 oracle of a case, computed once per case object (tests check several split chunks)."""
    if id(case) not in _ORACLE or _ORACLE[id(case)][0] is not case:
        _ORACLE.clear()
        _ORACLE[id(case)] = (case, oracle(case))
    return _ORACLE[id(case)][1]


def check_case(case, got, what=""):
    """out and lse against the float64 oracle with the dtype's clauses, plus the cosine check."""
    dtype = case.q.dtype
    o64, l64 = cached_oracle(case)
    oc, lc = ("TV.2.1" if dtype == np.float32 else "TV.2.2"), lse_clause(dtype)
    tree_results.check_verified_shapes(case.q, got, oc, lc)
    assert_close(got.out.astype(np.float64), o64, what=f"out{what}", spec_id=oc, **tol(oc))
    assert_close(got.lse.astype(np.float64), l64, what=f"lse{what}", spec_id=lc, **tol(lc))
    for b in range(case.q.shape[0]):
        assert_cosine(got.out[b].astype(np.float64), o64[b], what=f"out[{b}]{what}", spec_id="TV.2.7")


CHUNKS = [1, 7, 32, 64, 100, None]  # keys per split; None = the kernel's own rule (no split at these sizes)


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.9", "TV.3.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_forced_splits_match_oracle_and_repeat_bit_for_bit(impl, dtype):
    """Split-KV at small shapes: every chunk size is within tolerance of the float64 oracle (so of each
    other), including 1-key splits that some queries see nothing of, and each repeats bit for bit."""
    case = shaped_case(dtype, [(23, "random"), (40, "bushy"), (9, "chain")], [300, 77, 0], 16, 3, seed=1)
    for chunk in impl.knob_values("tree_verify", "split_chunk", CHUNKS):
        got = run(impl, case, split_chunk=chunk)
        check_case(case, got, what=f" (split_chunk={chunk})")
        again = run(impl, case, split_chunk=chunk)
        assert_bit_exact(again.out, got.out, what=f"out (split_chunk={chunk})", spec_id="TV.3.2")
        assert_bit_exact(again.lse, got.lse, what=f"lse (split_chunk={chunk})", spec_id="TV.3.2")


def _requests(case, idx):
    idx = list(idx)
    args = {k: case.args[k][idx] for k in ("q", "block_table", "prefix_lens", "visibility")}
    return case.with_args(**args)


@pytest.mark.spec("TV.3.3")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [7, 64, None])
def test_split_requests_are_batch_invariant(impl, dtype, chunk):
    """With the same split chunk, a request's bits do not depend on the batch around it: alone, first,
    last, or beside requests of other lengths (so other split counts)."""
    case = shaped_case(dtype, [(30, "random"), (12, "bushy"), (30, "chain")], [700, 5, 129], 16, 8, seed=2)
    full = run(impl, case, split_chunk=chunk)
    for order in ([0], [1], [2], [2, 0, 1], [1, 2]):
        got = run(impl, _requests(case, order), split_chunk=chunk)
        for k, b in enumerate(order):
            assert_bit_exact(got.out[k], full.out[b], what=f"out[{b}] in batch {order}", spec_id="TV.3.3")
            assert_bit_exact(got.lse[k], full.lse[b], what=f"lse[{b}] in batch {order}", spec_id="TV.3.3")


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.9")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [1, 3, 8, 16, 64, 128])
def test_head_counts(impl, dtype, H):
    """H need not be a multiple of 16: the (query, head) rows tile across CTAs in any grouping."""
    case = shaped_case(dtype, [(7, "random"), (5, "bushy")], [70, 33], 16, H, seed=3)
    check_case(case, run(impl, case))


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.9")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "Q,shape,prefix",
    [(33, "random", [40]), (65, "bushy", [0]), (200, "random", [64]), (1025, "random", [37]), (1025, "chain", [0])],
    ids=["Q33", "Q65-prefix0", "Q200", "Q1025", "Q1025-chain"],
)
def test_wide_trees_span_several_visibility_words(impl, dtype, Q, shape, prefix):
    """Trees of up to 1 + the largest budget (1025 nodes, 33 visibility words per row), forced splits too."""
    case = shaped_case(dtype, [(Q, shape)], prefix, 64, 2, seed=4)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 96]):
        check_case(case, run(impl, case, split_chunk=chunk), what=f" (split_chunk={chunk})")


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.1.2")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [1, 7, 16, 64, 100])
def test_page_sizes(impl, dtype, page_size):
    """Any page size (not only powers of two); prefixes 0, inside a page and across page boundaries."""
    case = shaped_case(
        dtype, [(9, "random"), (6, "chain"), (9, "bushy")], [0, 99, 250], page_size, 4, seed=5, strict_pages=True
    )  # the page size is this test's subject: never fitted to a declaration
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 50]):
        with clause("TV.1.2"):  # any page size is accepted (TV.1.2); the answer is TV.2.1/TV.2.2's
            got = run(impl, case, split_chunk=chunk)
        check_case(case, got, what=f" (page_size={page_size}, split_chunk={chunk})")


@pytest.mark.spec("TV.2.1", "TV.2.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_prefix(impl, dtype):
    """prefix_len = 0 everywhere: the root is the first key; 3-key splits leave most queries blind in most
    splits (a partial lse of -inf must weigh nothing)."""
    case = shaped_case(dtype, [(17, "random"), (17, "chain")], [0, 0], 16, 5, seed=6)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 3]):
        check_case(case, run(impl, case, split_chunk=chunk), what=f" (split_chunk={chunk})")


@pytest.mark.spec("TV.3.1", "TV.3.5")
@pytest.mark.full  # ~20 s a case in the numpy reference (quick: GPU implementations only)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # siblings that see the huge rows overflow (not checked)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk", [None, 16])
def test_mask_isolation_at_every_query(impl, dtype, chunk):
    """Every query of a bushy tree: NaN in every row no query of the request sees (TV.3.1), the largest
    finite values in the tree rows that query does not see (TV.3.5); its out and lse keep every bit."""
    case = shaped_case(dtype, [(12, "bushy"), (12, "random")], [45, 3], 16, 16, seed=7)
    got = run(impl, case, split_chunk=chunk)
    huge = float(ml_dtypes.finfo(BF16).max) if np.dtype(dtype) == BF16 else float(np.finfo(np.float32).max)
    bs, Q = case.q.shape[:2]
    for b in range(bs):
        request_rows = seen_by(case, b, range(Q))
        for i in range(Q):
            kv2 = case.kv_cache.copy()
            hh.poison(kv2, ~request_rows)
            others = request_rows & ~seen_by(case, b, [i])
            kv2[others] = np.where(np.arange(limits.HEAD_DIM) % 2, -huge, huge).astype(kv2.dtype)
            got2 = run(impl, case.with_args(kv_cache=kv2), split_chunk=chunk)
            assert_bit_exact(got2.out[b, i], got.out[b, i], what=f"out[{b},{i}]", spec_id="TV.3.5")
            assert_bit_exact(got2.lse[b, i], got.lse[b, i], what=f"lse[{b},{i}]", spec_id="TV.3.5")

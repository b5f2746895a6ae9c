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


def run(impl, case):
    try:
        fn = impl.op("tree_verify")
    except impls.Unavailable as e:
        pytest.skip(str(e))
    q, kv, bt, pre, vis, scale, *_ = case
    return fn(q, kv, bt, pre, vis, scale)


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
@pytest.mark.spec("TV.3.1")
@HEAVY
@given(case=hh.paged_cases(), data=st.data())
def test_invisible_rows_do_not_change_a_bit(impl, case, data):
    q, kv, bt, pre, vis, scale, *_ = case
    out, lse = run(impl, case)
    bs, Q = q.shape[:2]
    b = data.draw(st.integers(0, bs - 1), label="request")
    i = data.draw(st.integers(0, Q - 1), label="query")
    bits = ref.unpack_visibility(vis, Q)
    kv2 = kv.copy()
    ps = kv.shape[1]
    seen = np.zeros(kv.shape[:2], bool)
    for p in np.concatenate([np.arange(pre[b]), pre[b] + np.flatnonzero(bits[b, i])]):
        seen[bt[b, p // ps], p % ps] = True
    hh.poison(kv2, ~seen)  # everything this query cannot see, in every page, becomes NaN
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

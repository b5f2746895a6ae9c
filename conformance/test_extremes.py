"""tree_build and tree_accept at the edges of every limit (contract/limits.py), bit-exact against the
reference: the largest batch with distinct prefix lengths, the largest budget, top-k, depth and context,
trees spanning several visibility words, page sizes 1, 64 and sizes that are not powers of two.

Extremes are not combined beyond what fits in memory: at the largest context the requests share their
prefix pages (allowed: only the tree's own rows must not alias). The reference's result for each case is
computed once per session; every implementation, the reference included, is compared with it bit for bit
and checked against the structural invariants of its clauses. Cases whose reference run takes more than a
few seconds on one core are marked slow.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from contract import Accept, Tree, limits
from harness import strategies as hh
from harness.cases import Case, run
from harness.compare import assert_bit_exact
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build

L15 = 15


def _topk(bs, L, K_in, B, prefix, *, style="bf16", seed=0, full_mask=False) -> Case:
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, K_in), style, 0.0)
    ids = np.argsort(rng.random((bs, L, max(K_in, 1))), axis=-1)[..., :K_in].astype(np.int32) * 7 + 3
    roots = rng.integers(0, 150_000, bs).astype(np.int32)
    return hh.topk_case(lp, ids, roots, B, np.asarray(prefix, np.int32), with_full_mask=full_mask)


BUILD = {
    "bs1024-distinct-prefixes": (lambda: _topk(1024, L15, 64, 64, np.arange(1024) * 37, full_mask=True), False),
    "B1024-Kin8-L32": (lambda: _topk(2, 32, 8, 1024, [0, 5]), False),
    "Kin1024-B512": (lambda: _topk(2, 4, 1024, 512, [3, 0], style="coarse"), False),
    "L32-B1024-Kin1024": (lambda: _topk(1, 32, 1024, 1024, [0]), False),
    "vis-2-words": (lambda: _topk(3, 6, 8, 40, [0, 1, 64]), False),
    "vis-4-words": (lambda: _topk(3, 8, 16, 100, [0, 1, 64], full_mask=True), False),
    "largest-context": (lambda: _topk(2, L15, 64, 1024, [limits.MAX_CONTEXT - 1025, 7]), False),
    "bs1024-B256": (lambda: _topk(1024, L15, 256, 256, np.arange(1024)), True),
}


@functools.cache
def build_case(name) -> tuple[Case, Tree]:
    case = BUILD[name][0]()
    return case, ref_build.tree_build(**case.args)


def _param(name, slow):
    return pytest.param(name, id=name, marks=[pytest.mark.slow] if slow else [])


def check_tree_invariants(case: Case, got: Tree) -> None:
    """TB.2.6/2.7/2.8 and TB.3.2 without an oracle: cheap enough for the largest trees."""
    D = 1 + case.budget
    n = np.asarray(got.n_nodes)
    par, dep, sc = np.asarray(got.parents), np.asarray(got.depths), np.asarray(got.scores)
    idx = np.arange(D)[None, :]
    real = (idx < n[:, None]) & (idx > 0)
    assert (par[real] < np.broadcast_to(idx, par.shape)[real]).all(), "[TB.2.6] a parent after its child"
    assert (np.where(real, np.diff(np.concatenate([sc[:, :1], sc], axis=1), axis=1), 0)[:, 2:] <= 0).all()
    assert (np.asarray(got.positions) == case.prefix_lens[:, None] + dep).all(), "[TB.3.2] positions"
    assert (par[:, 0] == -1).all() and (sc[:, 0] == 0).all(), "[TB.2.7] root"


@pytest.mark.spec("TB.2.3", "TB.2.6", "TB.3.1", "TB.3.2", "TB.3.3", "TB.3.4")
@pytest.mark.parametrize("name", [_param(n, s) for n, (_, s) in BUILD.items()])
def test_tree_build_extremes(impl, name):
    case, want = build_case(name)
    # select_race also with the race at every budget (its launch hands small budgets to lane_cached's build)
    for race_min_b in impl.knob_values("tree_build", "race_min_b", [None, 1]):
        got = run(impl, case, race_min_b=race_min_b)
        check_tree_invariants(case, got)
        for f in Tree.FIELDS:
            assert_bit_exact(
                np.asarray(getattr(got, f)),
                getattr(want, f),
                what=f,
                spec_id="TB.2.3",
                context={"case": name, "race_min_b": race_min_b},
            )


def _accept(bs, D, page_size, prefix, *, vocab=4, seed=0, dtype=ml_dtypes.bfloat16) -> Case:
    """Random trees of width D (every other one with a chain as deep as 32), planted matches, and a paged
    cache whose tree rows are on pages of their own while every request's prefix pages are one shared page."""
    rng = np.random.default_rng(seed)
    prefix = np.asarray(prefix, np.int32)
    par = np.full((bs, D), -1, np.int32)
    for b in range(bs):
        chain = min(D - 1, limits.MAX_DEPTH) if b % 2 == 0 else 0
        par[b, 1 : 1 + chain] = np.arange(chain)  # a path 1..chain from the root
        for i in range(1 + chain, D):
            par[b, i] = rng.integers(0, i)
    depth = np.stack([hh.depths_of(p) for p in par])
    L = int(depth.max())
    par = np.where(depth > limits.MAX_DEPTH, 0, par)  # keep every node within the depth limit
    fc = np.empty((bs, D), np.int32)
    ns = np.empty((bs, D), np.int32)
    for b in range(bs):
        fc[b], ns[b] = hh.links_of(par[b], D)
    tokens = rng.integers(0, vocab, (bs, D)).astype(np.int32)
    target = rng.integers(0, vocab, (bs, D)).astype(np.int32)
    planted = rng.random((bs, D)) < 0.8
    has_child = fc >= 0
    target = np.where(planted & has_child, np.take_along_axis(tokens, np.maximum(fc, 0), axis=1), target)
    first_tree_page = prefix // page_size
    last_page = (prefix + D - 1) // page_size
    n_tree_pages = last_page - first_tree_page + 1
    max_pages = int(last_page.max()) + 1
    total = 1 + int(n_tree_pages.sum())  # page 0: the shared prefix page
    bt = np.zeros((bs, max_pages), np.int32)
    perm = 1 + rng.permutation(total - 1)
    k = 0
    for b in range(bs):
        bt[b, first_tree_page[b] : last_page[b] + 1] = perm[k : k + n_tree_pages[b]]
        k += n_tree_pages[b]
    kv = (rng.standard_normal((total, page_size, limits.HEAD_DIM)) * 0.5).astype(np.float32).astype(dtype)
    args = dict(kv_cache=kv, block_table=bt, prefix_lens=prefix)
    return hh.accept_case(par, np.full(bs, D, np.int32), tokens, fc, ns, target, min(L, limits.MAX_DEPTH), **args)


ACCEPT = {
    "bs1024-distinct-prefixes-page64": (lambda: _accept(1024, 65, 64, np.arange(1024) * 3), False),
    "D1025-page1": (lambda: _accept(2, 1025, 1, [0, 9]), False),
    "D1025-page7": (lambda: _accept(2, 1025, 7, [3, 700]), False),
    "D100-page100-fp32": (lambda: _accept(4, 100, 100, [0, 99, 100, 101], dtype=np.float32), False),
    "largest-context-page64": (
        lambda: _accept(2, 1025, 64, [limits.MAX_CONTEXT - 1025, 5]),
        False,
    ),
    "largest-context-page1": (lambda: _accept(1, 65, 1, [limits.MAX_CONTEXT - 65]), False),
    "page-size-1024": (lambda: _accept(3, 200, 1024, [0, 1000, 5000]), False),
}


@functools.cache
def accept_case(name) -> tuple[Case, Accept, np.ndarray]:
    case = ACCEPT[name][0]().copy()
    committed = case.copy()
    want = ref_accept.tree_accept(**committed.args)
    return case, want, committed.kv_cache


@pytest.mark.spec("TA.2.1", "TA.2.3", "TA.3.1", "TA.3.2", "TA.3.3")
@pytest.mark.parametrize("name", [_param(n, s) for n, (_, s) in ACCEPT.items()])
def test_tree_accept_extremes(impl, name):
    case, want, want_kv = accept_case(name)
    mine = case.copy()  # the commit writes in place
    got = run(impl, mine)
    assert int(np.asarray(got.accept_len).max()) > 3, "the planted matches should make some walks go deep"
    for f in Accept.FIELDS:
        assert_bit_exact(
            np.asarray(getattr(got, f)), getattr(want, f), what=f, spec_id="TA.2.3", context={"case": name}
        )
    assert_bit_exact(mine.kv_cache, want_kv, what="kv_cache", spec_id="TA.3.1", context={"case": name})

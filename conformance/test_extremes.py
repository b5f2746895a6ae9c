"""tree_build and tree_accept at the edges of every limit (contract/limits.py), bit-exact against the
reference: the largest batch with distinct prefix lengths, the largest budget, top-k, depth and context,
trees spanning several visibility words, page sizes 1, 64 and sizes that are not powers of two; depth-32 trees
whose B-th and (B+1)-th candidates tie, through every build path of every tree_build variant (staged and global
log-probs, the selection taken, its replay after a failed check or an overflow, the race and the replay's own
build); budgets the brute-force oracle can check whose heap frontier holds more than 32 tied entries at once
(so some lane of the lane-cached pop holds several); accept trees past the 128 threads of a block with sibling
lists of a thousand nodes and fp32 rows wider than the block. (tree_verify's extremes: test_extremes_verify.py.)

Extremes are not combined beyond what fits in memory: at the largest context the requests share their
prefix pages (allowed: only the tree's own rows must not alias). The reference's result for each case is
computed once per session; every implementation, the reference included, is compared with it bit for bit
and checked against the structural invariants of its clauses. Cases whose reference run takes more than a
few seconds on one core are marked slow.
"""

from __future__ import annotations

import collections
import functools
import heapq

import ml_dtypes
import numpy as np
import pytest

from contract import Accept, Tree, limits
from harness import strategies as hh
from harness import tree_results
from harness.cases import Case, run
from harness.compare import assert_bit_exact
from harness.verdict import expect
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build

L15 = 15


def _topk(bs, L, K_in, B, prefix, *, style="bf16", seed=0, full_mask=False) -> Case:
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, K_in), style, 0.0)
    ids = np.argsort(rng.random((bs, L, max(K_in, 1))), axis=-1)[..., :K_in].astype(np.int32) * 7 + 3
    roots = rng.integers(0, 150_000, bs).astype(np.int32)
    return hh.topk_case(lp, ids, roots, B, np.asarray(prefix, np.int32), with_full_mask=full_mask)


def deep_tie_rows(L, K, kind) -> np.ndarray:
    """[L, K] log-prob rows of a tree that reaches depth L (rank 0 is a certain token) and ties everywhere:
    'staircase': rank 1 at depth d costs 1 + (L - d)/64, the deeper the cheaper, and a deviation ties with its
      zero-extensions (tie groups of 1, 2, 3, ... nodes); ranks 2.. cost 8 more each;
    'signed': the same with -0.0 at rank 0 of every other depth (equal scores of other bits);
    'diagonal': rank r at depth d costs 1 + (L - d + r - 1)/64: every (depth, rank) on a diagonal ties, ranks up
      to ~20;
    'near': the staircase's costs 2^-14 apart: distinct scores sharing the 20-bit key prefixes select_warp's
      threshold search works in;
    'wide': every depth but the last costs 1000 + r, the last ties its siblings in pairs (r // 2 · 2^-12), so
      the boundary falls between siblings of ranks near K;
    'ranksum': rank r costs r at every depth: every tuple of a rank sum ties (hundreds to thousands of nodes)."""
    d = np.arange(1, L + 1, dtype=np.float64)[:, None]
    r = np.arange(K, dtype=np.float64)[None, :]
    step = {"near": 2.0**-14}.get(kind, 1 / 64)
    if kind in ("staircase", "signed", "near"):
        lp = -(1 + (L - d) * step) - (r - 1) * 8
    elif kind == "diagonal":
        lp = -(1 + (L - d + r - 1) / 64) + 0 * r
    elif kind == "wide":
        lp = np.where(d < L, -(1000 + r), -(r // 2) * 2.0**-12)
    else:
        lp = -r + 0 * d
    lp = np.where(r == 0, 0.0, lp).astype(np.float32)
    if kind == "signed":
        lp[::2, 0] = -0.0
    return lp


def _deep_ties(bs, K_in, B, kinds, *, seed=0) -> Case:
    """bs requests of depth-32 tie rows, kinds cycled over the batch, and checks that the case does what its
    name says: every request reaches depth 32, and where its tree is not the whole candidate set its B-th node
    ties with the next candidate (the heap run one pop further)."""
    L = limits.MAX_DEPTH
    rng = np.random.default_rng(seed)
    lp = np.stack([deep_tie_rows(L, K_in, kinds[b % len(kinds)]) for b in range(bs)])
    ids = hh.distinct_ids(rng, (bs, L, K_in))
    case = hh.topk_case(lp, ids, np.arange(bs, dtype=np.int32) * 11, B, (np.arange(bs) * 97).astype(np.int32))
    for b in range(bs):
        _, depths, _, _, scores = ref_build.build_one(lp[b], ids[b], B + 1)
        assert max(depths) == L, (kinds[b % len(kinds)], max(depths))
        assert len(scores) <= B or scores[B - 1] == scores[B], f"no tie at the boundary: {kinds[b % len(kinds)]}"
    return case


def _unstable(bs, K_in, B, *, seed=20261203) -> Case:
    """Depth-32 rows whose sibling chains the select kernels' shortcut gets wrong (hh.unstable_chain_rows): their
    check fails and they replay (at B = 700 the shortcut misses nodes of the tree in 5 of 6 requests)."""
    rng = np.random.default_rng(seed)
    shape = (bs, limits.MAX_DEPTH, K_in)
    lp = hh.unstable_chain_rows(rng, shape)
    return hh.topk_case(lp, hh.distinct_ids(rng, shape), np.arange(bs, dtype=np.int32), B, np.zeros(bs, np.int32))


DEEP_KINDS = ("staircase", "diagonal", "signed", "near", "wide", "ranksum")
# name -> (case factory, slow). Each batch mixes rows the selection takes and rows it replays (ranksum overflows
# its candidates at every budget; near and wide at some); B = 1024, K_in = 1024 reads the log-probs from global
# memory in the select builds (128 KB), B = 256, K_in = 256 stages them (32 KB); the 99 KB builds have no room for
# candidates at B = 1024 (the replay alone) and heap_smem_99k stages nothing there.
DEEP = {
    "L32-ties-B64-Kin8": (lambda: _deep_ties(6, 8, 64, DEEP_KINDS), False),
    "L32-ties-B256-Kin256": (lambda: _deep_ties(6, 256, 256, DEEP_KINDS), False),
    "L32-ties-B1024-Kin1024": (lambda: _deep_ties(6, 1024, 1024, DEEP_KINDS), False),
    "L32-unstable-B700-Kin8": (lambda: _unstable(6, 8, 700), False),
    # more requests than any GPU runs races at once: select_race hands the batch to lane_cached's build
    "L32-ties-bs1024-B256": (lambda: _deep_ties(1024, 16, 256, DEEP_KINDS), True),
}

BUILD = {
    "bs1024-distinct-prefixes": (lambda: _topk(1024, L15, 64, 64, np.arange(1024) * 37, full_mask=True), True),
    "B1024-Kin8-L32": (lambda: _topk(2, 32, 8, 1024, [0, 5]), False),
    "Kin1024-B512": (lambda: _topk(2, 4, 1024, 512, [3, 0], style="coarse"), False),
    "L32-B1024-Kin1024": (lambda: _topk(1, 32, 1024, 1024, [0]), False),
    "vis-2-words": (lambda: _topk(3, 6, 8, 40, [0, 1, 64]), False),
    "vis-4-words": (lambda: _topk(3, 8, 16, 100, [0, 1, 64], full_mask=True), False),
    "largest-context": (lambda: _topk(2, L15, 64, 1024, [limits.MAX_CONTEXT - 1025, 7]), False),
    "bs1024-B256": (lambda: _topk(1024, L15, 256, 256, np.arange(1024)), True),
    **DEEP,
}


@functools.cache
def build_case(name) -> tuple[Case, Tree]:
    case = BUILD[name][0]()
    return case, ref_build.tree_build(**case.args)


def _param(name, slow):
    """A slow case is also a `full` one: the quick profile runs it on GPU implementations only."""
    return pytest.param(name, id=name, marks=[pytest.mark.slow, pytest.mark.full] if slow else [])


def check_tree_invariants(case: Case, got: Tree) -> None:
    """TB.2.6/2.7/2.8 and TB.3.2 without an oracle: cheap enough for the largest trees."""
    D = 1 + case.budget
    n = np.asarray(got.n_nodes)
    par, dep, sc = np.asarray(got.parents), np.asarray(got.depths), np.asarray(got.scores)
    idx = np.arange(D)[None, :]
    real = (idx < n[:, None]) & (idx > 0)
    expect((par[real] < np.broadcast_to(idx, par.shape)[real]).all(), "TB.2.6", "a parent after its child")
    expect(
        (np.where(real, np.diff(np.concatenate([sc[:, :1], sc], axis=1), axis=1), 0)[:, 2:] <= 0).all(),
        "TB.2.6",
        "scores increase somewhere",
    )
    expect((np.asarray(got.positions) == case.prefix_lens[:, None] + dep).all(), "TB.3.2", "positions")
    expect((par[:, 0] == -1).all() and (sc[:, 0] == 0).all(), "TB.2.7", "root")


@pytest.mark.spec(*tree_results.CLAUSES)
@pytest.mark.parametrize("name", [_param(n, s) for n, (_, s) in BUILD.items()])
def test_tree_build_extremes(impl, name):
    case, want = build_case(name)
    # select_race also with the race at every budget (its launch hands small budgets to lane_cached's build)
    for race_min_b in impl.knob_values("tree_build", "race_min_b", [None, 1]):
        got = run(impl, case, race_min_b=race_min_b)
        check_tree_invariants(case, got)
        tree_results.check_tree(got, want, {"case": name, "race_min_b": race_min_b})


# --- the select kernels' paths on the depth-32 ties ------------------------------------------------------------
SELECT_VARIANTS = ("select_verify", "select_warp", "select_race")
SELECTED, UNVERIFIED, OVERFLOW, ALONE = "selected", "check failed", "overflow", "replay alone (no room to select)"
# The paths each select build takes on the DEEP cases on an H200 (S selected, O overflow, U check failed, R the replay
# alone; requests in order staircase, diagonal, signed, near, wide, ranksum):
#   select_verify      B64 SSSOOO  B256 SSSOSO  B1024 SSSOOO  unstable B700 UUUUUU
#   select_warp        B64 SSSOOO  B256 SSSOSO  B1024 SSSOSO  unstable B700 UUUUUU
#   select_race        B64 SSSOOO  B256 SSSOSO  B1024 OOOOOO  unstable B700 UUUUUU
#   select_verify_99k  B64 SSSOOO  B256 SSSOSO  B1024 RRRRRR  unstable B700 UUUUUU
#   select_warp_99k    B64 SSSOOO  B256 SSSOSO  B1024 RRRRRR  unstable B700 UUUUUU
#   select_race_99k    B64 SSSOOO  B256 OOOOOO  B1024 RRRRRR  unstable B700 RRRRRR


@pytest.mark.gpu
@pytest.mark.spec("TB.2.2", "TB.2.3")
@pytest.mark.parametrize("variant", [v + t for v in SELECT_VARIANTS for t in ("", "_99k")])
def test_deep_ties_take_every_select_path(variant):
    """The select variants built to report their path in n_nodes (TB_FALLBACK=2: -1 a check failed, -2 the
    candidates overflowed; the selection first, the replay after it, also in a race build) on the depth-32 tie
    cases, racing at every budget: the selection is taken on some requests, replayed after an overflow on others
    and after a failed check on others (where the build has room for candidates at that case's budget: the table
    above), and every request's tree is the reference's."""
    from harness import device
    from kernels_cu import geometry, runtime, specs, tree_build_ops

    if not device.probe().ok:
        pytest.skip(f"GPU unavailable: {device.probe().reason}")
    spec = specs.get("tree_build", variant)
    build = tree_build_ops.bind(spec.with_defines(f"{variant}_report", TB_FALLBACK="2"), race_min_b=1)
    limit = tree_build_ops.smem_limit(spec, runtime.smem_optin_limit())
    seen: dict[str, set] = collections.defaultdict(set)
    for name in DEEP:
        if BUILD[name][1]:
            continue  # the wide batch replays in lane_cached's build: nothing to report
        case, want = build_case(name)
        _, L, K_in = case.top_logp.shape
        cap = geometry.tree_build(case.budget, L, K_in, limit, *tree_build_ops.policies(spec))[2]
        got = build(**case.args)
        n = np.asarray(got.n_nodes)
        for b, x in enumerate(n):
            seen[{-1: UNVERIFIED, -2: OVERFLOW}.get(int(x), SELECTED if cap else ALONE)].add(f"{name}[{b}]")
        ok = n > 0
        assert_bit_exact(n[ok], want.n_nodes[ok], what="n_nodes", spec_id="TB.2.3", context={"case": name})
        for f in (f for f in Tree.FIELDS if f != "n_nodes"):  # the replay's tree where the selection was not taken
            assert_bit_exact(
                np.asarray(getattr(got, f)), getattr(want, f), what=f, spec_id="TB.2.3", context={"case": name}
            )
        if name == "L32-unstable-B700-Kin8" and cap:
            assert UNVERIFIED in seen, f"{variant}: no check failed on {name}: {n}"
    assert {SELECTED, OVERFLOW} <= set(seen), f"{variant}: paths taken {dict(seen)}"


# --- brute-force oracle budgets with tied entries in every lane ---------------------------------------------------
LANES = 32  # the lane-cached pop's warp: lane l holds frontier slots j·32 + l (kernels_cu/tree_build.cuh)


def frontier_ties(lp: np.ndarray, B: int) -> int:
    """The most entries of equal score the reference heap's frontier holds at once while it pops one request's B
    nodes: above LANES, some lane of the lane-cached pop holds two of them (it must pick by rank tuple)."""
    L, K = lp.shape[0], min(B, lp.shape[1])
    heap: list = []
    count: collections.Counter = collections.Counter()
    most = 0

    def push(s, t):
        if ref_build.selectable(s):
            heapq.heappush(heap, (ref_build.heap_key(s, t), s))
            count[s] += 1

    push(ref_build.first_score(lp[0, 0]), (0,))
    for _ in range(B):
        if not heap:
            break
        most = max(most, max(count.values()))
        (_, t), s = heapq.heappop(heap)
        count[s] -= 1
        d, r = len(t), t[-1]
        if r + 1 < K:
            push(ref_build.sibling_score(s, lp[d - 1, r], lp[d - 1, r + 1]), (*t[:-1], r + 1))
        if d < L:
            push(ref_build.child_score(s, lp[d, 0]), (*t, 0))
    return most


def _brute(bs, L, K_in, B, style, *, inf_frac=0.0, seed=0) -> Case:
    rng = np.random.default_rng(seed)
    if style == "ranksum":
        lp = np.broadcast_to(-np.arange(K_in, dtype=np.float32), (bs, L, K_in)).copy()
    else:
        lp = hh.logp_rows(rng, (bs, L, K_in), style, inf_frac)
    case = hh.topk_case(lp, hh.distinct_ids(rng, (bs, L, K_in)), np.arange(bs, dtype=np.int32), B)
    ties = [frontier_ties(lp[b], B) for b in range(bs)]
    assert min(ties) > LANES, f"a request's frontier never holds more than {LANES} tied entries: {ties}"
    return case


# name -> case factory: up to 5,460 candidates (L = 6, K = 4), budgets up to the largest; the frontier holds 43 to
# 192 entries of one score at once (in every request), some -inf.
BRUTE = {
    "L6-Kin4-B200-coarse": lambda: _brute(4, 6, 4, 200, "coarse", seed=1),
    "L6-Kin4-B1024-coarse-inf": lambda: _brute(4, 6, 4, 1024, "coarse", inf_frac=0.1, seed=5),
    "L10-Kin2-B1000-coarse": lambda: _brute(4, 10, 2, 1000, "coarse", seed=3),
    "L4-Kin8-B1024-coarse": lambda: _brute(4, 4, 8, 1024, "coarse", seed=4),
    "L5-Kin5-B512-ranksum": lambda: _brute(2, 5, 5, 512, "ranksum"),
}


@functools.cache
def brute_case(name) -> tuple[Case, Tree]:
    case = BRUTE[name]()
    return case, tree_results.oracle_tree(**case.args)


@pytest.mark.spec(*tree_results.CLAUSES)
@pytest.mark.parametrize("name", list(BRUTE))
def test_brute_force_budgets_with_tied_lanes(impl, name):
    """Budgets up to 1024 on inputs the brute-force oracle enumerates whole, with so many ties that the frontier
    holds more than 32 entries of one score at once: node for node the oracle's tree, with the race at every
    budget too."""
    case, want = brute_case(name)
    for race_min_b in impl.knob_values("tree_build", "race_min_b", [None, 1]):
        got = run(impl, case, race_min_b=race_min_b)
        tree_results.check_tree(got, want, {"case": name, "race_min_b": race_min_b})


def _accept(bs, D, page_size, prefix, *, vocab=4, seed=0, dtype=ml_dtypes.bfloat16) -> Case:
    """Random trees of width D (every other one with a chain as deep as 32), planted matches, and a paged
    cache whose tree rows are on pages of their own while every request's prefix pages are one shared page."""
    rng = np.random.default_rng(seed)
    par = np.full((bs, D), -1, np.int32)
    for b in range(bs):
        chain = min(D - 1, limits.MAX_DEPTH) if b % 2 == 0 else 0
        par[b, 1 : 1 + chain] = np.arange(chain)  # a path 1..chain from the root
        for i in range(1 + chain, D):
            par[b, i] = rng.integers(0, i)
    depth = np.stack([hh.depths_of(p) for p in par])
    par = np.where(depth > limits.MAX_DEPTH, 0, par)  # keep every node within the depth limit
    fc = np.stack([hh.links_of(p, D)[0] for p in par])
    tokens = rng.integers(0, vocab, (bs, D)).astype(np.int32)
    target = rng.integers(0, vocab, (bs, D)).astype(np.int32)
    planted = rng.random((bs, D)) < 0.8
    has_child = fc >= 0
    target = np.where(planted & has_child, np.take_along_axis(tokens, np.maximum(fc, 0), axis=1), target)
    return _accept_case(rng, par, tokens, target, page_size, prefix, dtype)


def _accept_case(rng, par, tokens, target, page_size, prefix, dtype) -> Case:
    """A tree_accept case over parent arrays [bs, D] (every node within the depth limit), with the commit on a
    paged cache whose tree rows are on pages of their own while every request's prefix pages are one shared page."""
    bs, D = par.shape
    prefix = np.asarray(prefix, np.int32)
    L = int(max(hh.depths_of(p).max() for p in par))
    fc = np.empty((bs, D), np.int32)
    ns = np.empty((bs, D), np.int32)
    for b in range(bs):
        fc[b], ns[b] = hh.links_of(par[b], D)
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
    return hh.accept_case(par, np.full(bs, D, np.int32), tokens, fc, ns, target, max(L, 1), **args)


def _accept_long_lists(page_size, prefix, *, dtype=np.float32, seed=0) -> Case:
    """Two trees of 1025 slots whose root has 993 and 1024 children (sibling lists eight times the block's 128 threads):
    in request 0 children 500 and 900 both carry the root's target (the first in list order, 500, wins) and a
    chain under 500 takes the walk to depth 32; in request 1 only the last child matches and leads nowhere. fp32
    rows: 144 16-byte columns, more than the block's threads, so the commit's threads take two each."""
    D, L = limits.MAX_TREE, limits.MAX_DEPTH
    rng = np.random.default_rng(seed)
    par = np.zeros((2, D), np.int32)
    par[:, 0] = -1
    chain = np.arange(D - L, D - 1)  # 31 nodes under node 500: depths 2..32
    par[0, chain] = np.concatenate([[500], chain[:-1]])
    tokens = (10_000 + rng.permutation(2 * D).reshape(2, D)).astype(np.int32)
    tokens[0, 900] = tokens[0, 500]
    target = rng.integers(0, 1000, (2, D)).astype(np.int32)  # below every token: no other match
    target[0, 0] = tokens[0, 500]
    target[0, 500] = tokens[0, chain[0]]
    target[0, chain[:-1]] = tokens[0, chain[1:]]
    target[1, 0] = tokens[1, D - 1]
    return _accept_case(rng, par, tokens, target, page_size, prefix, dtype)


ACCEPT = {
    "bs1024-distinct-prefixes-page64": (lambda: _accept(1024, 65, 64, np.arange(1024) * 3), True),
    "D1025-page1": (lambda: _accept(2, 1025, 1, [0, 9]), False),
    "D1025-page7": (lambda: _accept(2, 1025, 7, [3, 700]), False),
    "D100-page100-fp32": (lambda: _accept(4, 100, 100, [0, 99, 100, 101], dtype=np.float32), False),
    "largest-context-page64": (
        lambda: _accept(2, 1025, 64, [limits.MAX_CONTEXT - 1025, 5]),
        False,
    ),
    "largest-context-page1": (lambda: _accept(1, 65, 1, [limits.MAX_CONTEXT - 65]), False),
    "page-size-1024": (lambda: _accept(3, 200, 1024, [0, 1000, 5000]), False),
    "D1025-sibling-lists-993-fp32": (lambda: _accept_long_lists(16, [0, 3000]), False),
}


@functools.cache
def accept_case(name) -> tuple[Case, Accept, np.ndarray]:
    case = ACCEPT[name][0]().copy()
    committed = case.copy()
    want = ref_accept.tree_accept(**committed.args)
    return case, want, committed.kv_cache


@pytest.mark.spec("TA.2.1", "TA.2.2", "TA.2.3", "TA.3.1", "TA.3.2", "TA.3.3")
@pytest.mark.parametrize("name", [_param(n, s) for n, (_, s) in ACCEPT.items()])
def test_tree_accept_extremes(impl, name):
    case, want, _ = accept_case(name)
    assert int(np.asarray(want.accept_len).max()) > 3, "the planted matches should make some walks go deep"
    mine = case.copy()  # the commit writes in place
    got = run(impl, mine)
    ctx = {"case": name}
    for b in range(case.tokens.shape[0]):  # a wrong step fails the walk's clause it breaks, before the fields
        want_path = [int(x) for x in want.accept_path[b, : int(want.accept_len[b]) + 1]]
        tree_results.check_walk(got, b, want_path, case.parents[b], case.tokens[b], case.target_tokens[b])
    for f in Accept.FIELDS[:4]:  # accept_len first: a walk of the wrong length fails TA.2.1, not all after it
        assert_bit_exact(
            np.asarray(getattr(got, f)),
            getattr(want, f),
            what=f,
            spec_id=tree_results.ACCEPT_FIELD_CLAUSE[f],
            context=ctx,
        )
    # the commit and the new length of its own walk (a wrong walk is the walk's clauses' failure)
    n = np.asarray(got.accept_len)
    assert_bit_exact(
        np.asarray(got.new_lens),
        (case.prefix_lens + 1 + n).astype(np.int32),
        what="new_lens",
        spec_id="TA.3.3",
        context=ctx,
    )
    tree_results.check_commit(
        mine.kv_cache, case.kv_cache, case.block_table, case.prefix_lens, np.asarray(got.accept_path), n, ctx
    )

"""tree_build's results against a known tree (the brute-force oracle's, or the reference's), clause by clause
(harness/verdict.py): the node count (TB.2.4), no -inf node (TB.2.5), the set of nodes as rank tuples (TB.2.3),
their order (TB.2.2), the scores (TB.2.1), the node fields (TB.2.6), the root (TB.2.7), the pad slots (TB.2.8)
and each layout (TB.3.1-TB.3.4). A tree popped in the wrong order fails TB.2.2 alone, not every field that
moved with it; a wrong layout of a right tree fails that layout's clause alone."""

from __future__ import annotations

import numpy as np

from contract import Tree, limits
from reference import oracles
from reference.tree_build import layouts

from . import verdict
from .compare import assert_bit_exact

# The clauses check_tree may fail: a test using it carries all of them.
CLAUSES: tuple[str, ...] = (
    "TB.2.1",
    "TB.2.2",
    "TB.2.3",
    "TB.2.4",
    "TB.2.5",
    "TB.2.6",
    "TB.2.7",
    "TB.2.8",
    "TB.3.1",
    "TB.3.2",
    "TB.3.3",
    "TB.3.4",
)
# A node's field and the clause stating it (for the nodes 1..n-1; slot 0 is TB.2.7's, the pads TB.2.8's).
NODE_FIELD_CLAUSE = {
    "parents": "TB.2.6",
    "depths": "TB.2.6",
    "tokens": "TB.2.6",
    "ranks": "TB.2.6",
    "scores": "TB.2.1",
    "positions": "TB.3.2",
    "first_child": "TB.3.3",
    "next_sibling": "TB.3.3",
}


def rank_tuples(parents: np.ndarray, ranks: np.ndarray, n: int) -> list:
    """Each node's rank tuple (root side first) by walking its parents; None where the parents do not lead to
    the root through earlier nodes (a malformed tree: its fields fail TB.2.6)."""
    out: list = []
    for i in range(1, n):
        t, j = [], i
        while j > 0:
            p = int(parents[j])
            if not 0 <= p < j:
                t = None
                break
            t.append(int(ranks[j]))
            j = p
        out.append(None if t is None else tuple(reversed(t)))
    return out


def oracle_tree(top_logp, top_ids, root_tokens, budget, prefix_lens=None, with_full_mask=False) -> Tree:
    """The brute-force oracle's tree (reference/oracles.py) with its layouts, padded like an output."""
    bs, B = len(root_tokens), int(budget)
    D = 1 + B
    prefix = np.zeros(bs, np.int32) if prefix_lens is None else np.asarray(prefix_lens)
    f = {
        "parents": np.full((bs, D), -1, np.int32),
        "depths": np.zeros((bs, D), np.int32),
        "tokens": np.repeat(np.asarray(root_tokens)[:, None], D, axis=1).astype(np.int32),
        "ranks": np.full((bs, D), -1, np.int32),
        "scores": np.full((bs, D), -np.inf),
    }
    f["scores"][:, 0] = 0.0
    n_nodes = np.ones(bs, np.int32)
    for b in range(bs):
        par, dep, tok, rk, sc = oracles.brute_force_tree(top_logp[b], top_ids[b], B)
        n = len(par)
        n_nodes[b] = 1 + n
        for name, v in (("parents", par), ("depths", dep), ("tokens", tok), ("ranks", rk), ("scores", sc)):
            f[name][b, 1 : 1 + n] = v
    vis, positions, fc, ns, full = layouts(f["parents"], f["depths"], n_nodes, prefix, bool(with_full_mask))
    return Tree(n_nodes, f["parents"], f["depths"], f["tokens"], f["ranks"], f["scores"], vis, positions, fc, ns, full)


def _slots(got: np.ndarray, want: np.ndarray, b: int, sl: slice, name: str, clause_id: str, ctx: dict) -> None:
    assert_bit_exact(got[b, sl], want[b, sl], what=f"{name}[{b}, {sl.start}:{sl.stop}]", spec_id=clause_id, context=ctx)


def check_tree(got, want: Tree, context: dict | None = None) -> None:
    """Every field of `got` equals `want`'s, each difference failing the clause it breaks (CLAUSES)."""
    ctx = dict(context or {})
    g = {f: np.asarray(getattr(got, f)) for f in Tree.FIELDS}
    w = {f: np.asarray(getattr(want, f)) for f in Tree.FIELDS}
    bs, D = w["parents"].shape
    for f in Tree.FIELDS[1:-1]:  # a field of the wrong shape or dtype is the clause's failure
        with verdict.clause(NODE_FIELD_CLAUSE.get(f, "TB.3.1")):
            assert g[f].shape == w[f].shape and g[f].dtype == w[f].dtype, (
                f"{f}: {g[f].dtype}{list(g[f].shape)}, expected {w[f].dtype}{list(w[f].shape)}"
            )
    assert_bit_exact(g["n_nodes"], w["n_nodes"], what="n_nodes", spec_id="TB.2.4", context=ctx)
    for b in range(bs):
        n = int(w["n_nodes"][b])
        c = {**ctx, "request": b}
        verdict.expect(
            not np.isneginf(g["scores"][b, 1:n]).any(), "TB.2.5", f"request {b}: a -inf candidate was selected {c}"
        )
        got_t = rank_tuples(g["parents"][b], g["ranks"][b], n)
        want_t = rank_tuples(w["parents"][b], w["ranks"][b], n)
        verdict.expect(None not in got_t, "TB.2.6", f"request {b}: a node's parent is not an earlier node {c}")
        missing = sorted(set(want_t) - set(got_t))[:3]
        extra = sorted(set(got_t) - set(want_t), key=str)[:3]
        verdict.expect(
            not missing and not extra,
            "TB.2.3",
            f"request {b}: not the top-B set: rank tuples {missing} missing, {extra} selected instead {c}",
        )
        if got_t != want_t:
            i = next(k for k, (x, y) in enumerate(zip(got_t, want_t, strict=True)) if x != y)
            sg, sw = float(g["scores"][b, i + 1]), float(w["scores"][b, i + 1])
            verdict.expect(
                False,
                "TB.2.2",
                f"request {b}: node {i + 1} is rank tuple {got_t[i]} (score {sg!r}), the total order puts "
                f"{want_t[i]} (score {sw!r}) there {c}",
            )
        verdict.passed("TB.2.2")
        nodes = slice(1, n)
        for f in ("scores", "parents", "depths", "tokens", "ranks", "positions", "first_child", "next_sibling"):
            _slots(g[f], w[f], b, nodes, f, NODE_FIELD_CLAUSE[f], c)
            for sl, clause_id in ((slice(0, 1), "TB.2.7"), (slice(n, D), "TB.2.8")):
                if f in ("first_child", "next_sibling") and clause_id == "TB.2.7":
                    clause_id = "TB.3.3"  # the root's first child is a link like any other
                _slots(g[f], w[f], b, sl, f, "TB.3.2" if f == "positions" and clause_id == "TB.2.7" else clause_id, c)
        vis_g, vis_w = g["visibility"][b], w["visibility"][b]
        assert_bit_exact(vis_g[:n], vis_w[:n], what=f"visibility[{b}, :{n}]", spec_id="TB.3.1", context=c)
        assert_bit_exact(vis_g[n:], vis_w[n:], what=f"visibility[{b}, {n}:] (pads)", spec_id="TB.2.8", context=c)
    assert_bit_exact(g["full_mask"], w["full_mask"], what="full_mask", spec_id="TB.3.4", context=ctx)


# ------------------------------------------------------------------------------------------- tree_accept
ACCEPT_FIELD_CLAUSE = {
    "accept_len": "TA.2.1",
    "accept_path": "TA.2.3",
    "emitted": "TA.2.3",
    "bonus": "TA.2.3",
    "new_lens": "TA.3.3",
}


def check_walk(got, b: int, want, parents, tokens, target) -> None:
    """Request b's walk step by step against the path `want` (root first): the first step where it leaves it
    fails TA.2.2 when it took a later sibling with the target token, TA.2.1 otherwise (a node that does not
    match, or a stop while a child matched). `parents`, `tokens`, `target`: the request's rows."""
    n = int(got.accept_len[b])
    path = np.asarray(got.accept_path[b])
    for j in range(1, max(len(want), n + 1)):
        o = int(want[j]) if j < len(want) else -1
        g = int(path[j]) if j <= n and j < len(path) else -1
        if g == o:
            continue
        u = int(want[j - 1])
        later = 0 <= g < len(parents) and parents[g] == u and tokens[g] == target[u]
        where = f"request {b} step {j} from node {u}: went to {g}, the walk goes to {o}"
        verdict.expect(not later, "TA.2.2", f"{where} (a later sibling with the same token)")
        verdict.expect(False, "TA.2.1", where)
    verdict.passed("TA.2.1")


def check_commit(after, before, block_table, prefix_lens, accept_path, accept_len, context=None) -> None:
    """The commit of the implementation's own walk: rows prefix + j <- prefix + path[j] for j = 1..accept_len,
    sequentially in increasing j (TA.3.1), every other row of the cache untouched (TA.3.2). Against the
    implementation's own path, so that a wrong walk fails the walk's clauses and not these."""
    want = np.array(before)
    ps = want.shape[1]
    written = np.zeros(want.shape[:2], bool)
    for b in range(len(prefix_lens)):
        P = int(prefix_lens[b])
        for j in range(1, int(accept_len[b]) + 1):
            s, d = P + int(accept_path[b, j]), P + j
            want[block_table[b, d // ps], d % ps] = want[block_table[b, s // ps], s % ps]
            written[block_table[b, d // ps], d % ps] = True
    after = np.asarray(after)
    ctx = dict(context or {})
    assert_bit_exact(after[written], want[written], what="kv_cache (rows written)", spec_id="TA.3.1", context=ctx)
    assert_bit_exact(after[~written], want[~written], what="kv_cache (other rows)", spec_id="TA.3.2", context=ctx)


# ------------------------------------------------------------------------------------------- tree_verify
def check_verified_shapes(q: np.ndarray, got, out_clause: str, lse_clause: str) -> None:
    """tree_verify's result: out [bs, Q, H, 512] in q's dtype (the out clause's failure when not), lse float32
    [bs, Q, H] (the lse clause's)."""
    want_out = [*q.shape[:3], limits.LATENT]
    verdict.expect(got.out.dtype == q.dtype and list(got.out.shape) == want_out, out_clause,
                   f"out {got.out.dtype}{list(got.out.shape)}, expected {q.dtype}{want_out}")  # fmt: skip
    verdict.expect(got.lse.dtype == np.float32 and got.lse.shape == q.shape[:3], lse_clause,
                   f"lse {got.lse.dtype}{list(got.lse.shape)}, expected float32{list(q.shape[:3])}")  # fmt: skip

"""Reference DDTree tree build (spec/tree_build.md): the best-first heap of the DDTree reference, batched.

Per request: candidates are rank tuples; a candidate's score is a float64 path sum computed by the
reference's own recursion (first child `s + lp[d][0]`, next sibling `(s - lp[d-1][r]) + lp[d-1][r+1]`,
the first node `float(lp[0][0])`); candidates are popped in the total order (score descending, rank tuple
ascending) B times; candidates whose score is -inf are never pushed. Node i of the output is the i-th
pop (index 0 = root), so parents come before children and siblings appear in rank order.
The layouts are derived from the parent array by `layouts()`.
"""

from __future__ import annotations

import heapq

import numpy as np

from contract import TREE_BUILD, Tree
from contract.trees import unpack_visibility

NEG_INF = float("-inf")


# The three arithmetic steps of the DDTree reference, kept as functions so that the order of operations
# is stated once (and so that mutation tests can replace them).
def first_score(lp0: float) -> float:
    return float(lp0)


def child_score(s: float, lp_child0: float) -> float:
    return s + float(lp_child0)


def sibling_score(s: float, lp_r: float, lp_r1: float) -> float:
    return (s - float(lp_r)) + float(lp_r1)


def selectable(score: float) -> bool:
    """TB.2.5: a -inf candidate is never pushed (its successors would compute -inf - -inf = NaN)."""
    return score != NEG_INF


def heap_key(score: float, ranks: tuple) -> tuple:
    """Total order: score descending, then rank tuple lexicographically ascending."""
    return (-score, ranks)


def build_one(lp: np.ndarray, ids: np.ndarray, budget: int):
    """One request, exactly as the DDTree reference's heap (also the 'Python heapq' CPU baseline).

    Returns lists (parents, depths, tokens, ranks, scores) for the B non-root nodes in pop order.
    """
    L, K_in = lp.shape
    K = min(budget, K_in)
    parents: list[int] = []
    depths: list[int] = []
    tokens: list[int] = []
    ranks: list[int] = []
    scores: list[float] = []
    if budget == 0 or L == 0 or K == 0:
        return parents, depths, tokens, ranks, scores
    heap: list[tuple] = []
    s0 = first_score(lp[0, 0])
    if selectable(s0):
        heap.append((heap_key(s0, (0,)), 0, 1, 0, s0, (0,)))
    while heap and len(parents) < budget:
        _, parent, depth, rank, s, key_ranks = heapq.heappop(heap)
        i = len(parents) + 1
        parents.append(parent)
        depths.append(depth)
        tokens.append(int(ids[depth - 1, rank]))
        ranks.append(rank)
        scores.append(s)
        if rank + 1 < K:
            s2 = sibling_score(s, lp[depth - 1, rank], lp[depth - 1, rank + 1])
            if selectable(s2):
                sib = key_ranks[:-1] + (rank + 1,)
                heapq.heappush(heap, (heap_key(s2, sib), parent, depth, rank + 1, s2, sib))
        if depth < L:
            s3 = child_score(s, lp[depth, 0])
            if selectable(s3):
                child = key_ranks + (0,)
                heapq.heappush(heap, (heap_key(s3, child), i, depth + 1, 0, s3, child))
    return parents, depths, tokens, ranks, scores


def layouts(
    parents: np.ndarray, depths: np.ndarray, n_nodes: np.ndarray, prefix_lens: np.ndarray, with_full_mask: bool = False
):
    """Visibility bitmask, positions, first_child/next_sibling and FULL_MASK (empty unless asked) from a
    padded parent array. Pads (index >= n_nodes) see the root and themselves, are seen by nobody and are
    never linked."""
    bs, D = parents.shape
    W = (D + 31) // 32
    vis = np.zeros((bs, D, W), np.uint32)
    first_child = np.full((bs, D), -1, np.int32)
    next_sibling = np.full((bs, D), -1, np.int32)
    for b in range(bs):
        last_child = np.full(D, -1, np.int64)
        for i in range(D):
            if i == 0 or i >= n_nodes[b]:
                row = vis[b, 0].copy() if i else np.zeros(W, np.uint32)
            else:
                p = parents[b, i]
                row = vis[b, p].copy()
                if last_child[p] < 0:
                    first_child[b, p] = i
                else:
                    next_sibling[b, last_child[p]] = i
                last_child[p] = i
            row[i // 32] |= np.uint32(1 << (i % 32))
            vis[b, i] = row
    positions = (prefix_lens[:, None].astype(np.int64) + depths).astype(np.int32)
    full = np.zeros(0, bool)
    if with_full_mask:
        bits = unpack_visibility(vis, D)
        blocks = [np.concatenate([np.ones((D, int(prefix_lens[b])), bool), bits[b]], axis=1) for b in range(bs)]
        full = np.concatenate([blk.reshape(-1) for blk in blocks])
    return vis, positions, first_child, next_sibling, full


@TREE_BUILD.implements
def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
    """numpy reference of tree_build: the DDTree reference's heap, request by request."""
    checked = TREE_BUILD.validate_host(
        top_logp, top_ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask
    )
    prefix_lens = checked.args["prefix_lens"]
    bs, B, D = checked.bs, checked.B, checked.D
    parents = np.full((bs, D), -1, np.int32)
    depths = np.zeros((bs, D), np.int32)
    tokens = np.repeat(root_tokens[:, None], D, axis=1).astype(np.int32)
    ranks = np.full((bs, D), -1, np.int32)
    scores = np.full((bs, D), NEG_INF, np.float64)
    scores[:, 0] = 0.0
    n_nodes = np.ones(bs, np.int32)
    for b in range(bs):
        p, d, t, r, s = build_one(top_logp[b], top_ids[b], B)
        n = len(p)
        n_nodes[b] = 1 + n
        parents[b, 1 : 1 + n], depths[b, 1 : 1 + n], tokens[b, 1 : 1 + n] = p, d, t
        ranks[b, 1 : 1 + n], scores[b, 1 : 1 + n] = r, s
    vis, positions, fc, ns, full = layouts(parents, depths, n_nodes, prefix_lens, with_full_mask)
    return Tree(n_nodes, parents, depths, tokens, ranks, scores, vis, positions, fc, ns, full)

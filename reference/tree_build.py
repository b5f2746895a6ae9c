"""Reference DDTree tree build (spec/tree_build.md): the best-first heap of the DDTree reference, batched.

Per request: candidates are rank tuples; a candidate's score is a float64 path sum computed by the
reference's own recursion (first child `s + lp[d][0]`, next sibling `(s - lp[d-1][r]) + lp[d-1][r+1]`,
the first node `float(lp[0][0])`); candidates are popped in the total order (score descending, rank tuple
ascending) B times; candidates whose score is -inf are never pushed. Node i of the output is the i-th
pop (index 0 = root), so parents come before children and siblings appear in rank order.
The layouts are derived from the parent array by `layouts()`, which the CUDA wrapper's tests reuse.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np

from . import validate as v

NEG_INF = float("-inf")


@dataclasses.dataclass
class Tree:
    """Outputs of tree_build; every array is [bs, 1+B] except where noted."""

    n_nodes: np.ndarray  # int32 [bs], including the root
    parents: np.ndarray  # int32, root and pads -1
    depths: np.ndarray  # int32, root and pads 0
    tokens: np.ndarray  # int32, root = root token, pads = root token
    ranks: np.ndarray  # int32, rank at the node's own depth; root and pads -1
    scores: np.ndarray  # float64, root 0.0, pads -inf
    visibility: np.ndarray  # uint32 [bs, 1+B, ceil((1+B)/32)], bit j of row i: j is i or an ancestor of i
    positions: np.ndarray  # int32, prefix_len + depth
    first_child: np.ndarray  # int32, -1 = none
    next_sibling: np.ndarray  # int32, -1 = none; siblings in ascending index
    full_mask: np.ndarray  # bool, flat: per request a row-major [1+B, prefix_len + 1+B] block, concatenated

    FIELDS = (
        "n_nodes",
        "parents",
        "depths",
        "tokens",
        "ranks",
        "scores",
        "visibility",
        "positions",
        "first_child",
        "next_sibling",
        "full_mask",
    )


def validate_inputs(top_logp, top_ids, root_tokens, budget, prefix_lens) -> tuple[int, int, int, int]:
    """TB.1: shapes, dtypes, ranges, sorted rows, distinct ids, no NaN, budget limits. Returns bs, L, K_in, B."""
    v.array("top_logp", top_logp, (np.float32,), 3)
    bs, L, K_in = top_logp.shape
    if not 1 <= bs <= v.MAX_BATCH:
        v.fail("top_logp", f"batch size {bs} is outside 1..{v.MAX_BATCH}")
    if L > v.MAX_DEPTH:
        v.fail("top_logp", f"depth L={L} is more than {v.MAX_DEPTH}")
    if K_in > v.MAX_TOPK:
        v.fail("top_logp", f"K_in={K_in} is more than {v.MAX_TOPK}")
    v.array("top_ids", top_ids, (np.int32,), 3)
    v.shape("top_ids", top_ids, top_logp.shape)
    v.array("root_tokens", root_tokens, (np.int32,), 1)
    v.shape("root_tokens", root_tokens, (bs,))
    B = v.integer("budget", budget, 0, v.MAX_BUDGET)
    v.array("prefix_lens", prefix_lens, (np.int32,), 1)
    v.shape("prefix_lens", prefix_lens, (bs,))
    if np.isnan(top_logp).any():
        v.fail("top_logp", f"NaN at {v.first_bad(np.isnan(top_logp))}")
    if (top_logp > 0).any():
        v.fail("top_logp", f"log-prob > 0 at {v.first_bad(top_logp > 0)} (values must be <= 0 or -inf)")
    if K_in > 1 and (top_logp[:, :, 1:] > top_logp[:, :, :-1]).any():
        b, d, r = v.first_bad(top_logp[:, :, 1:] > top_logp[:, :, :-1])
        v.fail("top_logp", f"row [{b}, {d}] is not non-increasing at rank {r + 1}")
    if (top_ids < 0).any():
        v.fail("top_ids", f"negative token id at {v.first_bad(top_ids < 0)}")
    if K_in > 1:
        s = np.sort(top_ids, axis=-1)
        dup = s[:, :, 1:] == s[:, :, :-1]
        if dup.any():
            b, d, _ = v.first_bad(dup)
            v.fail("top_ids", f"row [{b}, {d}] has duplicate token ids")
    if (root_tokens < 0).any():
        v.fail("root_tokens", f"negative token id at {v.first_bad(root_tokens < 0)}")
    if (prefix_lens < 0).any():
        v.fail("prefix_lens", f"negative length at {v.first_bad(prefix_lens < 0)}")
    return bs, L, K_in, B


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
    parents, depths, tokens, ranks, scores = [], [], [], [], []
    if budget == 0 or L == 0 or K == 0:
        return parents, depths, tokens, ranks, scores
    heap = []
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


def layouts(parents: np.ndarray, depths: np.ndarray, n_nodes: np.ndarray, prefix_lens: np.ndarray):
    """Visibility bitmask, positions, first_child/next_sibling and FULL_MASK from a padded parent array.

    Pads (index >= n_nodes) see the root and themselves, are seen by nobody and are never linked.
    """
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
    bits = unpack_visibility(vis, D)
    full = [np.concatenate([np.ones((D, int(prefix_lens[b])), bool), bits[b]], axis=1).reshape(-1) for b in range(bs)]
    return vis, positions, first_child, next_sibling, np.concatenate(full) if full else np.zeros(0, bool)


def unpack_visibility(vis: np.ndarray, D: int) -> np.ndarray:
    """uint32 little-endian bit words [..., D, W] -> bool [..., D, D]."""
    bytes_le = vis.astype("<u4").view(np.uint8)
    return np.unpackbits(bytes_le, axis=-1, bitorder="little")[..., :D].astype(bool)


def default_prefix_lens(root_tokens, prefix_lens):
    """prefix_lens is optional: without it every request's tree starts at position 0."""
    if prefix_lens is None and isinstance(root_tokens, np.ndarray) and root_tokens.ndim == 1:
        return np.zeros(root_tokens.shape, np.int32)
    return prefix_lens


def tree_build(
    top_logp: np.ndarray,
    top_ids: np.ndarray,
    root_tokens: np.ndarray,
    budget: int,
    prefix_lens: np.ndarray | None = None,
) -> Tree:
    prefix_lens = default_prefix_lens(root_tokens, prefix_lens)
    bs, _L, _K_in, B = validate_inputs(top_logp, top_ids, root_tokens, budget, prefix_lens)
    D = 1 + B
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
    vis, positions, fc, ns, full = layouts(parents, depths, n_nodes, prefix_lens)
    return Tree(n_nodes, parents, depths, tokens, ranks, scores, vis, positions, fc, ns, full)

"""Reference greedy tree accept and KV commit (spec/tree_accept.md).

Walk from the root over first_child/next_sibling: at node u, scan u's children in list order and follow
the first one whose token equals target_tokens[u]; stop when none does. accept_len counts accepted
drafts (root excluded); accept_path lists node indices, root first; emitted is the accepted draft tokens
then the bonus token target_tokens[last]; both are -1 padded to 1 + max_depth.
Commit: for j = 1..accept_len, latent row prefix_len + j <- row prefix_len + path[j], in place and in
increasing j (which equals a gather, since path[j] >= j); other rows untouched.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import validate as v
from .tree_verify import BF16, cache_rows


@dataclasses.dataclass
class Accept:
    accept_len: np.ndarray  # int32 [bs]
    accept_path: np.ndarray  # int32 [bs, 1 + max_depth]
    emitted: np.ndarray  # int32 [bs, 1 + max_depth]
    bonus: np.ndarray  # int32 [bs]
    new_lens: np.ndarray  # int32 [bs] = prefix_len + 1 + accept_len

    FIELDS = ("accept_len", "accept_path", "emitted", "bonus", "new_lens")


def validate_inputs(tokens, first_child, next_sibling, target_tokens, max_depth, kv_cache, block_table, prefix_lens):
    v.array("tokens", tokens, (np.int32,), 2)
    bs, D = tokens.shape
    if not 1 <= bs <= v.MAX_BATCH or not 1 <= D <= 1 + v.MAX_BUDGET:
        v.fail("tokens", f"shape {tokens.shape}: batch must be 1..{v.MAX_BATCH}, tree width 1..{1 + v.MAX_BUDGET}")
    for arg, a in (("first_child", first_child), ("next_sibling", next_sibling), ("target_tokens", target_tokens)):
        v.array(arg, a, (np.int32,), 2)
        v.shape(arg, a, (bs, D))
    L = v.integer("max_depth", max_depth, 0, v.MAX_DEPTH)
    if (next_sibling[:, 0] != -1).any():
        v.fail("next_sibling", f"root of request {int(np.argmax(next_sibling[:, 0] != -1))} has a sibling")
    v.tree_links("first_child", first_child, "next_sibling", next_sibling)
    depth = tree_depths(first_child, next_sibling)
    if (depth > L).any():
        b, u = v.first_bad(depth > L)
        v.fail("first_child", f"request {b} node {u} is at depth {int(depth[b, u])} > max_depth {L}")
    if kv_cache is not None or block_table is not None or prefix_lens is not None:
        if kv_cache is None or block_table is None or prefix_lens is None:
            v.fail("kv_cache", "the commit needs kv_cache, block_table and prefix_lens together")
        v.array("kv_cache", kv_cache, (np.float32, BF16), 3)
        validate_commit(
            kv_cache.shape, kv_cache.flags.writeable and kv_cache.flags.c_contiguous, block_table, prefix_lens, bs, D
        )
    return bs, D, L


def validate_commit(kv_shape: tuple, in_place_ok: bool, block_table, prefix_lens, bs: int, D: int) -> None:
    """TA.1.1/TA.1.3 for the commit; takes the cache's shape so device caches are checked without a copy."""
    if kv_shape[2] != v.HEAD_DIM:
        v.fail("kv_cache", f"shape {tuple(kv_shape)}, expected [num_pages, page_size, {v.HEAD_DIM}]")
    if not in_place_ok:
        v.fail("kv_cache", "must be a writeable C-contiguous array (the commit is in place)")
    v.array("block_table", block_table, (np.int32,), 2)
    if block_table.shape[0] != bs:
        v.fail("block_table", f"shape {block_table.shape}, expected [{bs}, max_pages]")
    v.array("prefix_lens", prefix_lens, (np.int32,), 1)
    v.shape("prefix_lens", prefix_lens, (bs,))
    if (prefix_lens < 0).any():
        v.fail("prefix_lens", f"negative length at {v.first_bad(prefix_lens < 0)}")
    v.paged_rows(kv_shape, block_table, prefix_lens, D)


def tree_depths(first_child, next_sibling) -> np.ndarray:
    """Depth of every node reachable from the root (links point forward, so one pass in index order)."""
    bs, D = first_child.shape
    depth = np.zeros((bs, D), np.int64)
    for b in range(bs):
        for u in range(D):
            c = first_child[b, u]
            while c != -1:
                depth[b, c] = depth[b, u] + 1
                c = next_sibling[b, c]
    return depth


def matching_child(tokens_b, first_child_b, next_sibling_b, u: int, want: int) -> int:
    """The first child of u, in list order, whose token is `want`; -1 when none is."""
    c = first_child_b[u]
    while c != -1:
        if tokens_b[c] == want:
            return int(c)
        c = next_sibling_b[c]
    return -1


def walk(tokens, first_child, next_sibling, target_tokens, max_depth: int) -> Accept:
    bs, _D = tokens.shape
    path = np.full((bs, 1 + max_depth), -1, np.int32)
    emitted = np.full((bs, 1 + max_depth), -1, np.int32)
    accept_len = np.zeros(bs, np.int32)
    bonus = np.zeros(bs, np.int32)
    for b in range(bs):
        u, n = 0, 0
        path[b, 0] = 0
        while True:
            c = matching_child(tokens[b], first_child[b], next_sibling[b], u, target_tokens[b, u])
            if c < 0:
                break
            n += 1
            path[b, n] = c
            emitted[b, n - 1] = tokens[b, c]
            u = c
        accept_len[b] = n
        bonus[b] = target_tokens[b, u]
        emitted[b, n] = bonus[b]
    return Accept(accept_len, path, emitted, bonus, np.zeros(bs, np.int32))


def commit(kv_cache, block_table, prefix_lens, accept: Accept) -> None:
    """In place, increasing j, exactly one row copy per accepted draft."""
    for b in range(len(prefix_lens)):
        P = int(prefix_lens[b])
        for j in range(1, int(accept.accept_len[b]) + 1):
            src = cache_rows(kv_cache, block_table, b, np.array([P + accept.accept_path[b, j]]))
            dst_pos = P + j
            page_size = kv_cache.shape[1]
            kv_cache[block_table[b, dst_pos // page_size], dst_pos % page_size] = src[0]


def tree_accept(
    tokens,
    first_child,
    next_sibling,
    target_tokens,
    *,
    max_depth: int,
    kv_cache=None,
    block_table=None,
    prefix_lens=None,
) -> Accept:
    validate_inputs(tokens, first_child, next_sibling, target_tokens, max_depth, kv_cache, block_table, prefix_lens)
    acc = walk(tokens, first_child, next_sibling, target_tokens, max_depth)
    if kv_cache is not None:
        commit(kv_cache, block_table, prefix_lens, acc)
        acc.new_lens = (prefix_lens + 1 + acc.accept_len).astype(np.int32)
    else:
        acc.new_lens = (1 + acc.accept_len).astype(np.int32)
    return acc

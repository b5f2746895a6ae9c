"""Reference greedy tree accept and KV commit (spec/tree_accept.md).

Walk from the root over first_child/next_sibling: at node u, scan u's children in list order and follow
the first one whose token equals target_tokens[u]; stop when none does. accept_len counts accepted
drafts (root excluded); accept_path lists node indices, root first; emitted is the accepted draft tokens
then the bonus token target_tokens[last]; both are -1 padded to 1 + max_depth.
Commit: for j = 1..accept_len, latent row prefix_len + j <- row prefix_len + path[j], in place and in
increasing j (which equals a gather, since path[j] >= j); other rows untouched.
"""

from __future__ import annotations

import numpy as np

from contract import TREE_ACCEPT, Accept
from contract.paged import cache_rows


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
    page_size = kv_cache.shape[1]
    for b in range(len(prefix_lens)):
        P = int(prefix_lens[b])
        for j in range(1, int(accept.accept_len[b]) + 1):
            src = cache_rows(kv_cache, block_table, b, np.array([P + accept.accept_path[b, j]]))
            dst_pos = P + j
            kv_cache[block_table[b, dst_pos // page_size], dst_pos % page_size] = src[0]


@TREE_ACCEPT.implements
def tree_accept(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
):
    """numpy reference of tree_accept: the greedy walk over the link lists, then the commit in increasing j."""
    checked = TREE_ACCEPT.validate_host(
        tokens,
        first_child,
        next_sibling,
        target_tokens,
        max_depth=max_depth,
        kv_cache=kv_cache,
        block_table=block_table,
        prefix_lens=prefix_lens,
    )
    acc = walk(tokens, first_child, next_sibling, target_tokens, checked.args["max_depth"])
    if kv_cache is not None:
        commit(kv_cache, block_table, prefix_lens, acc)
        acc.new_lens = (prefix_lens + 1 + acc.accept_len).astype(np.int32)
    else:
        acc.new_lens = (1 + acc.accept_len).astype(np.int32)
    return acc

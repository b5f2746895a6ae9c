"""The outsider's op functions, written from docs/ADAPTERS.md and the spec alone: numpy, host arrays, each
checking its inputs with the contract's host validator before any work. `Bugs` plants one mistake at a time
(each a factory's argument, so the right code and the wrong copy differ in that one place only)."""

from __future__ import annotations

import dataclasses
import heapq

import ml_dtypes
import numpy as np

from contract import DRAFT_TOPK, TREE_ACCEPT, TREE_BUILD, TREE_VERIFY, Accept, TopK, Tree, Verified, limits

BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclasses.dataclass(frozen=True)
class Bugs:
    """Which mistake to plant (none by default)."""

    deep_ties: bool = False  # tree_build: score ties below depth 8 broken by the higher token id
    accept_one_short: bool = False  # tree_accept: never accepts a node at max_depth
    lse_top1024: bool = False  # draft_topk: log-sum-exp over the top 1,024 logits only
    neg_zero_first: bool = False  # draft_topk: -0.0 ranked before +0.0
    mask_bit31: bool = False  # tree_verify: bit 31 of each visibility word ignored
    bf16_via_fp16: bool = False  # draft_topk: bf16 logits converted to float16 first

    def describe(self) -> str:
        planted = [f.name for f in dataclasses.fields(self) if getattr(self, f.name)]
        return "planted: " + ", ".join(planted) if planted else "no planted bug"


# ------------------------------------------------------------------------------------------- tree_build
def _best_first(lp: np.ndarray, ids: np.ndarray, budget: int, deep_ties: bool) -> list[tuple]:
    """One request's nodes in pop order: (parent, depth, rank, score, token). A heap of candidates keyed by
    (score descending, rank tuple ascending); a popped node pushes its next sibling and its first child."""
    L, K_in = lp.shape
    K = min(budget, K_in)
    if budget == 0 or L == 0 or K == 0:
        return []

    def key(score, path):  # path: ((rank, token), ...) from depth 1
        tie = tuple(-t if deep_ties and d >= 8 else r for d, (r, t) in enumerate(path))
        return (-score, tie)

    heap: list[tuple] = []
    seq = 0

    def push(score, parent, depth, rank, path):
        nonlocal seq
        if score != -np.inf:  # a -inf candidate is never selected
            heapq.heappush(heap, (key(score, path), seq, parent, depth, rank, score, path))
            seq += 1

    push(float(lp[0, 0]), 0, 1, 0, ((0, int(ids[0, 0])),))
    out: list[tuple] = []
    while heap and len(out) < budget:
        _, _, parent, depth, rank, s, path = heapq.heappop(heap)
        out.append((parent, depth, rank, s, int(ids[depth - 1, rank])))
        me = len(out)
        if rank + 1 < K:
            s2 = (s - float(lp[depth - 1, rank])) + float(lp[depth - 1, rank + 1])
            push(s2, parent, depth, rank + 1, path[:-1] + ((rank + 1, int(ids[depth - 1, rank + 1])),))
        if depth < L:
            push(s + float(lp[depth, 0]), me, depth + 1, 0, path + ((0, int(ids[depth, 0])),))
    return out


def _layouts(parents, depths, n_nodes, prefix, with_full_mask):
    bs, D = parents.shape
    W = (D + 31) // 32
    bits = np.zeros((bs, D, D), bool)
    fc = np.full((bs, D), -1, np.int32)
    ns = np.full((bs, D), -1, np.int32)
    for b in range(bs):
        for i in range(D):
            if 0 < i < n_nodes[b]:
                p = parents[b, i]
                bits[b, i] = bits[b, p]
                kids = np.flatnonzero(parents[b, 1:i] == p) + 1  # earlier children of p
                if len(kids):
                    ns[b, kids[-1]] = i
                else:
                    fc[b, p] = i
            elif i:
                bits[b, i, 0] = True  # a pad sees the root (and itself)
            bits[b, i, i] = True
    padded = np.zeros((bs, D, W * 32), bool)
    padded[..., :D] = bits
    vis = np.packbits(padded.reshape(bs, D, W, 32), axis=-1, bitorder="little").view("<u4")[..., 0]
    positions = (prefix[:, None] + depths).astype(np.int32)
    full = np.zeros(0, bool)
    if with_full_mask:
        full = np.concatenate(
            [np.concatenate([np.ones((D, int(prefix[b])), bool), bits[b]], axis=1).reshape(-1) for b in range(bs)]
        )
    return vis.astype(np.uint32), positions, fc, ns, full


def tree_build(bugs: Bugs):
    @TREE_BUILD.implements
    def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
        """The DDTree best-first heap, request by request, and the layouts from the parents."""
        checked = TREE_BUILD.validate_host(
            top_logp, top_ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask
        )
        a = checked.args
        B, prefix = a["budget"], a["prefix_lens"].astype(np.int64)
        bs, D = top_logp.shape[0], 1 + a["budget"]
        parents = np.full((bs, D), -1, np.int32)
        depths = np.zeros((bs, D), np.int32)
        tokens = np.repeat(root_tokens[:, None], D, axis=1).astype(np.int32)
        ranks = np.full((bs, D), -1, np.int32)
        scores = np.full((bs, D), -np.inf)
        scores[:, 0] = 0.0
        n_nodes = np.ones(bs, np.int32)
        for b in range(bs):
            nodes = _best_first(top_logp[b], top_ids[b], B, bugs.deep_ties)
            n_nodes[b] = 1 + len(nodes)
            for i, (p, d, r, s, t) in enumerate(nodes, 1):
                parents[b, i], depths[b, i], ranks[b, i], scores[b, i], tokens[b, i] = p, d, r, s, t
        vis, positions, fc, ns, full = _layouts(parents, depths, n_nodes, prefix, a["with_full_mask"])
        return Tree(n_nodes, parents, depths, tokens, ranks, scores, vis, positions, fc, ns, full)

    return tree_build


# ------------------------------------------------------------------------------------------- tree_accept
def tree_accept(bugs: Bugs):
    @TREE_ACCEPT.implements
    def tree_accept(tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None,
                    prefix_lens=None):  # fmt: skip
        """The greedy walk (first matching child in list order), then the commit, j increasing."""
        commit = {"kv_cache": kv_cache, "block_table": block_table, "prefix_lens": prefix_lens}
        checked = TREE_ACCEPT.validate_host(
            tokens, first_child, next_sibling, target_tokens, max_depth=max_depth, **commit
        )
        L = checked.args["max_depth"]
        bs = tokens.shape[0]
        path = np.full((bs, 1 + L), -1, np.int32)
        emitted = np.full((bs, 1 + L), -1, np.int32)
        n = np.zeros(bs, np.int32)
        bonus = np.zeros(bs, np.int32)
        for b in range(bs):
            u, k = 0, 0
            path[b, 0] = 0
            while not (bugs.accept_one_short and k >= L - 1):
                c = int(first_child[b, u])
                while c != -1 and tokens[b, c] != target_tokens[b, u]:
                    c = int(next_sibling[b, c])
                if c == -1:
                    break
                k += 1
                path[b, k], emitted[b, k - 1], u = c, tokens[b, c], c
            n[b], bonus[b] = k, target_tokens[b, u]
            emitted[b, k] = bonus[b]
        new_lens = (1 + n).astype(np.int32)
        if kv_cache is not None:
            ps = kv_cache.shape[1]
            for b in range(bs):
                P = int(prefix_lens[b])
                for j in range(1, int(n[b]) + 1):
                    s, d = P + int(path[b, j]), P + j
                    kv_cache[block_table[b, d // ps], d % ps] = kv_cache[block_table[b, s // ps], s % ps]
            new_lens = (prefix_lens + 1 + n).astype(np.int32)
        return Accept(n, path, emitted, bonus, new_lens)

    return tree_accept


# ------------------------------------------------------------------------------------------- draft_topk
def draft_topk(bugs: Bugs):
    @DRAFT_TOPK.implements
    def draft_topk(logits, K):
        """Per row: ids by (logit descending, id ascending), log-probs = logit - float64 log-sum-exp."""
        checked = DRAFT_TOPK.validate_host(logits, K)
        K = checked.args["K"]
        if bugs.bf16_via_fp16 and logits.dtype == BF16:
            with np.errstate(over="ignore"):
                x = logits.astype(np.float32).astype(np.float16).astype(np.float64)
        else:
            x = logits.astype(np.float64)
        bs, L, V = x.shape
        top_logp = np.full((bs, L, K), -np.inf, np.float32)
        top_ids = np.zeros((bs, L, K), np.int32)
        for b in range(bs):
            for d in range(L):
                row = x[b, d] if bugs.neg_zero_first else x[b, d] + 0.0  # +0.0 merges the signed zeros
                if bugs.neg_zero_first:  # the sign bit as a tie-break: -0.0 first
                    order = np.lexsort((np.arange(V), ~np.signbit(row), -row))
                else:
                    order = np.argsort(-row, kind="stable")
                ids = order[:K]
                top_ids[b, d] = ids
                m = row[order[0]]
                if m == -np.inf:
                    continue  # a row of -inf only: every log-prob -inf
                summed = row[order[:1024]] if bugs.lse_top1024 else row
                log_sum = np.log(np.sum(np.exp(summed - m)))
                with np.errstate(over="ignore"):
                    top_logp[b, d] = ((row[ids] - m) - log_sum).astype(np.float32) + np.float32(0.0)
        return TopK(top_logp, top_ids)

    return draft_topk


# ------------------------------------------------------------------------------------------- tree_verify
def tree_verify(bugs: Bugs):
    @TREE_VERIFY.implements
    def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        """float64 attention per request over its prefix and tree rows, each query's scores of the rows it does
        not see replaced by -inf (selected away, never multiplied by a zero weight: a NaN there stays out)."""
        checked = TREE_VERIFY.validate_host(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
        bs, Q, H, _ = q.shape
        scale = float(np.float32(checked.args["softmax_scale"]))
        vis = np.asarray(visibility, np.uint32)
        if bugs.mask_bit31:
            vis = vis & np.uint32(0x7FFFFFFF)
        bits = np.unpackbits(vis.astype("<u4").view(np.uint8), axis=-1, bitorder="little")[..., :Q].astype(bool)
        ps = kv_cache.shape[1]
        out = np.empty((bs, Q, H, limits.LATENT))
        lse = np.empty((bs, Q, H))
        for b in range(bs):  # every query of the request at once, over the rows any of them sees
            P = int(prefix_lens[b])
            pos = np.arange(P + Q)
            keys = kv_cache[block_table[b, pos // ps], pos % ps].astype(np.float64)  # [P + Q, 576]
            sees = np.concatenate([np.ones((Q, P), bool), bits[b]], axis=1)  # [Q, P + Q]
            with np.errstate(invalid="ignore", over="ignore"):  # rows a query does not see are selected away
                s = (q[b].astype(np.float64) @ keys.T) * scale  # [Q, H, P + Q]
            s = np.where(sees[:, None, :], s, -np.inf)
            m = s.max(axis=2, keepdims=True)
            e = np.exp(s - m)
            total = e.sum(axis=2)
            lse[b] = m[..., 0] + np.log(total)
            values = np.where(sees.any(axis=0)[:, None], keys[:, : limits.LATENT], 0.0)  # a row no query sees: 0
            out[b] = (e @ values) / total[..., None]
        return Verified(out.astype(np.float32).astype(q.dtype), lse.astype(np.float32))

    return tree_verify

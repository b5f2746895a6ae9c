"""Independent oracles the references are checked against (used by tests only).

- `brute_force_tree`: enumerate every rank tuple of S_K up to depth L, score it by the predecessor
  recursion, sort by (score desc, ranks asc), take the first B that are not -inf.
- `parent_walk`: greedy walk over a parent array with per-node token->child maps (first index wins),
  independent of the first_child/next_sibling lists.
- `ancestor_closure`: visibility as a dense bool matrix from parents.
- `non_absorbed_attention`: MLA with W_UK/W_UV expanded per head, in float64.
- `chain_attention`: one query over an explicit ordered key list (the branch-decomposition oracle).
- `topk_log_probs`: draft_topk by a Python sort of (-logit, id) pairs and an exactly summed (math.fsum)
  log-sum-exp, log-probs in float64 (not rounded to float32).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

NEG_INF = float("-inf")


def brute_force_tree(lp: np.ndarray, ids: np.ndarray, budget: int):
    L, K_in = lp.shape
    K = min(budget, K_in)
    if budget == 0 or L == 0 or K == 0:
        return [], [], [], [], []
    score: dict[tuple, float] = {}
    for d in range(1, L + 1):
        for rho in itertools.product(range(K), repeat=d):
            r = rho[-1]
            if rho == (0,):
                s = float(lp[0, 0])
            elif r > 0:
                prev = score[rho[:-1] + (r - 1,)]
                s = NEG_INF if prev == NEG_INF else (prev - float(lp[d - 1, r - 1])) + float(lp[d - 1, r])
            else:
                prev = score[rho[:-1]]
                s = NEG_INF if prev == NEG_INF else prev + float(lp[d - 1, 0])
            score[rho] = s
    chosen = sorted((rho for rho, s in score.items() if s != NEG_INF), key=lambda rho: (-score[rho], rho))[:budget]
    index = {rho: i + 1 for i, rho in enumerate(chosen)}
    parents = [index.get(rho[:-1], 0) if len(rho) > 1 else 0 for rho in chosen]
    assert all(len(rho) == 1 or rho[:-1] in index for rho in chosen), "top-B set is not prefix-closed"
    return (
        parents,
        [len(rho) for rho in chosen],
        [int(ids[len(rho) - 1, rho[-1]]) for rho in chosen],
        [rho[-1] for rho in chosen],
        [score[rho] for rho in chosen],
    )


def candidate_count(L: int, K: int) -> int:
    return sum(K**d for d in range(1, L + 1))


def ancestor_closure(parents: np.ndarray, n_nodes: int) -> np.ndarray:
    """Dense [D, D] ancestor-or-self matrix; pads (i >= n_nodes) see the root and themselves."""
    D = len(parents)
    vis = np.zeros((D, D), bool)
    for i in range(D):
        if i >= n_nodes:
            vis[i, [0, i]] = True
            continue
        j = i
        while j != -1:
            vis[i, j] = True
            j = parents[j]
    return vis


def parent_walk(parents: np.ndarray, tokens: np.ndarray, target: np.ndarray, n_nodes: int):
    """Returns (path, bonus) for one request."""
    child_map: list[dict[int, int]] = [dict() for _ in range(len(parents))]
    for i in range(1, n_nodes):
        child_map[parents[i]].setdefault(int(tokens[i]), i)
    path, u = [0], 0
    while int(target[u]) in child_map[u]:
        u = child_map[u][int(target[u])]
        path.append(u)
    return path, int(target[u])


def non_absorbed_attention(q_nope, q_pe, c_kv, k_pe, w_uk, w_uv, scale, visible_rows):
    """float64 MLA without absorption for one query token.

    q_nope [H, 128], q_pe [H, 64], c_kv [N, 512], k_pe [N, 64], w_uk [H, 128, 512], w_uv [H, 512, 128];
    visible_rows: the row indices this query sees. Returns [H, 128].
    """
    H = q_nope.shape[0]
    out = np.empty((H, w_uv.shape[2]))
    c, kp = c_kv[visible_rows].astype(np.float64), k_pe[visible_rows].astype(np.float64)
    for h in range(H):
        k_nope = c @ w_uk[h].T.astype(np.float64)  # [n, 128]
        val = c @ w_uv[h].astype(np.float64)  # [n, 128]
        s = (k_nope @ q_nope[h].astype(np.float64) + kp @ q_pe[h].astype(np.float64)) * scale
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ val
    return out


def chain_attention(q_row, keys, scale):
    """float64 attention of one query [H, 576] over keys [n, 576]; returns ([H, 512], lse [H])."""
    k = keys.astype(np.float64)
    s = (q_row.astype(np.float64) @ k.T) * scale
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    l = e.sum(axis=1, keepdims=True)
    return (e / l) @ k[:, :512], (m + np.log(l))[:, 0]


def topk_log_probs(logits: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 log-probs [bs, L, K] and int64 ids [bs, L, K] of logits [bs, L, V] (any float dtype): each row's
    ids sorted by the pair (-logit, id) in Python (-0.0 == 0.0 there), the log-sum-exp m + log(fsum(exp(x - m)))
    with m the row's largest logit; -inf logits give -inf, an all -inf row gives -inf throughout."""
    x = np.asarray(logits).astype(np.float64)
    bs, L, _V = x.shape
    lp = np.empty((bs, L, K))
    ids = np.empty((bs, L, K), np.int64)
    for b in range(bs):
        for d in range(L):
            row = [float(v) for v in x[b, d]]
            order = sorted(range(len(row)), key=lambda v: (-row[v], v))[:K]
            m = max(row)
            log_sum = 0.0 if m == NEG_INF else math.log(math.fsum(math.exp(v - m) for v in row))
            ids[b, d] = order
            lp[b, d] = [NEG_INF if m == NEG_INF or row[v] == NEG_INF else (row[v] - m) - log_sum for v in order]
    return lp, ids

"""The deterministic test drafter: the target's own greedy continuation, perturbed with seeded noise.

Each round starts from a root token at position P. The drafter runs the target greedily for L steps
from the root and takes the logits t_d it produced at each depth d = 1..L (t_1 is the target's own
distribution after the root, so an unperturbed drafter would always be right). It perturbs them,

    z_d[v] = t_d[v] / temperature + noise · n(seed, P, d, v)            (float64)

with n a counter-based approximately-normal variate (below), rounds z_d to float32, and keeps its top K
with the draft_topk op (reference/draft_topk.py): ranked by (logit descending, token id ascending), log-probs
z − logsumexp(z) rounded to float32: tree_build's `top_logp`, `top_ids`. The ranking is by logit, as the op's
must be (spec/draft_topk.md DT.2.5); the engine's drafter calls the engine's draft_topk on the same float32
logits.
Larger `noise` moves the target's greedy token off rank 0 more often: acceptance becomes partial and the
accepted path leaves the first-ranked branch, while lower noise makes the tree a deep chain. As with a
block-diffusion drafter, depth d's candidates do not depend on which branch a tree node is on.

n(seed, P, d, v) is the same bits in numpy and in the engine (engine/src/drafter.cpp): splitmix64 keys
and four 53-bit uniforms, summed in this order in float64 (an Irwin-Hall variate scaled to variance 1).
"""

from __future__ import annotations

import numpy as np

from .draft_topk import draft_topk as _draft_topk_op

MASK = (1 << 64) - 1
SQRT3 = 1.7320508075688772  # the float64 nearest sqrt(3), written out so both languages use these bits


def splitmix64(x):
    """splitmix64 on Python ints or uint64 arrays (wrapping arithmetic)."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore"):
            z = x + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return z ^ (z >> np.uint64(31))
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def noise(seed: int, P: int, d: int, vocab: int) -> np.ndarray:
    """n(seed, P, d, v) for v in 0..vocab-1, float64, mean 0 and variance 1."""
    key = splitmix64(splitmix64(splitmix64(seed & MASK) ^ (P & MASK)) ^ (d & MASK))
    base = np.uint64(key) ^ (np.arange(vocab, dtype=np.uint64) * np.uint64(4))
    u = [(splitmix64(base ^ np.uint64(j)) >> np.uint64(11)).astype(np.float64) * 2.0**-53 for j in range(4)]
    return (((u[0] + u[1]) + u[2]) + u[3] - 2.0) * SQRT3


def draft_topk(logits: np.ndarray, P: int, K: int, *, seed: int, noise_scale: float, temperature: float):
    """Target logits [L, V] (depths 1..L of the greedy continuation from the root at position P) ->
    (top_logp float32 [L, K], top_ids int32 [L, K])."""
    L, V = logits.shape
    z = np.empty((1, L, V), np.float32)
    for d in range(1, L + 1):
        z[0, d - 1] = logits[d - 1].astype(np.float64) / temperature + noise_scale * noise(seed, P, d, V)
    top = _draft_topk_op(z, K)
    return top.top_logp[0], top.top_ids[0]

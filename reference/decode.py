"""Golden greedy decoding with reference/model.py, one prompt at a time.

`generate_ar`: plain autoregressive decoding with the model's own numpy attention over an unpaged cache.
`generate_ddtree`: DDTree rounds through the reference ops: the drafter (reference/drafter.py) runs the
target `depth` steps ahead, `tree_build` makes the tree, the target runs every tree node at once with
`tree_verify` as its attention (positions prefix + depth, the tree's visibility), and `tree_accept`
walks the target's greedy tokens and commits the accepted rows of every layer's cache.
Both start the same way: the prompt's first n-1 tokens fill the cache, its last token is the first root.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .drafter import draft_topk
from .model import Model, attend_latent
from .tree_accept import tree_accept
from .tree_build import tree_build
from .tree_verify import tree_verify


@dataclasses.dataclass
class Run:
    tokens: np.ndarray  # int32 [max_new]
    cache: np.ndarray  # float32 [n_layers, committed rows, 576]
    margins: np.ndarray | None = None  # AR: top-1 minus top-2 logit of every generated token
    accept_lens: np.ndarray | None = None  # DDTree: drafts accepted per round


def _step(model: Model, cache: np.ndarray, tokens, pos: int) -> np.ndarray:
    """One token per request, all at position `pos`: writes their rows into cache [bs, layers, T, 576]
    and returns their logits [bs, V] (AR attention over positions 0..pos of each request)."""
    scale = model.cfg.softmax_scale

    def attend(layer, q, rows):
        cache[:, layer, pos] = rows
        return np.stack([attend_latent(q[b], cache[b, layer, : pos + 1], scale) for b in range(len(q))])

    return model.forward(np.asarray(tokens), np.full(len(tokens), pos), attend)


def _new_cache(model: Model, bs: int, rows: int) -> np.ndarray:
    return np.zeros((bs, model.cfg.n_layers, rows, model.cfg.kv_lora + model.cfg.rope), np.float32)


def generate_ar(model: Model, prompts, max_new: int) -> list[Run]:
    """Greedy autoregressive decoding (argmax, ties to the lower token id) of every prompt. The prompts
    run in lockstep (token s of every request is at position s), so the matmuls are batched."""
    prompts = [[int(t) for t in p] for p in prompts]
    bs, longest = len(prompts), max(len(p) for p in prompts)
    cache = _new_cache(model, bs, longest + max_new)
    seqs = [list(p) for p in prompts]  # prompt, then the generated tokens
    margins: list[list[float]] = [[] for _ in prompts]
    for pos in range(longest - 1 + max_new):
        logits = _step(model, cache, [seqs[b][pos] if pos < len(seqs[b]) else 0 for b in range(bs)], pos)
        for b in range(bs):
            if len(prompts[b]) - 1 <= pos < len(prompts[b]) - 1 + max_new:
                top2 = np.sort(logits[b])[-2:]
                margins[b].append(top2[1] - top2[0])
                seqs[b].append(int(np.argmax(logits[b])))
    return [
        Run(
            np.array(seqs[b][len(p) :], np.int32),
            cache[b, :, : len(p) - 1 + max_new].copy(),
            margins=np.array(margins[b], np.float32),
        )
        for b, p in enumerate(prompts)
    ]


def generate_ddtree(
    model: Model,
    prompt,
    max_new: int,
    *,
    budget: int,
    depth: int,
    seed: int = 0,
    noise_scale: float = 0.5,
    temperature: float = 1.0,
) -> Run:
    """Greedy DDTree decoding through the reference ops (drafts and tree as described in drafter.py)."""
    cfg = model.cfg
    prompt = [int(t) for t in prompt]
    n = len(prompt)
    cache = _new_cache(model, 1, n + max_new + budget + depth + 2)
    for pos in range(n - 1):
        _step(model, cache, [prompt[pos]], pos)
    cache = cache[0]
    table = np.zeros((1, 1), np.int32)  # one page holding the whole sequence
    root, P = prompt[-1], n - 1
    out: list[int] = []
    accept_lens: list[int] = []
    K_in, D = min(budget, cfg.vocab), 1 + budget
    while len(out) < max_new:
        lp = np.zeros((depth, 0), np.float32)
        ids = np.zeros((depth, 0), np.int32)
        if budget:
            tok, seq = root, []
            for k in range(depth):  # the drafter: the target's greedy continuation, on scratch rows
                seq.append(_step(model, cache[None], [tok], P + k)[0])
                tok = int(np.argmax(seq[-1]))
            lp, ids = draft_topk(np.stack(seq), P, K_in, seed=seed, noise_scale=noise_scale, temperature=temperature)
        prefix = np.array([P], np.int32)
        tree = tree_build(lp[None], ids[None], np.array([root], np.int32), budget, prefix)

        def attend(layer, q, rows, tree=tree, P=P, prefix=prefix):
            cache[layer, P : P + D] = rows
            o, _ = tree_verify(q[None], cache[layer][None], table, prefix, tree.visibility, cfg.softmax_scale)
            return o[0]

        target = np.argmax(model.forward(tree.tokens[0], tree.positions[0], attend), axis=1).astype(np.int32)
        for layer in range(cfg.n_layers):
            acc = tree_accept(
                tree.tokens,
                tree.first_child,
                tree.next_sibling,
                target[None],
                max_depth=depth,
                kv_cache=cache[layer][None],
                block_table=table,
                prefix_lens=prefix,
            )
        k = int(acc.accept_len[0])
        out += acc.emitted[0, : k + 1].tolist()
        accept_lens.append(k)
        P, root = int(acc.new_lens[0]), int(acc.bonus[0])
    return Run(np.array(out[:max_new], np.int32), cache[:, :P].copy(), accept_lens=np.array(accept_lens, np.int32))

"""Inputs for the tree_verify benchmark and the torch attentions a user would run instead of the kernel.

Every comparator takes the paged cache as it is (so its time includes gathering the visible rows, which a
paged kernel does not need) and returns out [bs, Q, H, 512] in the inputs' dtype:
- `absorb_eager`: DeepSeek-V3's absorb attention (inference/model.py): q·Kᵀ over the 576 latent+rope
  columns, scale, the tree mask, softmax in float32 cast back to bf16, P·V over the first 512 columns.
- `sdpa_bool_mask`: torch.nn.functional.scaled_dot_product_attention with a boolean mask (one K/V head
  shared by the H query heads).
- `cascade`: a prefix pass (every query sees every prefix row, no mask) and a tree pass (the tree's own
  rows under the visibility mask), each with its log-sum-exp, merged by lse (SGLang's FA3 cascade, in torch).
- `flex`: FlexAttention (torch.compile) with a mask_mod reading the visibility; attempted, its error kept.
torch is imported lazily: the module imports without it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from contract import limits as v
from reference import tree_build

LATENT, HEAD_DIM = v.LATENT, v.HEAD_DIM
PAGE = 64
KIMI_K2_SCALE = 0.130861  # 192^-0.5 · m², YaRN factor 32 (notes: anchors_kernels §1)
DEEPSEEK_V3_SCALE = 0.135234
COMPARATORS = ("absorb_eager", "sdpa_bool_mask", "cascade")  # flex is attempted on a few shapes only


def softmax_scale(H: int) -> float:
    """DeepSeek-V3's scale for its 128 heads, Kimi-K2's otherwise (64 heads and their TP shards)."""
    return DEEPSEEK_V3_SCALE if H == 128 else KIMI_K2_SCALE


def ddtree_parents(Q: int, seed: int = 0) -> np.ndarray:
    """A DDTree-shaped tree of Q nodes (the reference builder on random bf16 log-probs, L = 15)."""
    if Q == 1:
        return np.array([-1], np.int32)
    rng = np.random.default_rng(seed)
    B = Q - 1
    K = min(B, 32)
    lp = (-np.sort(rng.exponential(2.0, (1, 15, K)), axis=-1)).astype(np.float32)  # rows non-increasing
    ids = np.stack([rng.choice(160_000, K, replace=False) for _ in range(15)])[None].astype(np.int32)
    t = tree_build.tree_build(lp, ids, np.zeros(1, np.int32), B, np.zeros(1, np.int32))
    if int(t.n_nodes[0]) != Q:
        raise RuntimeError(f"tree of {int(t.n_nodes[0])} nodes, wanted {Q}")
    return t.parents[0]


@dataclasses.dataclass
class Case:
    """One tree_verify problem: torch q and cache on `device`, numpy block table, lengths and visibility."""

    q: object  # torch [bs, Q, H, 576]
    kv: object  # torch [pages, PAGE, 576]
    block_table: np.ndarray  # int32 [bs, pages per request]
    prefix_lens: np.ndarray  # int32 [bs]
    visibility: np.ndarray  # uint32 [bs, Q, W]
    scale: float

    @property
    def shape(self):
        """(bs, Q, H, prefix): the prefix of request 0 (every request's, but in a mixed-length case)."""
        bs, Q, H, _ = self.q.shape
        return bs, Q, H, int(self.prefix_lens[0])

    @property
    def uniform(self) -> bool:
        """Every request has the same prefix (the torch comparators take no other)."""
        return bool((self.prefix_lens == self.prefix_lens[0]).all())


def make_case(bs: int, Q: int, H: int, prefix, *, device, dtype=None, seed: int = 0, chain: bool = False) -> Case:
    """A DDTree-shaped tree of Q nodes over the batch, or (`chain`) a chain of Q nodes: what the public MLA
    decode kernels' causal mask computes (harness/bench/peers.py). prefix: one length for every request, or one
    per request (a mixed-length batch)."""
    import torch

    dtype = dtype or torch.bfloat16
    par = np.arange(-1, Q - 1, dtype=np.int32) if chain else ddtree_parents(Q, seed)
    depths = np.zeros(Q, np.int32)
    for i in range(1, Q):
        depths[i] = depths[par[i]] + 1
    prefix_lens = np.broadcast_to(np.asarray(prefix, np.int32), (bs,)).copy()
    prefix = int(prefix_lens.max())
    vis1 = tree_build.layouts(par[None], depths[None], np.array([Q], np.int32), prefix_lens[:1])[0]
    vis = np.ascontiguousarray(np.repeat(vis1, bs, axis=0))
    per = -(-(prefix + Q) // PAGE)
    rng = np.random.default_rng(seed + 1)
    if (prefix_lens == prefix).all():
        pages = bs * per
        block_table = rng.permutation(pages).astype(np.int32).reshape(bs, per)
    else:  # each request its own pages (a long tail would otherwise give every request the longest's), 0 past them
        need = -(-(prefix_lens.astype(np.int64) + Q) // PAGE)
        pages = int(need.sum())
        perm = rng.permutation(pages).astype(np.int32)
        block_table = np.zeros((bs, per), np.int32)
        for b, start in enumerate(np.cumsum(need) - need):
            block_table[b, : need[b]] = perm[start : start + need[b]]
    gen = torch.Generator(device=device).manual_seed(seed)
    kv = (torch.randn(pages, PAGE, HEAD_DIM, device=device, dtype=dtype, generator=gen) * 0.5).contiguous()
    q = torch.randn(bs, Q, H, HEAD_DIM, device=device, dtype=dtype, generator=gen).contiguous()
    return Case(q, kv, block_table, prefix_lens, vis, softmax_scale(H))


def useful_flops(case: Case) -> int:
    """2·H·Σ_q (prefix + visible tree rows)·(576 + 512): the scores and P·V a query needs."""
    _bs, Q, H, _P = case.shape
    tree_keys = int(np.unpackbits(case.visibility.view(np.uint8), bitorder="little").sum())
    return 2 * H * (Q * int(case.prefix_lens.astype(np.int64).sum()) + tree_keys) * (HEAD_DIM + LATENT)


def min_bytes(case: Case) -> int:
    """Each cache row read once, q read, out (and lse) written: the floor of bytes moved."""
    bs, Q, H, _P = case.shape
    e = case.q.element_size()
    keys = int(case.prefix_lens.astype(np.int64).sum()) + bs * Q
    return keys * HEAD_DIM * e + bs * Q * H * (HEAD_DIM * e + LATENT * e + 4)


def dense_mask(case: Case, device):
    """bool [bs, Q, prefix + Q]: every prefix row, then the tree rows the visibility marks."""
    import torch

    bs, Q, _H, P = case.shape
    _uniform(case)
    bits = tree_build.unpack_visibility(case.visibility, Q)  # [bs, Q, Q] bool
    m = torch.ones(bs, Q, P + Q, dtype=torch.bool, device=device)
    m[:, :, P:] = torch.from_numpy(np.ascontiguousarray(bits)).to(device)
    return m


def row_index(case: Case, device):
    """int64 [bs, prefix + Q]: each logical position's row in the flattened cache."""
    import torch

    _bs, Q, _H, P = case.shape
    _uniform(case)
    pos = np.arange(P + Q)
    rows = case.block_table[:, pos // PAGE].astype(np.int64) * PAGE + pos % PAGE
    return torch.from_numpy(rows).to(device)


def _uniform(case: Case) -> None:
    if not case.uniform:
        raise ValueError("the torch comparators take a batch of one prefix length, not a mixed-length one")


def gather(kv, rows):
    return kv.view(-1, HEAD_DIM)[rows.reshape(-1)].view(*rows.shape, HEAD_DIM)


def estimate_bytes(name: str, bs: int, Q: int, H: int, N: int, elem: int = 2) -> int:
    """Peak extra device memory a comparator needs (gathered rows + its score/probability buffers)."""
    gathered = bs * N * HEAD_DIM * elem
    scores = bs * Q * H * N
    if name == "absorb_eager":
        return gathered + scores * (2 * elem + 4 + elem) + bs * Q * N
    if name == "sdpa_bool_mask":  # the math path repeats K/V per head and keeps float scores
        return gathered + bs * H * N * (HEAD_DIM + LATENT) * elem + scores * (4 + 4 + elem) + bs * Q * N
    if name == "cascade":
        return gathered + scores * (4 + 4 + elem)
    if name == "flex":
        return gathered + bs * Q * N
    raise KeyError(name)


# ------------------------------------------------------------------------------------------- comparators
def absorb_eager(case: Case, rows, mask):
    import torch

    bs, Q, H, _P = case.shape
    k = gather(case.kv, rows)  # [bs, N, 576]
    s = torch.matmul(case.q.reshape(bs, Q * H, HEAD_DIM), k.transpose(1, 2)).view(bs, Q, H, -1) * case.scale
    s = s.masked_fill(~mask[:, :, None, :], float("-inf"))
    p = s.softmax(dim=-1, dtype=torch.float32).to(case.q.dtype)
    return torch.matmul(p.view(bs, Q * H, -1), k[..., :LATENT]).view(bs, Q, H, LATENT)


def sdpa_bool_mask(case: Case, rows, mask):
    import torch.nn.functional as F

    bs, _Q, H, _P = case.shape
    k = gather(case.kv, rows)[:, None]  # [bs, 1, N, 576]
    q = case.q.transpose(1, 2)  # [bs, H, Q, 576]
    try:
        out = F.scaled_dot_product_attention(
            q, k, k[..., :LATENT], attn_mask=mask[:, None], scale=case.scale, enable_gqa=True
        )
    except TypeError:  # torch without enable_gqa: broadcast the one K/V head
        kk = k.expand(bs, H, *k.shape[2:])
        out = F.scaled_dot_product_attention(q, kk, kk[..., :LATENT], attn_mask=mask[:, None], scale=case.scale)
    return out.transpose(1, 2)


def _attention_lse(q, k, mask, scale):
    """(out float32 [bs, Q, H, 512], lse float32 [bs, Q, H]) of q [bs, Q, H, 576] over k [bs, n, 576]."""
    import torch

    bs, Q, H, _ = q.shape
    s = torch.matmul(q.reshape(bs, Q * H, HEAD_DIM), k.transpose(1, 2)).float().view(bs, Q, H, -1) * scale
    if mask is not None:
        s = s.masked_fill(~mask[:, :, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).to(q.dtype)
    out = torch.matmul(p.view(bs, Q * H, -1), k[..., :LATENT]).float().view(bs, Q, H, LATENT)
    return out, lse


def cascade(case: Case, rows, mask):
    import torch

    _bs, _Q, _H, P = case.shape
    k = gather(case.kv, rows)
    o2, l2 = _attention_lse(case.q, k[:, P:], mask[:, :, P:], case.scale)
    if P == 0:
        return o2.to(case.q.dtype)
    o1, l1 = _attention_lse(case.q, k[:, :P], None, case.scale)
    lse = torch.logaddexp(l1, l2)
    out = o1 * torch.exp(l1 - lse)[..., None] + o2 * torch.exp(l2 - lse)[..., None]
    return out.to(case.q.dtype)


_flex_compiled = None


def flex(case: Case, rows, mask):
    """FlexAttention, compiled once per process; the visibility is read inside the mask_mod."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    global _flex_compiled
    if _flex_compiled is None:
        for knob in ("recompile_limit", "cache_size_limit"):  # one compile per shape, a handful of shapes
            if hasattr(torch._dynamo.config, knob):
                setattr(torch._dynamo.config, knob, 64)
        _flex_compiled = torch.compile(flex_attention)
    bs, Q, _H, P = case.shape
    tree = mask[:, :, P:].contiguous()

    def mask_mod(b, h, q_idx, kv_idx):
        j = (kv_idx - P).clamp(0, Q - 1)
        return (kv_idx < P) | tree[b, q_idx, j]

    block = create_block_mask(mask_mod, B=bs, H=None, Q_LEN=Q, KV_LEN=P + Q, device=case.q.device)
    k = gather(case.kv, rows)[:, None]
    out = _flex_compiled(case.q.transpose(1, 2), k, k[..., :LATENT], block_mask=block, scale=case.scale,
                         enable_gqa=True)  # fmt: skip
    return out.transpose(1, 2)


FUNCTIONS = {"absorb_eager": absorb_eager, "sdpa_bool_mask": sdpa_bool_mask, "cascade": cascade, "flex": flex}


def rel_err(a, b) -> float:
    """‖a − b‖ / ‖b‖ in float32 (NaN when either has a non-finite value)."""
    a, b = a.float(), b.float()
    if not (bool(a.isfinite().all()) and bool(b.isfinite().all())):
        return float("nan")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def spot_check(case: Case, out, rows, queries: int = 4) -> float:
    """Relative error of `out` for request 0's first and last queries against a float32 torch attention
    (cheap at any prefix: only those queries' scores are formed)."""
    import torch

    _bs, Q, _H, P = case.shape
    idx = sorted({*range(min(queries, Q)), Q - 1})
    k = gather(case.kv, rows[:1]).float()[0]  # [N, 576]
    q = case.q[0, idx].float()  # [n, H, 576]
    bits = tree_build.unpack_visibility(case.visibility[:1], Q)[0][idx]  # [n, Q]
    m = torch.ones(len(idx), P + Q, dtype=torch.bool, device=k.device)
    m[:, P:] = torch.from_numpy(np.ascontiguousarray(bits)).to(k.device)
    s = torch.einsum("nhd,kd->nhk", q, k) * case.scale
    s = s.masked_fill(~m[:, None, :], float("-inf"))
    want = torch.einsum("nhk,kd->nhd", s.softmax(-1), k[:, :LATENT])
    return rel_err(out[0, idx], want)

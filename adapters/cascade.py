"""The cascade: the best tree_verify a user can assemble today from a chain-only peer (issue 25), and a full
tree_verify implementation (any tree) in its own right, so it is certified like any other.

1. prefix pass: the peer over each request's prefix rows for all Q queries, not causal (every query sees
   every prefix row), giving (out_p, lse_p); requests with an empty prefix skip it;
2. tree pass (plain torch, float32): the Q tree rows gathered from the paged cache, the scores of every
   query against them, the visibility mask applied by selection (masked_fill, never a multiply by zero),
   giving (out_t, lse_t);
3. merge by lse: lse = logaddexp(lse_p, lse_t); out = out_p·e^(lse_p − lse) + out_t·e^(lse_t − lse), rounded
   to bf16 once.
The peer's page size and dtype bind the cascade too; cuBLAS picks kernels by shape, so the tree pass (and
the peer) promise no batch invariance.
"""

from __future__ import annotations

import numpy as np

from contract import TREE_VERIFY, Verified, limits

from . import flashinfer_mla, flashmla
from . import torch_inputs as ti
from .protocol import Capabilities, Implementation, Op


def tree_rows(kv_cache, block_table, prefix_lens, Q: int):
    """The tree's own rows [bs, Q, 576] (positions prefix .. prefix + Q − 1), gathered through the block table
    (torch int tensors on the cache's device)."""
    import torch

    page = kv_cache.shape[1]
    pos = prefix_lens[:, None].long() + torch.arange(Q, device=kv_cache.device)[None]  # [bs, Q]
    pages = torch.gather(block_table.long(), 1, pos // page)
    return kv_cache.view(-1, kv_cache.shape[-1])[(pages * page + pos % page).reshape(-1)].view(*pos.shape, -1)


def visibility_bits(visibility, Q: int):
    """bool [bs, Q, Q] from the uint32 words [bs, Q, W] (bit j of word j // 32), on the device."""
    import torch

    words = visibility.to(torch.int64) & 0xFFFFFFFF
    j = torch.arange(Q, device=visibility.device)
    return ((words[..., j // 32] >> (j % 32)) & 1).bool()


def tree_pass(q, rows, bits, softmax_scale: float):
    """float32 (out [bs, Q, H, 512], lse [bs, Q, H]) of every query over the tree rows it sees."""
    import torch

    s = torch.einsum("bqhd,bkd->bqhk", q.float(), rows.float()) * softmax_scale
    s = s.masked_fill(~bits[:, :, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    out = torch.einsum("bqhk,bkd->bqhd", p, rows[..., : limits.LATENT].float())
    return out, lse


def merge(out_a, lse_a, out_b, lse_b):
    """Two partial attentions over disjoint key sets, merged by their log-sum-exps (float32)."""
    import torch

    lse = torch.logaddexp(lse_a, lse_b)
    return out_a.float() * torch.exp(lse_a - lse)[..., None] + out_b.float() * torch.exp(lse_b - lse)[..., None], lse


class Cascade:
    """A peer's prefix pass + the torch tree pass + the merge, planned once per batch (`run(q, kv_cache)`)."""

    def __init__(self, peer: str, block_table, prefix_lens: np.ndarray, visibility, *, Q: int, H: int,
                 page_size: int, softmax_scale: float, device):  # fmt: skip
        import torch

        self.Q, self.scale = Q, float(np.float32(softmax_scale))
        self.with_prefix = np.flatnonzero(prefix_lens > 0)
        self.block_table = torch.from_numpy(np.ascontiguousarray(block_table)).to(device)
        self.prefix_lens = torch.from_numpy(np.ascontiguousarray(prefix_lens)).to(device)
        self.bits = visibility_bits(torch.from_numpy(np.ascontiguousarray(visibility).view(np.int32)).to(device), Q)
        self.sel = torch.from_numpy(self.with_prefix).to(device)
        self.prefix_plan: flashmla.Plan | flashinfer_mla.Plan | None = None
        if len(self.with_prefix):
            bt, kv_lens = block_table[self.with_prefix], prefix_lens[self.with_prefix]
            if peer == "flashmla":
                self.prefix_plan = flashmla.Plan(torch.from_numpy(np.ascontiguousarray(bt)).to(device),
                                                 torch.from_numpy(kv_lens).to(device), causal=False,
                                                 softmax_scale=softmax_scale)  # fmt: skip
            else:
                self.prefix_plan = flashinfer_mla.Plan(bt, kv_lens, Q=Q, H=H, page_size=page_size, causal=False,
                                                       softmax_scale=softmax_scale, device=device,
                                                       backend=peer.removeprefix("flashinfer_"))  # fmt: skip

    def run(self, q, kv_cache):
        """(out [bs, Q, H, 512] in q's dtype, lse float32 [bs, Q, H])."""
        rows = tree_rows(kv_cache, self.block_table, self.prefix_lens, self.Q)
        out, lse = tree_pass(q, rows, self.bits, self.scale)
        if self.prefix_plan is not None:
            sel = self.sel
            po, pl = self.prefix_plan.run(q[sel].contiguous() if len(sel) < q.shape[0] else q, kv_cache)
            mo, ml = merge(po, pl, out[sel], lse[sel])
            out[sel], lse[sel] = mo, ml
        return out.to(q.dtype), lse


def _tree_verify(peer: str, caps: Capabilities):
    @TREE_VERIFY.implements
    def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        """The cascade over a peer (torch CUDA tensors in and out), any tree."""
        c = ti.validate(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
        if caps.dtypes is not None and ti.np_dtype(c.q).name not in caps.dtypes:
            ti.refuse("q", f"the {peer} cascade takes {'/'.join(caps.dtypes)} q and cache, not {ti.np_dtype(c.q)}")
        if "page_size" in caps.dims and c.dims["page_size"] not in caps.dims["page_size"]:
            ti.refuse("kv_cache", f"the {peer} cascade takes pages of {caps.dims['page_size']} rows")
        cas = Cascade(peer, c.block_table, c.prefix_lens, c.visibility, Q=c.dims["Q"], H=c.dims["H"],
                      page_size=c.dims["page_size"], softmax_scale=c.softmax_scale, device=q.device)  # fmt: skip
        out, lse = cas.run(q.contiguous(), kv_cache.contiguous())
        return Verified(out, lse.contiguous())

    return tree_verify


def cascade_implementation(name: str, peer: str, peer_caps: Capabilities, version: str, available, what: str):
    """The cascade over `peer` as an Implementation: the peer's dtypes and page sizes, any tree, and no
    batch-invariance promise (cuBLAS picks the tree pass's kernels by shape)."""
    caps = Capabilities(dtypes=peer_caps.dtypes, dims=dict(peer_caps.dims), trees="any", batch_invariant=False)
    return Implementation(
        name=name,
        version=version,
        ops={"tree_verify": Op(_tree_verify(peer, caps), caps)},
        arrays="device",
        available=available,
        description=f"{what} over the prefix (not causal) + a torch pass over the tree rows + a merge by lse",
    )


FLASHMLA_CASCADE = cascade_implementation(
    "flashmla-cascade", "flashmla", flashmla.CAPS, flashmla.version(), flashmla.available, "FlashMLA"
)
FLASHINFER_CASCADE = cascade_implementation(
    "flashinfer-mla-cascade", "flashinfer_fa3", flashinfer_mla.CAPS, flashinfer_mla.version(),
    lambda: flashinfer_mla.available("fa3"), "FlashInfer MLA (fa3)",
)  # fmt: skip

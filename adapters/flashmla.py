"""FlashMLA (DeepSeek's MLA decode kernel, the `sgl-flash-mla` package: its SM90 dense decoder, reached with
`use_legacy=True`) as a tree_verify implementation, and the one wrapper the benchmarks' comparator calls.

What it computes: for each request, s_q = Q queries over cache_seqlens = prefix + Q keys, with `causal`
bottom-right aligned, so query i sees keys 0 .. prefix + i: our tree_verify for a chain-shaped tree. It takes
bf16 q and cache, pages of 64 rows (its own check: "Currently page_block_size must be 64"), one latent head
(our 576-wide cache row viewed as [pages, 64, 1, 576]). Its lse comes back [bs, H, Q] in natural log; we
return it [bs, Q, H]. Its split-KV schedule (tile scheduler metadata, computed on the first call of a batch
shape) depends on the whole batch, so it does not promise batch invariance, and neither do we for it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import numpy as np

from contract import TREE_VERIFY, Verified

from . import torch_inputs as ti
from .protocol import Capabilities, Implementation, Op

PACKAGE = "sgl-flash-mla"
PAGE = 64
CAPS = Capabilities(
    dtypes=("bfloat16",), dims={"page_size": {PAGE}}, trees="chains", deterministic=True, batch_invariant=False
)


def available() -> str | None:
    """Why FlashMLA cannot run here, or None."""
    if importlib.util.find_spec("flash_mla") is None:
        return f"{PACKAGE} is not installed (pip install '.[peers]')"
    try:
        import flash_mla
    except Exception as e:  # its extension failing to load (a torch or CUDA mismatch) says why
        return f"flash_mla does not import: {type(e).__name__}: {e}"
    if not flash_mla.has_legacy():
        return "this flash_mla build has no legacy SM90 dense decoder (built with FLASH_MLA_BUILD_LEGACY=0)"
    import torch

    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        return f"FlashMLA's dense decoder is built for sm_90 only; this GPU is sm_{major}x"
    return None


def version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


class Plan:
    """One batch shape planned once: `run(q, kv_cache)` -> (out [bs, Q, H, 512], lse [bs, Q, H] natural log).
    `kv_lens` are the keys each request's queries attend (prefix + Q for the chain; the prefix alone for a
    cascade's prefix pass with causal False). The first run computes FlashMLA's scheduler metadata, which the
    later runs of the same Plan reuse (what a serving engine does per batch; the benchmarks time those)."""

    def __init__(self, block_table, kv_lens, *, causal: bool, softmax_scale: float):
        import flash_mla

        self._fm = flash_mla
        self.block_table = block_table
        self.kv_lens = kv_lens
        self.causal = causal
        self.scale = float(np.float32(softmax_scale))
        self.meta, _ = flash_mla.get_mla_metadata()

    def run(self, q, kv_cache):
        Q, D = q.shape[1], q.shape[-1]
        kv = kv_cache.view(kv_cache.shape[0], PAGE, 1, D)
        out, lse = self._fm.flash_mla_with_kvcache(
            q, kv, self.block_table, self.kv_lens, 512, self.meta, None,
            softmax_scale=self.scale, causal=self.causal and Q > 1, use_legacy=True,
        )  # fmt: skip
        return out, lse.transpose(1, 2)


def plan_chain(block_table, prefix_lens, Q: int, softmax_scale: float) -> Plan:
    """The Plan of tree_verify on chains: Q queries per request, keys = prefix + Q, causal."""
    import torch

    return Plan(
        block_table.to(torch.int32), (prefix_lens + Q).to(torch.int32), causal=True, softmax_scale=softmax_scale
    )


def check_takes(c: ti.Checked) -> None:
    """NotImplementedError naming the argument for valid input outside FlashMLA's declaration."""
    import torch

    if c.q.dtype != torch.bfloat16:
        ti.refuse("q", f"FlashMLA's dense decoder takes bfloat16 q and cache, not {ti.np_dtype(c.q)}")
    if c.dims["page_size"] != PAGE:
        ti.refuse("kv_cache", f"FlashMLA takes pages of {PAGE} rows, not {c.dims['page_size']}")
    if not c.chain():
        ti.refuse("visibility", "FlashMLA computes causal attention: every request's tree must be a chain of Q rows")


@TREE_VERIFY.implements
def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """FlashMLA on a chain-shaped tree (torch CUDA tensors in and out)."""
    import torch

    c = ti.validate(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
    check_takes(c)
    dev = q.device
    plan = plan_chain(torch.from_numpy(c.block_table).to(dev), torch.from_numpy(c.prefix_lens).to(dev), c.dims["Q"],
                      c.softmax_scale)  # fmt: skip
    out, lse = plan.run(q.contiguous(), kv_cache.contiguous())
    return Verified(out, lse.contiguous())


IMPLEMENTATION = Implementation(
    name="flashmla",
    version=version(),
    ops={"tree_verify": Op(tree_verify, CAPS)},
    arrays="device",
    available=available,
    description="FlashMLA's SM90 dense decoder (sgl-flash-mla, use_legacy=True), causal = a chain",
)

"""FlashInfer's MLA decode (`flashinfer-python`: BatchMLAPagedAttentionWrapper) as tree_verify
implementations, backend fa3 (its sm_90a path) and fa2 (its mma.sync path), and the one wrapper the
benchmarks' comparators call.

The plan takes CSR metadata: query rows [b·Q, (b+1)·Q), kv_len = prefix + Q, the request's pages (its block
table entries, in order), `causal = True` bottom-right aligned, so query i sees keys 0 .. prefix + i: our
tree_verify for a chain-shaped tree. q is "packed" (the 576-wide rows, 512 ‖ 64) and so is the cache. Its
kernels keep the log-sum-exp in base 2; we ask it for the natural log (`lse_mode="basee"`,
`return_lse_base_on_e=True`: the kernel multiplies by ln 2 itself). Its split-KV plan depends on the whole
batch, so it does not promise batch invariance. Its MLA module is compiled with nvcc at first use unless a
prebuilt one is installed (tools/peers_setup.sh prebuilds it for sm_90a).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import numpy as np

from contract import TREE_VERIFY, Verified

from . import torch_inputs as ti
from .protocol import Capabilities, Implementation, Op

PACKAGE = "flashinfer-python"
WORKSPACE_BYTES = 128 << 20
CAPS = Capabilities(dtypes=("bfloat16",), trees="chains", deterministic=True, batch_invariant=False)


def version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def available(backend: str) -> str | None:
    """Why FlashInfer's MLA `backend` cannot run here, or None."""
    if importlib.util.find_spec("flashinfer") is None:
        return f"{PACKAGE} is not installed (pip install '.[peers]')"
    try:
        import flashinfer.mla  # noqa: F401
    except Exception as e:
        return f"flashinfer.mla does not import: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    import torch

    major, _ = torch.cuda.get_device_capability()
    if backend == "fa3" and major != 9:
        return f"FlashInfer's fa3 MLA backend needs sm_90a; this GPU is sm_{major}x"
    return None


_WORKSPACES: dict = {}


def _workspace(device):
    import torch

    key = str(device)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _WORKSPACES[key]


class Plan:
    """One batch shape planned once (FlashInfer's plan runs on the host and copies its metadata to the
    device): `run(q, kv_cache)` -> (out [bs, Q, H, 512], lse [bs, Q, H] natural log). `kv_lens` are the keys
    each request's Q queries attend (prefix + Q causal for the chain; the prefix alone, not causal, for a
    cascade's prefix pass). Requests with kv_len 0 must not be planned (the cascade leaves them out)."""

    def __init__(self, block_table: np.ndarray, kv_lens: np.ndarray, *, Q: int, H: int, page_size: int,
                 causal: bool, softmax_scale: float, device, backend: str = "fa3"):  # fmt: skip
        import torch
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        bs = len(kv_lens)
        pages = -(-kv_lens.astype(np.int64) // page_size)
        indices = np.concatenate([block_table[b, : pages[b]] for b in range(bs)]).astype(np.int32)
        i32 = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.int32)).to(device)
        self.Q, self.H = Q, H
        self.wrapper = BatchMLAPagedAttentionWrapper(_workspace(device), backend=backend)
        self.wrapper.plan(
            metadata=MLAPlanMetadata.csr(i32(np.arange(bs + 1) * Q), i32(np.concatenate([[0], np.cumsum(pages)])),
                                        i32(indices), i32(kv_lens)),
            num_heads=H, head_dim_ckv=512, head_dim_kpe=64, page_size=page_size, causal=causal,
            sm_scale=float(np.float32(softmax_scale)), q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16,
            query_layout="packed", kv_cache_layout="packed", lse_mode="basee",
        )  # fmt: skip

    def run(self, q, kv_cache):
        bs = q.shape[0]
        out, lse = self.wrapper.run(query=q.reshape(bs * self.Q, self.H, q.shape[-1]), kv_cache=kv_cache,
                                    return_lse=True, return_lse_base_on_e=True)  # fmt: skip
        return out.view(bs, self.Q, self.H, out.shape[-1]), lse.view(bs, self.Q, self.H)


def check_takes(c: ti.Checked, name: str) -> None:
    """NotImplementedError naming the argument for valid input outside FlashInfer MLA's declaration."""
    import torch

    if c.q.dtype != torch.bfloat16:
        ti.refuse("q", f"{name} is declared for bfloat16 q and cache, not {ti.np_dtype(c.q)}")
    if not c.chain():
        ti.refuse("visibility", f"{name} computes causal attention: every request's tree must be a chain of Q rows")


def _tree_verify(backend: str):
    name = f"FlashInfer MLA ({backend})"

    @TREE_VERIFY.implements
    def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        """FlashInfer's MLA wrapper on a chain-shaped tree (torch CUDA tensors in and out)."""
        c = ti.validate(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
        check_takes(c, name)
        Q, H = c.dims["Q"], c.dims["H"]
        plan = Plan(c.block_table, c.prefix_lens + Q, Q=Q, H=H, page_size=c.dims["page_size"], causal=True,
                    softmax_scale=c.softmax_scale, device=q.device, backend=backend)  # fmt: skip
        out, lse = plan.run(q.contiguous(), kv_cache.contiguous())
        return Verified(out, lse.contiguous())

    return tree_verify


def implementation(backend: str) -> Implementation:
    """FlashInfer's MLA wrapper with one backend ("fa3" or "fa2") as an Implementation."""
    return Implementation(
        name=f"flashinfer-mla-{backend}",
        version=version(),
        ops={"tree_verify": Op(_tree_verify(backend), CAPS)},
        arrays="device",
        available=lambda: available(backend),
        description=f"FlashInfer BatchMLAPagedAttentionWrapper, backend {backend}, causal = a chain",
    )


IMPLEMENTATION = implementation("fa3")
FA2 = implementation("fa2")

"""Minimal repro: FlashInfer's MLA decode, backend fa2, returns a log-sum-exp off by up to ~1e-3 (natural log)
where backend fa3 and FlashMLA are within 6e-5 + 2e-5·|lse| of the float64 value (TV.2.9), while both
outputs are within the bf16 tolerance. Found by `pytest conformance/test_tree_verify.py --impl
adapters.flashinfer_mla:FA2` (docs/ADAPTERS.md); this script calls FlashInfer directly, without the adapter.

One request, one query, H heads, a 2-key cache (prefix 1 + the query's own row), pages of one row. It prints
each backend's lse error against float64, in base e as returned (`return_lse_base_on_e=True`) and in base 2
converted here, and how well a few hypotheses about the fa2 path explain its lse (the logits from q rounded
to bf16 after scaling, or from a bf16 score).

    PYTHONPATH=.peers/site FLASHINFER_DISABLE_JIT=1 TVM_FFI_DISABLE_TORCH_C_DLPACK=1 \\
        python -m lab.peers_repro_fa2_lse [--heads 16] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keys", type=int, default=2, help="cache rows the query sees")
    args = ap.parse_args()
    import torch
    from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

    dev, H, n, scale = "cuda", args.heads, args.keys, float(np.float32(0.130861))
    g = torch.Generator(device=dev).manual_seed(args.seed)
    q = torch.randn(1, H, 576, generator=g, device=dev).to(torch.bfloat16)
    kv = torch.randn(n, 1, 576, generator=g, device=dev).to(torch.bfloat16)  # n pages of one row
    i32 = lambda *v: torch.tensor(v, dtype=torch.int32, device=dev)
    s64 = torch.einsum("hd,kd->hk", q[0].double(), kv[:, 0].double()) * scale
    want = torch.logsumexp(s64, -1)
    o64 = torch.einsum("hk,kd->hd", torch.softmax(s64, -1), kv[:, 0, :512].double())
    log2e = math.log2(math.e)
    q_scaled_bf16 = (q[0].double() * scale * log2e).bfloat16().double()
    hypotheses = {
        "q*scale*log2e rounded to bf16": torch.logsumexp(
            torch.einsum("hd,kd->hk", q_scaled_bf16, kv[:, 0].double()) / log2e, -1
        ),
        "score rounded to bf16": torch.logsumexp((s64.float().bfloat16().double()), -1),
        "score rounded to fp16": torch.logsumexp((s64.float().half().double()), -1),
    }
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, H={H}, keys={n}, scale={scale}")
    for backend in ("fa3", "fa2"):
        w = BatchMLAPagedAttentionWrapper(torch.empty(128 << 20, dtype=torch.uint8, device=dev), backend=backend)
        for base_e in (True, False):
            w.plan(metadata=MLAPlanMetadata.csr(i32(0, 1), i32(0, n), i32(*range(n)), i32(n)), num_heads=H,
                   head_dim_ckv=512, head_dim_kpe=64, page_size=1, causal=True, sm_scale=scale,
                   q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, query_layout="packed",
                   kv_cache_layout="packed", lse_mode="basee" if base_e else "base2")  # fmt: skip
            out, lse = w.run(query=q, kv_cache=kv, return_lse=True, return_lse_base_on_e=base_e)
            lse = lse.double().view(H) * (1.0 if base_e else math.log(2.0))
            err = (lse - want).abs()
            oerr = (out[:, :512].double() - o64).abs().max().item()
            tol_ok = bool((err <= 6e-5 + 2e-5 * want.abs()).all())
            print(
                f"{backend} lse base {'e' if base_e else '2 (converted here)'}: max |lse - float64| "
                f"{err.max().item():.3e} (TV.2.9 {'met' if tol_ok else 'MISSED'}), max |out - float64| {oerr:.3e}"
            )
            if backend == "fa2":
                for name, h in hypotheses.items():
                    print(f"    fa2 lse vs '{name}': max diff {(lse - h).abs().max().item():.3e}")


if __name__ == "__main__":
    main()

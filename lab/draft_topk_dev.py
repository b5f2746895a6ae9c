"""draft_topk kernel development timing on a GPU (not part of the test suite): every design side by side in one
process, the registered variants (radix, prefilter) and alternatives kept only here (the same source with other
defines or a patched launch bound), each checked first: its ids equal to the first design's on every row and to the
numpy reference on a sample of rows, its log-probs equal to the first design's bit for bit.

  python3 -m lab.draft_topk_dev time [--quick] [--json F] [--designs a,b] [--knockouts]
  python3 -m lab.draft_topk_dev launch [--shape dtype,V,L,K,bs] [--design D]   # two launches, for ncu

Inputs are the benchmark's (perf/bench_draft_topk.py: normal logits, scale 3, rounded to the dtype, so bf16 has
many exact ties). Times are device medians with the L2 flushed or rotated as the benchmark does (harness.timing's
L2 plan for the logits' bytes), with the read floor (the logits' bytes at 4.45 TB/s, the H200's measured read
ceiling: docs/BENCHMARKS.md) beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import ml_dtypes
import numpy as np

from harness import timing
from kernels_cu import draft_topk_ops, specs
from lab import design_table
from reference import draft_topk as ref

BF16 = np.dtype(ml_dtypes.bfloat16)
READ_TBPS = 4.45  # the H200's measured read ceiling (perf/bench_ceilings.py), for the floor column only


def designs() -> dict[str, specs.KernelSpec]:
    """The registered variants and the alternatives kept here: the prefilter's split kernels at the residency ptxas
    picks (3 blocks per SM) instead of 4, draft_topk.cu's DT_VEC_LOADS off (token-by-token loads) and DT_REGISTER_LOOKS
    off with it (the builds certified at 38b0d82: `*_38b0d82`), and the candidate cap."""
    radix, pre = specs.get("draft_topk", "radix"), specs.get("draft_topk", "prefilter")
    old = {"DT_VEC_LOADS": "0", "DT_REGISTER_LOOKS": "0", "DT_SPLIT_MIN_BLOCKS": "0"}
    return {
        "radix": radix,
        "prefilter": pre,
        "prefilter_3_blocks": pre.with_defines("prefilter_3_blocks", DT_SPLIT_MIN_BLOCKS="0"),
        "prefilter_scalar": pre.with_defines("prefilter_scalar", DT_VEC_LOADS="0"),
        "prefilter_38b0d82": pre.with_defines("prefilter_38b0d82", **old),
        "radix_38b0d82": radix.with_defines("radix_38b0d82", **old),
        "prefilter_cap256": pre.with_defines("prefilter_cap256", DT_CAND_CAP="256"),
    }


# Knock-outs (timed, never checked: their outputs are wrong by design): where a design's time goes, by what is left
# when a part of it is cut. The merge cut at its start (the splits alone); the splits cut after the read and the
# block's (max, sum) (the read, its order bits, the exps and two block reductions); the same without the reductions.
_MERGE_CUT = (
    "  const u64* cand = ws_keys + row * n;\n",
    "  const u64* cand = ws_keys + row * n;\n  if (V > 0) return;\n",
)
_SPLIT_CUT = (
    "  if (threadIdx.x == 0) ws_lse[row * splits + split] = make_float2(m, s);\n",
    "  if (threadIdx.x == 0) ws_lse[row * splits + split] = make_float2(m, s);\n  if (V > 0) return;\n",
)
_NO_REDUCTIONS = (("  m = block_max(sh, m);\n", ""), ("  s = block_sum(sh, s);\n", ""))


def knockouts() -> dict[str, specs.KernelSpec]:
    out = {}
    for name in ("radix", "prefilter"):
        spec = specs.get("draft_topk", name)
        out[f"{name}_splits_only"] = dataclasses.replace(spec, variant=f"{name}_splits_only", patches=(_MERGE_CUT,))
    pre = specs.get("draft_topk", "prefilter")
    out["read_max_sum_only"] = dataclasses.replace(pre, variant="read_max_sum_only", patches=(_MERGE_CUT, _SPLIT_CUT))
    out["read_only"] = dataclasses.replace(pre, variant="read_only", patches=(_MERGE_CUT, _SPLIT_CUT, *_NO_REDUCTIONS))
    return out


def logits(torch, bs, L, V, dtype, seed=0):
    """The benchmark's logits, on the GPU."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((bs, L, V), generator=g, device="cuda", dtype=torch.float32) * 3
    return x.to(torch.bfloat16 if dtype == "bf16" else torch.float32)


def sample_reference(torch, x, K):
    """The reference's ids and log-probs of up to 4 rows spread over the batch: (row indices, TopK)."""
    bs, L, V = x.shape
    rows = list(range(0, bs * L, max(1, (bs * L) // 4)))[:4]
    flat = x.reshape(bs * L, V)[rows]
    host = flat.float().cpu().numpy() if x.dtype == torch.float32 else flat.view(torch.int16).cpu().numpy().view(BF16)
    return rows, ref.draft_topk(host[None], K)


def run_one(torch, spec, x, K, first, sample, plan, policy, checked=True):
    """One design on one input: checked (against the first design's outputs and the reference sample), then timed.
    Returns (median µs, outputs as torch tensors). checked=False (a knock-out): timed only."""
    p = draft_topk_ops.prepare(spec, x, K)
    try:
        p.launch()
        if not checked:
            dev, _ = timing.device_times_us([p.launch], plan=plan, policy=policy)
            return timing.summary(dev)["median_us"], None
        got = p.results()
        logp, ids = got.top_logp.clone(), got.top_ids.clone()
        rows, want = sample
        flat = ids.reshape(-1, K)[rows].cpu().numpy()
        assert (flat == want.top_ids[0]).all(), f"{spec.variant}: ids differ from the reference on sampled rows"
        if first is not None:
            assert torch.equal(ids, first[1]), f"{spec.variant}: ids differ from the first design's"
            same = logp.view(torch.int32) == first[0].view(torch.int32)
            assert bool(same.all()), f"{spec.variant}: log-probs differ from the first design's in bits"
        dev, _ = timing.device_times_us([p.launch], plan=plan, policy=policy)
    finally:
        p.finish()
    return timing.summary(dev)["median_us"], (logp, ids)


GRID = [  # (dtype, V, L, K, bs)
    *[("bf16", 163_840, 16, K, bs) for K in (8, 64) for bs in (1, 8, 64, 256)],
    ("bf16", 163_840, 1, 8, 1),
    ("bf16", 32_000, 16, 8, 1),
    ("bf16", 129_280, 16, 32, 64),
    ("bf16", 163_840, 16, 1024, 8),  # one block per row (8 K > a split's tokens)
    *[("fp32", 163_840, 16, 8, bs) for bs in (1, 64)],
]
QUICK = [("bf16", 163_840, 16, 8, 1), ("bf16", 163_840, 16, 8, 64), ("bf16", 163_840, 16, 64, 256)]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["time", "launch"])
    ap.add_argument("--shape", default="bf16,163840,16,8,64", help="launch: dtype,V,L,K,bs")
    ap.add_argument("--design", default="prefilter", help="launch: one design (for Nsight Compute)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--designs", default=",".join(designs()), help="comma list of designs() names (first: baseline)")
    ap.add_argument("--knockouts", action="store_true", help="also time knockouts() (unchecked) beside them")
    a = ap.parse_args(argv)
    import torch

    if a.what == "launch":  # one checked launch and one more, for a profiler to catch (ncu -k regex:draft_topk)
        dtype, *dims = a.shape.split(",")
        V, L, K, bs = (int(v) for v in dims)
        x = logits(torch, bs, L, V, dtype)
        p = draft_topk_ops.prepare(designs()[a.design], x, K)
        p.launch()
        p.launch()
        p.finish()
        return
    policy = timing.Policy(warmup=2, min_reps=3, max_reps=30, budget_s=0.15)
    ds = {k: v for k, v in designs().items() if k in a.designs.split(",")}
    kos = knockouts() if a.knockouts else {}
    ds |= kos
    rows = []
    for dtype, V, L, K, bs in QUICK if a.quick else GRID:
        x = logits(torch, bs, L, V, dtype)
        nbytes = x.numel() * x.element_size()
        plan = timing.l2_plan(nbytes, timing.l2_bytes())
        row = {"dtype": dtype, "V": V, "L": L, "K": K, "bs": bs, "floor_us": round(nbytes / READ_TBPS / 1e6, 2)}
        sample, first = sample_reference(torch, x, K), None
        for name, spec in ds.items():
            row[name], out = design_table.cell(run_one, torch, spec, x, K, first, sample, plan, policy, name not in kos)
            first = first or out
        del x, first
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    keys = {"dtype": "dtype", "V": "V", "L": "L", "K": "K", "bs": "bs", "floor_us": "read floor µs"}
    design_table.report(rows, keys, list(ds), a.json)


if __name__ == "__main__":
    main()

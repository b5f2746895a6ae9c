"""The perf suite's stages: each is one `pytest perf --perf-stage NAME` run that fits in 10 minutes on the
H200 (tools/gpu_suite.sh runs them one by one). A case names its stages with @pytest.mark.perf_stage(...);
a case without the marker (the ceilings) runs in every stage. @pytest.mark.perf_full cases are left out by
--perf-quick."""

from __future__ import annotations

# name -> what it runs and the H200 duration it was sized for
STAGES = {
    "build": "ceilings, tree_build (GPU grid + CPU builders), tree_accept, CPU reference cases; ~3 min",
    "verify_h64": "ceilings, tree_verify H = 64 grid (Q x prefix x bs) with its comparators; ~6 min",
    "verify_h128": "ceilings, tree_verify H = 128 grid with its comparators; ~8 min",
    "verify_sweep": "ceilings, tree_verify TP shards (H 8/16), the budget sweep B 16..1024, FlexAttention; ~5 min",
    "verify_peers": "ceilings, tree_verify on chains beside FlashMLA and FlashInfer MLA (fa3, fa2): H 16/64/128 x "
    "Q 1..64 x prefix 8k/32k x bs 1/32/128, and mixed-length batches (ThunderMLA's four prefixes, log-normal "
    "batches of 32 and 128), every sm90a variant, 0.3 s per measurement (duration MODELLED ~8 min: not yet run)",
    "draft_topk_bf16": "ceilings, draft_topk on bf16 logits (V x L x K x bs) with its comparators (torch.topk + "
    "logsumexp on bf16 and after a cast to fp32, flashinfer.top_k + logsumexp), 0.1 s per measurement; ~6.5 min "
    "(an H100, 2026-12-06: 373 s)",
    "draft_topk_fp32": "ceilings, draft_topk on fp32 logits (the same grid) with its comparators, 0.1 s per "
    "measurement; ~7 min (an H100, 2026-12-06: about 400 s)",
    "step": "ceilings, one DDTree step replayed as a CUDA graph (kernels_cu.step) beside the users' round (GPU top-k, "
    "host build: Python heapq and C++, layouts back, the same verify and accept), bs 1/8/64 x B 16/64/256 x H 64/128 "
    "(duration as run on an H100 on 2026-12-06: about 20 s per H half at 0.2 s per measurement, so about 1 min at "
    "the suite's 0.3 s; not yet run on an H200)",
    "gate": "ceilings and a few tree_build cases without comparators (the gate's reruns); ~40 s",
    "gate_fallback": "ceilings and the tree_build select variants at two cells without comparators, their fallback "
    "rates (the fallback gate's runs: normal and planted); ~15 s a run (MODELLED from the gate's: not yet run)",
}


def selected(stages: set[str], full_only: bool, *, stage: str | None, quick: bool) -> bool:
    """Does a case with these stage names (empty: every stage) and perf_full flag run?"""
    if quick and full_only:
        return False
    return stage is None or not stages or stage in stages


def check(stage: str | None) -> None:
    if stage is not None and stage not in STAGES:
        raise ValueError(f"--perf-stage {stage!r}: not one of {', '.join(STAGES)}")

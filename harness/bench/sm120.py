"""tree_verify on an RTX PRO 6000 Blackwell (sm_120), MODELLED from the H200's measurements of what that GPU runs.

An sm_120 GPU runs the portable kernel with its 99 KB tiles; `portable_99k` is that build for sm_90, timed on the
H200 beside the H200's own variants. No sm_120 GPU has run here, so its times are a model, and every number it
rests on is a published peak, not a measurement:

- RTX PRO 6000 Blackwell (Workstation Edition): 1792 GB/s of GDDR7 (512-bit at 28 Gbps) and 4000 AI TOPS
  (FP4, with sparsity), NVIDIA's RTX PRO 6000 Blackwell datasheet; dense BF16 with FP32 accumulation is an
  eighth of that, 503.8 TFLOPS (half for the sparsity, half per halving of the operand width), the figure the
  NVIDIA RTX Blackwell architecture whitepaper lists;
- H200 SXM: 989.4 TFLOPS dense BF16 (1979 with sparsity) and 4.8 TB/s, NVIDIA's H200 datasheet.

Model: the kernel keeps the fraction of the tensor peak it reached on the H200 (its time scales by the ratio of
the dense BF16 peaks, 989.4 / 503.8 = 1.96), and no case runs faster than streaming its bytes once at sm_120's
peak bandwidth: t_sm120 = max(t_H200 x 989.4 / 503.8, bytes / 1792 GB/s). Not modelled: clocks under sm_120's
power limit, its 188 SMs against the split rule's 128 CTAs per request, its 128 MB L2 against the H200's 60 MB,
mma.sync's rate on sm_120 against Hopper's (where the H200's portable kernel also runs mma.sync, not wgmma).
"""

from __future__ import annotations

import dataclasses

RTX_PRO_6000_BF16_TFLOPS = 4030.0 / 8  # dense BF16 tensor, FP32 accumulation: FP4 sparse / 8
RTX_PRO_6000_GBS = 1792.0
H200_BF16_TFLOPS = 989.4
H200_GBS = 4800.0
VARIANT = "portable_99k"  # the build of what an sm_120 GPU runs, timed on the H200
TWIN_SUFFIX = "_99k"  # kernels_cu/specs.py names every build at sm_120's budget for sm_90 so (meta test)


def is_twin(case: dict) -> bool:
    """A case of a variant built at sm_120's budget: what an sm_120 GPU runs, not what the H200 would run (the
    H200's plots and end-to-end analysis leave it out; its tables and the sm_120 section show it)."""
    return str(case.get("variant", "")).endswith(TWIN_SUFFIX)


@dataclasses.dataclass(frozen=True)
class Line:
    shape: dict
    h200_us: float  # measured, portable_99k on the H200
    sm120_us: float  # MODELLED
    bound: str  # which term of the model gives sm120_us


def model_us(h200_us: float, nbytes: int) -> tuple[float, str]:
    """(modelled sm_120 µs, "tensor" or "bandwidth") for a case the H200 ran in h200_us moving nbytes."""
    tensor = h200_us * H200_BF16_TFLOPS / RTX_PRO_6000_BF16_TFLOPS
    stream = nbytes / (RTX_PRO_6000_GBS * 1e9) * 1e6
    return (tensor, "tensor") if tensor >= stream else (stream, "bandwidth")


def lines(cases: list[dict]) -> list[Line]:
    """The modelled sm_120 line of every tree_verify case measured for VARIANT (report.load's cases)."""
    out = []
    for c in cases:
        if c.get("op") != "tree_verify" or c.get("impl") != "cuda" or c.get("variant") != VARIANT:
            continue
        us = c["time"]["median_us"]
        sm120, bound = model_us(us, int(c.get("bytes") or 0))
        out.append(Line(dict(c["shape"]), us, sm120, bound))
    return out


def assumptions() -> list[str]:
    """The model's inputs, as the report lists them."""
    return [
        f"RTX PRO 6000 Blackwell: {RTX_PRO_6000_GBS:.0f} GB/s, {RTX_PRO_6000_BF16_TFLOPS:.1f} TFLOPS dense BF16 "
        "(NVIDIA's datasheet: 4000 AI TOPS FP4 with sparsity, divided by 8; the RTX Blackwell whitepaper's figure)",
        f"H200 SXM: {H200_BF16_TFLOPS} TFLOPS dense BF16, {H200_GBS / 1000:.1f} TB/s (NVIDIA's datasheet)",
        f"t_sm120 = max(t_H200 x {H200_BF16_TFLOPS} / {RTX_PRO_6000_BF16_TFLOPS:.1f}, bytes / "
        f"{RTX_PRO_6000_GBS:.0f} GB/s): the same fraction of the tensor peak as on the H200, never faster than one "
        "pass over the bytes at peak bandwidth",
        "not modelled: sustained clocks, 188 SMs against 128 CTAs per request, the 128 MB L2, mma.sync's rate on "
        "sm_120",
    ]

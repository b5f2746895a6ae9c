"""End-to-end model of one speculative decoding step (MODELLED, not measured): how much of the step each op
takes at concurrency 1..256, what each kernel's speedup gains end to end (Amdahl), and where a CPU-side tree
build starts to bound throughput, with and without CUDA graphs.

What is measured and what is assumed:
- measured (from the benchmark JSON when the case ran): the tree_build kernel and the CPU builders (Python
  heapq, C++) with their host<->device copies, the tree_accept kernel, the tree_verify kernel and its torch
  comparators, the copy and bf16 matrix ceilings;
- modelled: the rest of the target model's verify forward (weights streamed, matrix work, communication),
  from the model configs and the assumptions in `Assumptions`, which the report prints in full.
Times are µs. Every function here is pure: the report tool feeds it the cases of a run.
"""

from __future__ import annotations

import dataclasses
import math

from . import sm120

H200_COPY_GBS = 4300.0  # fallbacks when a run has no ceiling (notes: a copy kernel's rate on the H200)
H200_BF16_TFLOPS = 790.0  # torch.matmul 8192³ bf16 on random data, H200


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    layers: int
    heads: int
    experts: int  # routed
    top_k: int
    shared: int
    total_params: float
    active_params: float
    gpus: int  # H200s of the modelled deployment: FP8 weights plus a KV cache must fit

    @property
    def expert_params(self) -> float:
        """Parameters of one routed expert summed over the MoE layers: total = a + E·e, active = a + k·e."""
        return (self.total_params - self.active_params) / (self.experts - self.top_k)

    @property
    def always_params(self) -> float:
        """Parameters every token uses: attention, shared experts, dense layers, embeddings."""
        return self.active_params - self.top_k * self.expert_params


KIMI_K2 = Model("Kimi-K2", 61, 64, 384, 8, 1, 1.0e12, 32e9, gpus=16)  # ~1 TB of FP8 weights: two 8-GPU nodes
DEEPSEEK_V3 = Model("DeepSeek-V3", 61, 128, 256, 8, 1, 671e9, 37e9, gpus=8)  # ~0.67 TB: one node
MODELS = (KIMI_K2, DEEPSEEK_V3)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclasses.dataclass(frozen=True)
class Assumptions:
    gpus: int | None = None  # None: the model's own deployment size (Model.gpus)
    weight_bytes: float = 1.0  # FP8 weights, as both models are released
    budget: int = 64  # B: draft tree nodes per request (Q = 1 + B query rows)
    prefix: int = 8192  # context length per request
    matrix_efficiency: float = 0.6  # achieved share of the FP8 matrix rate (2 x the measured bf16 rate)
    attention_efficiency: float = 0.6  # tree_verify at this share of the bf16 rate when it was not measured
    comm_us_per_layer: float = 40.0  # expert-parallel dispatch + combine latency per MoE layer (2 x 20 µs)
    launches_per_step: int = 1500  # kernels a step launches without CUDA graphs (~25 a layer)
    launch_us: float = 4.0  # host cost of one eager launch

    def n_gpus(self, model: Model) -> int:
        return self.gpus or model.gpus

    def lines(self) -> list[str]:
        gpus = f"{self.gpus}" if self.gpus else ", ".join(f"{m.gpus} for {m.name}" for m in MODELS)
        return [
            f"H200 GPUs: {gpus}; data-parallel attention (MLA has one latent KV head, which tensor parallelism "
            "would replicate, so each GPU holds all heads of its ceil(c / GPUs) requests), expert-parallel MoE; "
            "each GPU's scheduler drafts, builds and accepts the trees of its own requests",
            f"FP8 weights ({self.weight_bytes:g} byte per parameter), streamed once per step at the measured copy "
            "rate; "
            "attention, shared-expert and dense weights on every GPU, routed experts split over the GPUs",
            "routed experts touched per layer by T tokens: E·(1 − (1 − k/E)^T) (uniform routing)",
            f"matrix work: 2 · active parameters · tokens, at {self.matrix_efficiency:.0%} of the FP8 rate "
            "(2 × the measured bf16 rate)",
            f"tree of B = {self.budget} drafts (Q = {self.budget + 1}), context {self.prefix} tokens",
            f"tree_verify per layer: the measured kernel (nearest Q and prefix, interpolated in batch size) or, "
            f"unmeasured, its useful FLOPs at {self.attention_efficiency:.0%} of the bf16 rate or its bytes at the "
            "copy rate, whichever is longer",
            f"communication: {self.comm_us_per_layer:g} µs per layer (dispatch + combine latency), not overlapped",
            f"without CUDA graphs the host spends {self.launches_per_step} launches × {self.launch_us:g} µs per step; "
            "with graphs that cost is gone",
            "the drafter's own forward is not modelled (counting it would lower every share below)",
        ]


# ------------------------------------------------------------------------------------------- lookups
def interpolate(points: dict[int, float], x: float) -> tuple[float, str] | None:
    """Log-log interpolation of measured (batch size -> µs) points; beyond the last point, linear in x
    (CPU builders are per request); before the first, the first. None without points."""
    if not points:
        return None
    xs = sorted(points)
    if x in points:
        return points[x], "measured"
    if x <= xs[0]:
        return points[xs[0]], "measured (smallest batch)"
    if x >= xs[-1]:
        return points[xs[-1]] * x / xs[-1], "extrapolated (linear in batch)"
    hi = next(i for i, v in enumerate(xs) if v > x)
    x0, x1 = xs[hi - 1], xs[hi]
    y0, y1 = points[x0], points[x1]
    t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0))), "interpolated"


def _by_bs(cases, op, impl, match, key=lambda c: c["time"]["median_us"]):
    """{bs: value} of an implementation's cases; with several kernel variants, the fastest (what a user of
    the kernels would run)."""
    out = {}
    for c in cases:
        if c.get("op") == op and c.get("impl", "").partition(":")[0] == impl and match(c["shape"]):
            v = key(c)
            if v is not None:
                bs = int(c["shape"]["bs"])
                out[bs] = min(v, out.get(bs, v))
    return out


def _comparator_by_bs(cases, op, name, match):
    def median(c):
        x = c.get("comparators", {}).get(name, {})
        return x["time"]["median_us"] if "time" in x else None

    return _by_bs(cases, op, "cuda", match, median)


def default_depth(shape: dict) -> bool:
    """A tree_build case at the drafters' depth L = 15 (the grid also has L = 32 cells at B = 64)."""
    return int(shape.get("L", 15)) == 15


def nearest(values, want):
    return min(values, key=lambda v: (abs(math.log(v) - math.log(want)), v)) if values else None


def op_sources(cases: list[dict], model: Model, a: Assumptions) -> dict:
    """Per op, a function bs -> (µs, source) or None, from the run's cases (the H200's own variants: not the
    builds at sm_120's budget)."""
    cases = [c for c in cases if not sm120.is_twin(c)]
    B = a.budget
    builds = [c for c in cases if c.get("op") == "tree_build"]
    Bs = sorted({int(c["shape"]["B"]) for c in builds})
    Bm = B if B in Bs else nearest(Bs, B)
    same_B = lambda s: int(s.get("B", -1)) == Bm and default_depth(s)
    src = {
        "tree_build kernel": _by_bs(cases, "tree_build", "cuda", same_B),
        "python heapq + copies": _comparator_by_bs(cases, "tree_build", "python_heapq+copies", same_B),
        "C++ builder (1 thread) + copies": _comparator_by_bs(cases, "tree_build", "cpp_1t+copies", same_B),
        "tree_accept kernel": _by_bs(cases, "tree_accept", "cuda", lambda s: True),
        "CPU walk (numpy)": _comparator_by_bs(cases, "tree_accept", "numpy_walk", lambda s: True),
    }
    if not src["python heapq + copies"]:  # a CPU-only run: the builder alone, copies unknown
        src["python heapq (no copies)"] = _by_bs(cases, "tree_build", "python_heapq", same_B)
        del src["python heapq + copies"]
    verify = [c for c in cases if c.get("op") == "tree_verify" and c.get("impl") == "cuda"
              and int(c["shape"].get("H", 0)) == model.heads and "sweep" not in c["shape"]]  # fmt: skip
    Qs = sorted({int(c["shape"]["Q"]) for c in verify})
    Ps = sorted({int(c["shape"]["prefix"]) for c in verify})
    Qm, Pm = nearest(Qs, B + 1), nearest(Ps, a.prefix)
    scale = lambda c: _verify_scale(c["shape"], model, a)
    match = lambda s: int(s["Q"]) == Qm and int(s["prefix"]) == Pm
    src["tree_verify kernel (per layer)"] = {
        int(c["shape"]["bs"]): c["time"]["median_us"] * scale(c) for c in verify if match(c["shape"])
    }
    best = {}
    for c in verify:
        if not match(c["shape"]):
            continue
        times = [x["time"]["median_us"] for x in c.get("comparators", {}).values() if "time" in x]
        if times:
            best[int(c["shape"]["bs"])] = min(times) * scale(c)
    src["best torch attention (per layer)"] = best
    src["_meta"] = {"tree_build_B": Bm, "verify_Q": Qm, "verify_prefix": Pm}
    return src


def _verify_scale(shape, model: Model, a: Assumptions) -> float:
    """Scale a measured verify time to the modelled Q and prefix by useful FLOPs (both compute-bound)."""
    q, p = int(shape["Q"]), int(shape["prefix"])
    return ((a.budget + 1) * (a.prefix + 8)) / (q * (p + 8))


# ------------------------------------------------------------------------------------------- the model
def verify_attention_model_us(model: Model, a: Assumptions, bs: int, copy_gbs: float, bf16_tflops: float) -> float:
    """Modelled tree_verify per layer for bs requests: max(FLOPs at the assumed efficiency, bytes at copy)."""
    Q = a.budget + 1
    flops = 2 * model.heads * bs * Q * (a.prefix + 8) * (576 + 512)
    nbytes = bs * (a.prefix + Q) * 576 * 2 + bs * Q * model.heads * (576 + 512) * 2
    return max(flops / (a.attention_efficiency * bf16_tflops * 1e12), nbytes / (copy_gbs * 1e9)) * 1e6


def dense_step_us(model: Model, a: Assumptions, c: int, copy_gbs: float, bf16_tflops: float) -> dict:
    """The target forward without its attention core: weights, matrix work, communication (µs per step)."""
    T = c * (a.budget + 1)
    G = a.n_gpus(model)
    touched = model.experts * (1 - (1 - model.top_k / model.experts) ** T)
    weight_bytes = (model.always_params + touched * model.expert_params / G) * a.weight_bytes
    weights_us = weight_bytes / (copy_gbs * 1e9) * 1e6
    flops = 2 * model.active_params * T / G
    matrix_us = flops / (a.matrix_efficiency * 2 * bf16_tflops * 1e12) * 1e6
    comm_us = a.comm_us_per_layer * model.layers
    return {
        "tokens": T,
        "experts_touched": touched,
        "weights_us": weights_us,
        "matrix_us": matrix_us,
        "comm_us": comm_us,
        "dense_us": max(weights_us, matrix_us) + comm_us,
    }


def analyse(cases: list[dict], model: Model, a: Assumptions = Assumptions(), ceilings: dict | None = None) -> dict:
    """Rows per concurrency: the step's parts, each op's share, Amdahl gains, and the CPU-bound points."""
    ceilings = ceilings or {}
    copy = ceilings.get("copy_gbs") or H200_COPY_GBS
    bf16 = ceilings.get("bf16_tflops") or H200_BF16_TFLOPS
    src = op_sources(cases, model, a)
    rows = []
    for c in CONCURRENCY:
        bs = math.ceil(c / a.n_gpus(model))
        d = dense_step_us(model, a, c, copy, bf16)
        look = {k: interpolate(v, bs) for k, v in src.items() if not k.startswith("_")}
        att = look.get("tree_verify kernel (per layer)")
        if att:
            att_us, att_src = att
            if (src["_meta"]["verify_Q"], src["_meta"]["verify_prefix"]) != (a.budget + 1, a.prefix):
                att_src += ", FLOP-scaled"
        else:
            att_us, att_src = verify_attention_model_us(model, a, bs, copy, bf16), "modelled (no measured kernel)"
        attention_us = att_us * model.layers
        verify_us = d["dense_us"] + attention_us
        build = look.get("tree_build kernel")
        accept = look.get("tree_accept kernel")
        build_us = build[0] if build else None
        accept_us = accept[0] if accept else 0.0
        gpu_step = verify_us + (build_us or 0.0) + accept_us
        host_launch = a.launches_per_step * a.launch_us
        row = {
            "c": c,
            "bs_per_gpu": bs,
            **d,
            "attention_us": attention_us,
            "attention_source": att_src,
            "verify_us": verify_us,
            "build_us": build_us,
            "accept_us": accept_us if accept else None,
            "step_us": gpu_step,
            "share": {
                "tree_verify (attention)": attention_us / gpu_step,
                "rest of the verify forward": d["dense_us"] / gpu_step,
                "tree_build kernel": (build_us or 0.0) / gpu_step,
                "tree_accept kernel": accept_us / gpu_step,
            },
            "cpu": {},
        }
        for name in ("python heapq + copies", "python heapq (no copies)", "C++ builder (1 thread) + copies"):
            hit = look.get(name)
            if not hit:
                continue
            cpu_us = hit[0]
            step_cpu = verify_us + cpu_us + accept_us
            eager_gpu = max(gpu_step, host_launch)  # the kernel hides in launch slack when the host is slower
            eager_cpu = cpu_us + max(verify_us + accept_us, host_launch)  # the host builds before it launches
            row["cpu"][name] = {
                "us": cpu_us,
                "source": hit[1],
                "share_of_step": cpu_us / step_cpu,
                "kernel_speedup": cpu_us / build_us if build_us else None,
                "gain_graphs": step_cpu / gpu_step - 1 if build_us is not None else None,
                "gain_eager": eager_cpu / eager_gpu - 1 if build_us is not None else None,
                "bounds_throughput_graphs": cpu_us > verify_us + accept_us,
                "bounds_throughput_eager": cpu_us + host_launch > verify_us + accept_us,
            }
        best = look.get("best torch attention (per layer)")
        if best and att and best[0] > att[0]:
            step_cmp = gpu_step + (best[0] - att[0]) * model.layers
            row["verify_gain"] = {"torch_us_per_layer": best[0], "speedup": best[0] / att[0],
                                  "gain": step_cmp / gpu_step - 1}  # fmt: skip
        rows.append(row)
    return {
        "model": model,
        "assumptions": a,
        "gpus": a.n_gpus(model),
        "rows": rows,
        "meta": src["_meta"],
        "copy_gbs": copy,
        "bf16_tflops": bf16,
        "ceilings_measured": bool(ceilings.get("copy_gbs")),
    }


def conclusions(result: dict) -> list[str]:
    """Plain sentences: which op matters at which concurrency, and where a CPU build bounds throughput."""
    rows = result["rows"]
    m = result["model"].name
    out = []
    att = [r["share"]["tree_verify (attention)"] for r in rows]
    out.append(
        f"{m}: the tree-verify attention is {min(att):.0%}–{max(att):.0%} of the step over concurrency "
        f"{rows[0]['c']}–{rows[-1]['c']}; the rest of the verify forward (weights, experts, communication) is "
        "the remainder."
    )
    if rows[0]["build_us"] is not None:
        b = [r["share"]["tree_build kernel"] for r in rows]
        out.append(f"{m}: the tree_build kernel is {min(b):.2%}–{max(b):.2%} of the step: it never matters end to end.")
    for name in ("python heapq + copies", "python heapq (no copies)", "C++ builder (1 thread) + copies"):
        have = [r for r in rows if name in r["cpu"]]
        if not have:
            continue
        sh = [r["cpu"][name]["share_of_step"] for r in have]
        gains = [r["cpu"][name]["gain_graphs"] for r in have if r["cpu"][name]["gain_graphs"] is not None]
        speed = [r["cpu"][name]["kernel_speedup"] for r in have if r["cpu"][name]["kernel_speedup"]]
        line = f"{m}: a CPU build ({name}) is {min(sh):.1%}–{max(sh):.1%} of the step"
        if gains and speed:
            line += (
                f"; the kernel is {min(speed):.0f}–{max(speed):.0f}× faster, which gains {min(gains):.1%}–"
                f"{max(gains):.1%} end to end with CUDA graphs (Amdahl: the gain is about the CPU build's share)"
            )
        out.append(line + ".")
        for mode in ("graphs", "eager"):
            bound = [r["c"] for r in have if r["cpu"][name][f"bounds_throughput_{mode}"]]
            what = "with CUDA graphs" if mode == "graphs" else "without CUDA graphs (host also launches)"
            out.append(
                f"{m}: overlapped with the GPU, the {name} build bounds throughput {what} "
                + (f"from concurrency {bound[0]}." if bound else "at no concurrency up to 256.")
            )
    gains = [r["verify_gain"] for r in rows if "verify_gain" in r]
    if gains:
        out.append(
            f"{m}: the tree_verify kernel over the best torch attention that fit: "
            f"{min(g['speedup'] for g in gains):.1f}–{max(g['speedup'] for g in gains):.1f}× per layer, "
            f"{min(g['gain'] for g in gains):.0%}–{max(g['gain'] for g in gains):.0%} end to end."
        )
    return out


def by_budget(cases: list[dict], model: Model, a: Assumptions = Assumptions(), ceilings: dict | None = None):
    """For every budget B the run measured tree_build at: each CPU builder's share of the step at the lowest
    and highest concurrency, the kernel's gain there (CUDA graphs), and the first concurrency at which the
    CPU build bounds an overlapped pipeline (graphs / eager)."""
    Bs = sorted({int(c["shape"]["B"]) for c in cases if c.get("op") == "tree_build"})
    out = []
    for B in Bs:
        res = analyse(cases, model, dataclasses.replace(a, budget=B), ceilings)
        if res["meta"]["tree_build_B"] != B:
            continue
        lo, hi = res["rows"][0], res["rows"][-1]
        for name in sorted({n for r in res["rows"] for n in r["cpu"]}):
            if name not in lo["cpu"] or name not in hi["cpu"]:
                continue
            first = {
                mode: next((r["c"] for r in res["rows"] if r["cpu"][name][f"bounds_throughput_{mode}"]), None)
                for mode in ("graphs", "eager")
            }
            out.append({"B": B, "builder": name, "share_lo": lo["cpu"][name]["share_of_step"],
                        "share_hi": hi["cpu"][name]["share_of_step"], "gain_lo": lo["cpu"][name]["gain_graphs"],
                        "gain_hi": hi["cpu"][name]["gain_graphs"], "c_lo": lo["c"], "c_hi": hi["c"],
                        "bound_graphs": first["graphs"], "bound_eager": first["eager"]})  # fmt: skip
    return out

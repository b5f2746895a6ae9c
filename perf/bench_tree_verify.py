"""tree_verify: the CUDA kernel (kernels_cu/tree_verify_ops.py) against the torch attentions a user would
run instead (harness/bench/verify_baselines.py), on the same device inputs in one run.

Shapes (bf16, page 64, a DDTree-shaped tree of Q nodes replicated over the batch):
- grid: H in {64, 128} x Q in {1, 2, 16, 64, 257} x prefix in {1k, 8k, 32k, 128k} x bs in {1, 8, 32, 128}
  (stages verify_h64, verify_h128);
- TP shards (memory-bound): H in {8, 16}, Q in {1, 4}, bs 128, prefix 8k; the budget sweep: Q = 1 + B for
  B in {16, ..., 1024}, prefix 8k, bs 8, H in {64, 128}; FlexAttention on four shapes (stage verify_sweep).
Useful FLOPs = 2·H·Σ_q(prefix + visible tree rows)·(576 + 512); bytes = cache rows read once + q + out.
Each grid and sweep shape times every kernel variant in the default selection (`portable`, and `sm90a` on an
sm_90 once it is in the default selection: kernels_cu/specs.py), but `portable_99k` (sm_120's tiles built for
sm_90) the sweep and the quick grid only (the whole grid would not fit a stage's 10 minutes);
the comparators run once per shape, beside `portable`.
Each implementation's output is spot-checked (request 0, first and last queries) against a float32
attention before it is timed; a comparator that would not fit in free memory, or runs out, says so.
Without the kernel module every GPU case skips with "tree_verify CUDA kernel not present". The CPU case
(any machine) times the numpy reference on one small Kimi-K2-shaped step.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import strategies as hh
from harness import timing
from harness.bench import record, targets
from harness.bench import verify_baselines as vb
from kernels_cu import specs
from reference import tree_build, tree_verify

pytestmark = pytest.mark.perf
K = 1024
GRID = [(H, Q, P, bs) for H in (64, 128) for Q in (1, 2, 16, 64, 257) for P in (K, 8 * K, 32 * K, 128 * K)
        for bs in (1, 8, 32, 128)]  # fmt: skip
TP_SHARDS = [(H, Q, 8 * K, 128) for H in (8, 16) for Q in (1, 4)]
SWEEP = [(H, 1 + B, 8 * K, 8) for H in (64, 128) for B in (16, 32, 64, 128, 256, 512, 1024)]
FLEX = [(H, Q, 8 * K, 8) for H in (64, 128) for Q in (16, 64)]
TOLERANCE = 2e-2  # bf16 inputs, float32 accumulation: relative norm error against float32
CHECK_POLICY = dict(warmup=1, min_reps=3, max_reps=30)


def _quick(H, Q, P, bs) -> bool:
    return P == 8 * K and bs in (1, 32) and Q in (2, 64)


def _param(H, Q, P, bs, stage, *, quick):
    marks = [pytest.mark.perf_stage(stage)] + ([] if quick else [pytest.mark.perf_full])
    return pytest.param(H, Q, P, bs, id=f"H{H}-Q{Q}-P{P // K}k-bs{bs}", marks=marks)


def grid_params():
    return [_param(*s, f"verify_h{s[0]}", quick=_quick(*s)) for s in GRID]


def sweep_params():
    out = [_param(*s, "verify_sweep", quick=s[1] == 1) for s in TP_SHARDS]
    return out + [_param(*s, "verify_sweep", quick=s[1] in (17, 257)) for s in SWEEP]


VARIANTS = tuple(s.variant for s in specs.for_op("tree_verify") if s.default)
TWINS = targets.other_arch_budget("tree_verify")


def _variant_runs_here(variant):
    from harness import impls

    why = impls.get(f"cuda:{variant}").why_not
    if why:
        pytest.skip(f"cuda:{variant}: {why}")


def _torch_cuda():
    try:
        import torch
    except ImportError as e:
        pytest.skip(f"torch not installed ({e}): the tree_verify benchmark builds its inputs with torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def _comparator(torch, name, case, rows, mask, policy, flush_bytes):
    """Time one comparator, or say why not: out of memory (predicted or hit), an error, a wrong result."""
    bs, Q, H, P = case.shape
    need = vb.estimate_bytes(name, bs, Q, H, P + Q)
    free, _total = torch.cuda.mem_get_info()
    if need > 0.85 * free:
        return record.comparator(error=f"out of memory: needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free")
    fn = vb.FUNCTIONS[name]
    try:
        err = vb.spot_check(case, fn(case, rows, mask), rows)
        if not err <= TOLERANCE:
            return record.comparator(error=f"wrong result: relative error {err:.3g} against float32")
        samples = timing.torch_times_us(lambda: fn(case, rows, mask), flush_bytes=flush_bytes, policy=policy)
    except torch.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return record.comparator(error=f"out of memory: {str(e).splitlines()[0][:200]}")
    except Exception as e:  # a comparator that fails (FlexAttention's head dims, compile errors) is recorded
        torch.cuda.empty_cache()
        return record.comparator(error=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}")
    torch.cuda.empty_cache()
    note = "includes gathering the visible rows from the paged cache"
    return record.comparator(timing.summary(samples, method="torch events, L2 flushed"), note=note)


def run_case(
    benchmark, ceilings, policy, with_comparators, H, Q, P, bs, comparators, extra_shape=None, variant="portable"
):
    torch = _torch_cuda()
    case = vb.make_case(bs, Q, H, P, device="cuda")
    rows = vb.row_index(case, "cuda")
    torch.cuda.synchronize()
    p = targets.prepare(
        "tree_verify", variant, case.q, case.kv, case.block_table, case.prefix_lens, case.visibility, case.scale
    )
    try:
        p.launch()
        out, _lse = targets.verify_outputs(p.results())
        err = vb.spot_check(case, out, rows)
        assert err <= TOLERANCE, f"[TV] kernel output is off by {err:.3g} (relative, request 0) at {case.shape}"
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=1)  # host wall: one call (it may take seconds)
        if not benchmark.enabled:
            return
        nbytes = vb.min_bytes(case)
        plan = timing.l2_plan(nbytes, timing.l2_bytes())
        dev, method = timing.device_times_us([p.launch], plan=plan, policy=policy)
    finally:
        p.finish()
    del out
    comps = {}
    if with_comparators and comparators:
        mask = vb.dense_mask(case, "cuda")
        cpolicy = timing.policy_from_env(**CHECK_POLICY, budget_s=policy.budget_s / 2)
        flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes()) if nbytes < timing.ROTATE_TARGET_BYTES else 0
        for name in comparators:
            comps[name] = _comparator(torch, name, case, rows, mask, cpolicy, flush)
        del mask
    shape = {"H": H, "Q": Q, "prefix": P, "bs": bs, "dtype": "bf16", "page": vb.PAGE, **(extra_shape or {})}
    record.put(
        benchmark,
        op="tree_verify",
        impl=f"cuda:{variant}",
        shape=shape,
        time=timing.summary(dev, method=f"{method}; {plan.describe(nbytes)}"),
        bytes_moved=nbytes,
        flops=vb.useful_flops(case),
        ceilings=ceilings.as_dict(),
        comparators=comps,
        extra={"kernel_rel_err": err, "softmax_scale": case.scale, "served_by": getattr(p, "served_by", None)},
    )
    del case, rows
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("H,Q,P,bs", grid_params())
def test_tree_verify(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, variant):
    _variant_runs_here(variant)
    if variant in TWINS and not _quick(H, Q, P, bs):
        pytest.skip(f"{variant} is timed on the quick grid and the sweep")
    benchmark.group = f"tree_verify H={H} Q={Q}"
    comparators = vb.COMPARATORS if variant == "portable" else ()
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, comparators, variant=variant)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("H,Q,P,bs", sweep_params())
def test_tree_verify_sweep(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, variant):
    """TP shards (H 8/16) and the budget sweep (Q = 1 + B) at prefix 8k."""
    _variant_runs_here(variant)
    benchmark.group = f"tree_verify sweep H={H}"
    kind = "tp_shard" if H < 64 else "budget"
    comparators = vb.COMPARATORS if variant == "portable" else ()
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, comparators,
             extra_shape={"sweep": kind, "B": Q - 1}, variant=variant)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.perf_stage("verify_sweep")
@pytest.mark.parametrize("H,Q,P,bs", [pytest.param(*s, id=f"H{s[0]}-Q{s[1]}-P8k-bs8") for s in FLEX])
def test_tree_verify_flex(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs):
    """FlexAttention attempted (compiled per shape, so on four shapes only), its error recorded."""
    benchmark.group = f"tree_verify flex H={H}"
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, ("flex", "absorb_eager"),
             extra_shape={"sweep": "flex"})  # fmt: skip


@pytest.mark.perf_stage("build")
def test_tree_verify_numpy_reference(benchmark):
    """The numpy reference on the CPU for one small Kimi-K2-shaped step (H = 64, Q = 17, prefix 512)."""
    rng = np.random.default_rng(0)
    Q, H, P = 17, 64, 512
    par = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, Q)], np.int32)
    vis = tree_build.layouts(par[None], hh.depths_of(par)[None], np.array([Q], np.int32), np.array([P], np.int32))[0]
    q, kv, bt = hh.build_paged_cache(rng, np.float32, np.array([P], np.int32), Q, 64, H)
    benchmark.group = "tree_verify cpu"
    out, lse = benchmark.pedantic(
        tree_verify.tree_verify, args=(q, kv, bt, np.array([P], np.int32), vis, vb.KIMI_K2_SCALE), rounds=3,
        warmup_rounds=0,
    )  # fmt: skip
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    if benchmark.enabled and benchmark.stats:
        keys = P * Q + int(tree_build.unpack_visibility(vis, Q).sum())
        record.put(
            benchmark,
            op="tree_verify",
            impl="numpy_reference",
            shape={"H": H, "Q": Q, "prefix": P, "bs": 1, "dtype": "fp32"},
            time=timing.summary([x * 1e6 for x in benchmark.stats.stats.data], where="host", method="pytest-benchmark"),
            flops=2 * H * keys * (576 + 512),
        )

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
- peers (stage verify_peers): the kernel on chain-shaped trees beside FlashMLA and FlashInfer MLA (fa3, fa2),
  whose causal mask is a chain: H in {16, 64, 128} x Q in {1, 2, 4, 16, 64} x prefix in {8k, 32k} x bs in
  {1, 32, 128}; on the tree grid the cascades (a peer over the prefix + a torch tree pass + a merge by lse)
  run beside the torch comparators. Peers are the adapters of adapters/ (harness/bench/peers.py), timed with
  their host launch hidden behind a sleep kernel, each checked against the float64 oracle at the timed shape
  (recorded beside its time; a wrong one is recorded as an error, not timed); missing ones say why.
- `--impl module:attribute` (or an installed entry point): an external implementation's tree_verify timed as a
  whole call on the quick shapes (chains where it declares chains only), beside nothing.
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
from harness.bench import Unavailable, peers, record, targets
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


# the default selection, and the planned mode beside sm90a (its figures next to the batch-invariant ones: what
# batch invariance costs)
VARIANTS = tuple(s.variant for s in specs.for_op("tree_verify") if s.default or not s.batch_invariant)
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


def _peer_comparator(torch, name, case, policy, flush_bytes):
    """Time one peer (harness/bench/peers.py) after checking its output against the float64 oracle here."""
    try:
        samples, chk = peers.time_checked(name, case, flush_bytes=flush_bytes, policy=policy)
    except peers.WrongResult as e:
        return record.comparator(error=e.args[0], check=e.args[1])
    except Unavailable as e:
        return record.comparator(error=str(e))
    except torch.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return record.comparator(error=f"out of memory: {str(e).splitlines()[0][:200]}")
    except Exception as e:  # a peer that fails on a shape is recorded with its error
        torch.cuda.empty_cache()
        return record.comparator(error=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}")
    torch.cuda.empty_cache()
    note = "planned once per shape (plan / scheduler metadata not timed); host launch hidden behind a sleep kernel"
    return record.comparator(timing.summary(samples, method="torch events, L2 flushed"), note=note, check=chk)


def _comparator(torch, name, case, rows, mask, policy, flush_bytes):
    """Time one comparator, or say why not: out of memory (predicted or hit), an error, a wrong result."""
    if name in peers.NAMES:
        return _peer_comparator(torch, name, case, policy, flush_bytes)
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
    benchmark, ceilings, policy, with_comparators, H, Q, P, bs, comparators, extra_shape=None, variant="portable",
    chain=False,
):  # fmt: skip
    torch = _torch_cuda()
    case = vb.make_case(bs, Q, H, P, device="cuda", chain=chain)
    rows = vb.row_index(case, "cuda") if case.uniform else None
    torch.cuda.synchronize()
    p = targets.prepare(
        "tree_verify", variant, case.q, case.kv, case.block_table, case.prefix_lens, case.visibility, case.scale
    )
    try:
        p.launch()
        out, lse = targets.verify_outputs(p.results())
        if case.uniform:
            err = vb.spot_check(case, out, rows)
            assert err <= TOLERANCE, f"[TV] kernel output is off by {err:.3g} (relative, request 0) at {case.shape}"
        else:  # a mixed-length batch: the float64 oracle of the peers' check (first and last requests)
            chk = peers.check(case, out, lse)
            assert chk["ok"], f"[TV] kernel output is off the float64 oracle at {case.shape}: {chk}"
            err = chk["max_out_err"]
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
        mask = vb.dense_mask(case, "cuda") if any(n not in peers.NAMES for n in comparators) else None
        cpolicy = timing.policy_from_env(**CHECK_POLICY, budget_s=policy.budget_s / 2)
        flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes()) if nbytes < timing.ROTATE_TARGET_BYTES else 0
        for name in comparators:
            comps[name] = _comparator(torch, name, case, rows, mask, cpolicy, flush)
        del mask
    P = int(np.max(P))  # a mixed-length batch's longest prefix (its prefixes in extra_shape)
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
    comparators = (*vb.COMPARATORS, *peers.CASCADES) if variant == "portable" else ()
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, comparators, variant=variant)


PEER_GRID = [(H, Q, P, bs) for H in (16, 64, 128) for Q in (1, 2, 4, 16, 64) for P in (8 * K, 32 * K)
             for bs in (1, 32, 128)]  # fmt: skip


def peer_params():
    quick = lambda H, Q, P, bs: P == 8 * K and (H, Q, bs) in ((64, 2, 1), (128, 4, 32), (16, 1, 128))
    return [_param(*s, "verify_peers", quick=quick(*s)) for s in PEER_GRID]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("H,Q,P,bs", peer_params())
def test_tree_verify_chain_vs_peers(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, variant):
    """The kernel on a chain of Q nodes beside the public MLA decode kernels on the same inputs."""
    _variant_runs_here(variant)
    benchmark.group = f"tree_verify chain H={H}"
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, P, bs, tuple(peers.CHAIN),
             extra_shape={"sweep": "chain", "tree": "chain"}, variant=variant, chain=True)  # fmt: skip


# Mixed-length batches (chains), beside the peers: ThunderMLA's four prefixes at H 128, Q 1/2/4, and seeded
# log-normal batches of 32 and 128 requests (median 8k, a tail cut at 128k) at H 64, Q 2.
MIXED_PREFIXES = (4641, 45118, 1730, 1696)


def lognormal_prefixes(bs: int, seed: int = 7) -> tuple[int, ...]:
    rng = np.random.default_rng(seed)
    return tuple(int(p) for p in np.clip(np.round(8 * K * np.exp(rng.standard_normal(bs))), 64, 128 * K))


def mixed_params():
    out = [pytest.param(128, Q, MIXED_PREFIXES, "thunder4", id=f"thunder4-H128-Q{Q}") for Q in (1, 2, 4)]
    return out + [pytest.param(64, 2, lognormal_prefixes(bs), f"lognormal{bs}", id=f"lognormal{bs}-H64-Q2",
                               marks=[] if bs == 32 else [pytest.mark.perf_full]) for bs in (32, 128)]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.perf_stage("verify_peers")
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("H,Q,prefixes,label", mixed_params())
def test_tree_verify_mixed_vs_peers(benchmark, ceilings, perf_policy, with_comparators, H, Q, prefixes, label,
                                    variant):  # fmt: skip
    """The kernel on a mixed-length batch of chains beside FlashMLA and FlashInfer MLA on the same inputs."""
    _variant_runs_here(variant)
    benchmark.group = f"tree_verify mixed {label}"
    run_case(benchmark, ceilings, perf_policy, with_comparators, H, Q, list(prefixes), len(prefixes),
             tuple(peers.CHAIN), extra_shape={"sweep": "mixed", "tree": "chain", "batch": label,
                                              "prefixes": list(prefixes)}, variant=variant, chain=True)  # fmt: skip


EXTERNAL = [(64, 2, 8 * K, 1), (128, 4, 8 * K, 32), (64, 17, 8 * K, 8)]


@pytest.mark.gpu
@pytest.mark.perf_stage("verify_peers")
@pytest.mark.parametrize("H,Q,P,bs", [pytest.param(*s, id=f"H{s[0]}-Q{s[1]}-P{s[2] // K}k-bs{s[3]}") for s in EXTERNAL])
def test_tree_verify_external(benchmark, ceilings, perf_policy, impl, H, Q, P, bs):
    """An external implementation (--impl module:attribute) timed as a whole call (its validation, planning
    and kernels) with the suite's timing, on a chain where it declares chains only, checked first."""
    if impl.declaration is None:
        pytest.skip(f"{impl.name}: the built-ins are timed by the grid cases")
    if impl.why_not:
        pytest.skip(f"{impl.name}: {impl.why_not}")
    if not impl.on_gpu:
        pytest.skip(f"{impl.name} takes host arrays: the perf suite times device implementations")
    caps = impl.caps("tree_verify")
    if caps is None:
        pytest.skip(f"{impl.name} has no tree_verify")
    from harness import external

    torch = _torch_cuda()
    chain = caps.trees == "chains"
    case = vb.make_case(bs, Q, H, P, device="cuda", chain=chain)
    if caps.dims.get("H") is not None and H not in caps.dims["H"]:
        pytest.skip(f"not claimed: {impl.name} declares H in {caps.dims['H']}")
    op = external.load(impl.name).ops["tree_verify"].fn
    host = (case.block_table, case.prefix_lens, case.visibility.view(np.int32))
    bt, pre, vis = (torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in host)
    vis = vis.view(torch.uint32) if hasattr(torch, "uint32") else vis
    fn = lambda: op(case.q, case.kv, bt, pre, vis, case.scale)
    out, lse = fn()
    chk = peers.check(case, out, lse)
    assert chk["ok"], f"[TV] {impl.name} is off the float64 oracle at {case.shape}: {chk}"
    benchmark.pedantic(fn, rounds=1)
    if not benchmark.enabled:
        return
    samples = timing.torch_times_us(fn, flush_bytes=max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes()),
                                    policy=perf_policy, hide_launch=True)  # fmt: skip
    benchmark.group = f"tree_verify external H={H}"
    record.put(
        benchmark, op="tree_verify", impl=impl.name,
        shape={"H": H, "Q": Q, "prefix": P, "bs": bs, "dtype": "bf16", "page": vb.PAGE,
               "tree": "chain" if chain else "ddtree", "sweep": "external"},
        time=timing.summary(samples, method="torch events, L2 flushed; the whole call (validation, plan, kernels)"),
        bytes_moved=vb.min_bytes(case), flops=vb.useful_flops(case), ceilings=ceilings.as_dict(),
        extra={"check": chk, "version": impl.version},
    )  # fmt: skip


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

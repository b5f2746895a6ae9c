"""draft_topk: the numpy reference on the CPU (any machine), the small reference case of the drafter's front end:
bf16 logits over the vocabularies of the issue's grid (32,000, DeepSeek-V3's 129,280, Kimi-K2's 163,840), bs 1,
L 1 and 4, K 8 and 64. The logits' bytes are recorded as bytes_moved, so the report shows the rate the reference
reads them at. On a GPU, every CUDA variant over the grid (V x L x K x bs x dtype; --perf-quick: a reduced grid)
beside torch.topk + logsumexp and flashinfer.top_k + logsumexp, the comparators run once per shape beside the
first variant (the report gives every variant's row their times). The CPU case runs in the `build` stage, the GPU
grid in `draft_topk_bf16` and `draft_topk_fp32` (one run each, about 6.5 minutes at 0.1 s per measurement)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from harness import timing
from harness.bench import record, targets
from reference import draft_topk as ref

pytestmark = [pytest.mark.perf]
BF16 = np.dtype(ml_dtypes.bfloat16)


def logits(bs, L, V, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((bs, L, V)) * 3).astype(np.float32).astype(BF16)


@pytest.mark.perf_stage("build")
@pytest.mark.parametrize("K", [8, 64], ids=lambda k: f"K{k}")
@pytest.mark.parametrize("L", [1, 4], ids=lambda n: f"L{n}")
@pytest.mark.parametrize("V", [32_000, 129_280, 163_840], ids=lambda v: f"V{v}")
def test_draft_topk_reference_cpu(benchmark, V, L, K):
    """The numpy reference (a stable sort and a float64 log-sum-exp per row) on one request."""
    x = logits(1, L, V)
    benchmark.group = f"draft_topk cpu V={V}"
    res = benchmark.pedantic(lambda: ref.draft_topk(x, K), rounds=5, warmup_rounds=1)
    assert res.top_ids.shape == (1, L, K) and (np.diff(res.top_logp, axis=-1) <= 0).all()
    if benchmark.enabled and benchmark.stats:
        record.put(
            benchmark,
            op="draft_topk",
            impl="numpy_reference",
            shape={"bs": 1, "L": L, "V": V, "K": K, "dtype": "bf16"},
            time=timing.summary([t * 1e6 for t in benchmark.stats.stats.data], where="host", method="pytest-benchmark"),
            bytes_moved=x.nbytes,
        )


# --- the CUDA kernels on the GPU, beside torch.topk + logsumexp and flashinfer.top_k + logsumexp -------------
GRID_V = (32_000, 129_280, 163_840)
GRID_L = (1, 8, 16, 32)
GRID_K = (8, 32, 64)
GRID_BS = (1, 8, 64, 256)
# The reduced grid (--perf-quick): Kimi-K2's vocabulary at L 16, the two K ends, the batch's ends and middle.
QUICK = {"V": (163_840,), "L": (16,), "K": (8, 64), "bs": (1, 64, 256)}


def _grid():
    for dtype in ("bf16", "fp32"):
        for V in GRID_V:
            for L in GRID_L:
                for K in GRID_K:
                    for bs in GRID_BS:
                        quick = V in QUICK["V"] and L in QUICK["L"] and K in QUICK["K"] and bs in QUICK["bs"]
                        marks = (pytest.mark.perf_stage(f"draft_topk_{dtype}"),)
                        marks += () if quick else (pytest.mark.perf_full,)
                        yield pytest.param(dtype, V, L, K, bs, id=f"{dtype}-V{V}-L{L}-K{K}-bs{bs}", marks=marks)


def _device_logits(torch, bs, L, V, dtype, seed=0):
    """Drafter-like logits on the GPU: normal, scale 3, rounded to the dtype (bf16 rounding makes exact ties)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((bs, L, V), generator=g, device="cuda", dtype=torch.float32) * 3
    return x.to(torch.bfloat16 if dtype == "bf16" else torch.float32)


def _torch_front_end(torch, x, K, cast):
    """What serving code writes: top-k of the logits (after a cast to float32 when `cast`), and each chosen logit
    minus the row's logsumexp."""
    y = x.float() if cast else x
    vals, ids = torch.topk(y, K, dim=-1)
    return vals.float() - torch.logsumexp(y.float() if not cast else y, dim=-1, keepdim=True), ids


def _flashinfer_front_end(torch, top_k, x, K):
    vals, ids = top_k(x.reshape(-1, x.shape[-1]), K)
    lse = torch.logsumexp(x.float(), dim=-1).reshape(-1, 1)
    return vals.float() - lse, ids


def _comparator(torch, fn, want_ids, flush_bytes, policy):
    """A torch front end's time, replayed from a CUDA graph (the launch gaps a serving step that captures its
    work would not pay do not count against it), with its ids checked as sets against the kernel's (torch's own
    tie order differs: DT.2.1 is the kernel's promise, not torch's)."""
    try:
        _lp, ids = fn()
        got = ids.reshape(-1, ids.shape[-1]).sort(dim=-1).values.int().cpu().numpy()  # rows, as the kernel's
        same = bool((got == np.sort(want_ids, axis=-1)).mean() > 0.999)
        check = {"ids_as_sets_match": same}
        samples = timing.torch_graph_times_us(fn, flush_bytes=flush_bytes, policy=policy)
    except Exception as e:  # a comparator that fails on a shape is recorded with its error
        torch.cuda.empty_cache()
        return record.comparator(error=f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}")
    torch.cuda.empty_cache()
    return record.comparator(timing.summary(samples, method="CUDA graph replay, torch events, L2 flushed"),
                             note="replayed from a CUDA graph", check=check)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("variant", targets.variants("draft_topk"))
@pytest.mark.parametrize(("dtype", "V", "L", "K", "bs"), list(_grid()))
def test_draft_topk(benchmark, ceilings, perf_policy, with_comparators, variant, dtype, V, L, K, bs):
    """The kernel on drafter-like logits (its ids checked against the reference on a sample of rows), its device
    time with the L2 flushed, the logits' bytes as bytes_moved (the report sets them against the read ceiling)."""
    torch = pytest.importorskip("torch")
    x = _device_logits(torch, bs, L, V, dtype)
    benchmark.group = f"draft_topk {dtype} V={V}"
    p = targets.prepare("draft_topk", variant, x, K)
    try:
        p.launch()
        got_ids = p.results().top_ids.reshape(bs * L, K).cpu().numpy()  # torch logits in, torch outputs out
        rows = x.reshape(bs * L, V)[:: max(1, (bs * L) // 4)][:4]  # a sample of rows against the reference
        host = rows.float().cpu().numpy() if dtype == "fp32" else rows.view(torch.int16).cpu().numpy().view(BF16)
        want = ref.draft_topk(host[None], K)
        flat = got_ids[:: max(1, (bs * L) // 4)][:4]
        assert (flat == want.top_ids[0]).all(), "draft_topk ids differ from the reference (DT.2.1)"
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=3, warmup_rounds=1)
        if not benchmark.enabled:
            return
        nbytes = x.numel() * x.element_size()
        plan = timing.l2_plan(nbytes, timing.l2_bytes())
        dev, method = timing.device_times_us([p.launch], plan=plan, policy=perf_policy)
    finally:
        p.finish()
    comps = {}
    if with_comparators and variant == targets.variants("draft_topk")[0]:  # once per shape: the report shares them
        flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes())
        ids = got_ids
        comps["torch_topk_lse"] = _comparator(torch, lambda: _torch_front_end(torch, x, K, False), ids, flush,
                                              perf_policy)  # fmt: skip
        if dtype != "fp32":
            comps["torch_topk_lse_fp32"] = _comparator(torch, lambda: _torch_front_end(torch, x, K, True), ids, flush,
                                                       perf_policy)  # fmt: skip
        try:
            from flashinfer.topk import top_k  # flashinfer.top_k; the trimmed offline package exports it only here
        except ImportError as e:
            comps["flashinfer_top_k_lse"] = record.comparator(error=f"flashinfer is not installed ({e})")
        else:
            comps["flashinfer_top_k_lse"] = _comparator(torch, lambda: _flashinfer_front_end(torch, top_k, x, K),
                                                        ids, flush, perf_policy)  # fmt: skip
    record.put(
        benchmark,
        op="draft_topk",
        impl=f"cuda:{variant}",
        shape={"bs": bs, "L": L, "V": V, "K": K, "dtype": dtype},
        time=timing.summary(dev, method=f"{method}; {plan.describe(nbytes)}"),
        bytes_moved=nbytes,
        ceilings=ceilings.as_dict(),
        comparators=comps,
    )

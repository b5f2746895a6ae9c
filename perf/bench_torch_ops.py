"""The operators' DDTree round (kdtree_torch: torch.ops.kdtree.draft_topk → tree_build → tree_verify →
tree_accept_commit with the advance) beside kernels_cu.step.Step, the same kernels and the same round, on
perf/bench_step.py's world (Kimi-K2's drafter shape and cache, prefix 8,192, targets that accept nothing).

In a graph: the operators' round captured in a torch.cuda.CUDAGraph and the step's own graph, each replayed on torch's
current stream and timed the same way (harness.timing.torch_times_us: CUDA events, an L2 flush and a sleep kernel
before each replay so the events bracket the device work): the time and `graph_diff_us`, what the operators' graph
costs beyond the step's. Eager: the host's time per call of each operator (enqueue only: a batch of calls after a
wait, the median per call) beside the step's prepared call of the same op launched alone (Step.launch_eager: the
kernels' own launches), so `eager_overhead_us` is what an operator adds (torch's dispatch, the shape key and the
prepared-call look-up, the outputs' allocation, the pointer move); and the eager round (four operator calls) beside
the step's four launches. Stage `step`."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from contract.step import OPS as STEP_OPS
from harness import timing
from harness.bench import record

pytestmark = [pytest.mark.perf, pytest.mark.gpu]
GRID = [(1, 64, 128), (8, 64, 128), (64, 64, 128), (8, 256, 128)]
CALLS, BATCHES = 20, 10  # eager host time: BATCHES batches of CALLS calls, each batch after a wait


def _ops_round(torch, w, flag, B, K):
    """The round with the operators (what the README shows), on the world's state."""
    from perf.bench_step import SCALE, L

    kd = torch.ops.kdtree
    top_logp, top_ids = kd.draft_topk(w.logits, K, flag)
    tree = kd.tree_build(top_logp, top_ids, w.roots, B, w.prefix, flag)
    out, lse = kd.tree_verify(w.q, w.kv, w.bt, w.prefix, tree[6], SCALE, w.max_context, flag)
    accept = kd.tree_accept_commit(tree[3], tree[8], tree[9], w.targets, L, w.kv, w.bt, w.prefix, flag, w.roots)
    return top_logp, tree, out, lse, accept


def _per_call_us(torch, fn) -> float:
    """Median host time per call of `fn` (enqueue only), over BATCHES batches of CALLS calls, each after a wait."""
    samples = []
    for _ in range(BATCHES):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - t) / CALLS * 1e6)
    torch.cuda.synchronize()
    return float(np.median(samples))


@pytest.mark.perf_stage("step")
@pytest.mark.parametrize(("bs", "B", "H"), GRID, ids=[f"bs{bs}-B{B}-H{H}" for bs, B, H in GRID])
def test_torch_ops_round(benchmark, ceilings, perf_policy, bs, B, H):
    torch = pytest.importorskip("torch")
    from cuda.bindings import driver

    from kdtree_torch import ops
    from kernels_cu.runtime import driver_result
    from kernels_cu.step import Step
    from perf.bench_step import K_IN, MAX_ROUNDS, PREFIX, SCALE, L, V, _World

    w = _World(torch, bs, B, H)
    K = K_IN
    benchmark.group = f"step H={H}"
    flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes())
    policy = dataclasses.replace(perf_policy, max_reps=min(perf_policy.max_reps, MAX_ROUNDS))
    flag = ops.new_error_flag()
    step = Step(w.kv, w.bt, w.prefix, w.roots, L=L, V=V, K=K, budget=B, H=H, softmax_scale=SCALE,
                max_context=w.max_context, logits_dtype="bfloat16")  # fmt: skip
    try:
        step.write(logits=w.logits, q=w.q, target_tokens=w.targets)
        step.replay()
        step.check()
        w.restore()
        got = _ops_round(torch, w, flag, B, K)  # the warm-up: each call prepared here
        ops.check(flag)
        assert (w.prefix.cpu().numpy() == PREFIX + 1).all() and got[4][0].shape == (bs,)
        w.restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _ops_round(torch, w, flag, B, K)
        w.restore()
        benchmark.pedantic(lambda: (graph.replay(), torch.cuda.synchronize()), rounds=3, warmup_rounds=1)
        if not benchmark.enabled:
            return
        exe = step._graph[1]  # the step's own graph, launched on torch's stream for the same event timing

        def step_replay():
            driver_result(driver.cuGraphLaunch(exe, driver.CUstream(torch.cuda.current_stream().cuda_stream)))

        in_graph = {}
        for name, fn in (("ops", graph.replay), ("step", step_replay)):
            w.restore()
            samples = timing.torch_times_us(fn, flush_bytes=flush, policy=policy, hide_launch=True)
            in_graph[name] = timing.summary(samples, method="torch events, L2 flushed, launch hidden")
        eager, bare = {}, {}
        top_logp, tree, _, _, _ = got
        top_ids = torch.ops.kdtree.draft_topk(w.logits, K, flag)[1]
        calls = {
            "draft_topk": lambda: torch.ops.kdtree.draft_topk(w.logits, K, flag),
            "tree_build": lambda: torch.ops.kdtree.tree_build(top_logp, top_ids, w.roots, B, w.prefix, flag),
            "tree_verify": lambda: torch.ops.kdtree.tree_verify(w.q, w.kv, w.bt, w.prefix, tree[6], SCALE,
                                                                w.max_context, flag),
            "tree_accept": lambda: torch.ops.kdtree.tree_accept_commit(tree[3], tree[8], tree[9], w.targets, L, w.kv,
                                                                       w.bt, w.prefix, flag, w.roots),
        }  # fmt: skip
        for slug in STEP_OPS:
            w.restore()
            eager[slug] = _per_call_us(torch, calls[slug])
            w.restore()
            bare[slug] = _per_call_us(torch, lambda s=slug: step.launch_eager(s))
        w.restore()
        eager_round = _per_call_us(torch, lambda: _ops_round(torch, w, flag, B, K))
        w.restore()
        step_eager_round = _per_call_us(torch, step.launch_eager)
        ops.check(flag)
        step.check()
    finally:
        step.close()
    ops_us, step_us = in_graph["ops"]["median_us"], in_graph["step"]["median_us"]
    extra = {
        "step_graph_us": step_us,
        "graph_diff_us": ops_us - step_us,
        "eager_call_us": eager,
        "deferred_launch_us": bare,
        "eager_overhead_us": {k: eager[k] - bare[k] for k in eager},
        "eager_round_us": eager_round,
        "step_eager_round_us": step_eager_round,
    }
    per_op = ", ".join(f"{k} {eager[k]:.1f} (+{eager[k] - bare[k]:.1f})" for k in eager)
    print(f"\n[torch-ops bs={bs} B={B} H={H}] graph: ops {ops_us:.1f} us, step {step_us:.1f} us, diff "
          f"{ops_us - step_us:+.1f} us; eager round {eager_round:.1f} us host vs step {step_eager_round:.1f} us; "
          f"per op call (host us, +over the bare launch): {per_op}")  # fmt: skip
    record.put(
        benchmark,
        op="step",
        impl="torch-ops",
        shape={"bs": bs, "B": B, "H": H, "prefix": PREFIX, "V": V, "L": L, "K": K, "dtype": "bf16"},
        time={**in_graph["ops"], "where": "device"},
        ceilings=ceilings.as_dict(),
        comparators={"step_graph": record.comparator(in_graph["step"], note="kernels_cu.step.Step's graph")},
        extra=extra,
    )

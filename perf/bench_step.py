"""One DDTree step on the device (kernels_cu.step: draft_topk → tree_build → tree_verify → tree_accept with its
commit and advance, one CUDA graph per round) against the round users run today, on Kimi-K2's drafter shape
(V 163,840, L 16, bf16 logits) and cache (bf16, prefix 8,192), over bs {1, 8, 64} × B {16, 64, 256} × H {64, 128}.

Per shape: the step's round on a host clock (the graph launch and a wait for it: what a serving loop sees), its
device time (events around each replay, L2 flushed before it), each op launched alone (its own graph, L2 flushed;
their sum and each one's share), and the host synchronisations counted inside a round (harness.host_syncs). The
users' round (host clock): torch.log_softmax on the float32 logits and torch.topk on the GPU, the top-k copied to
the host, the tree built there (the paper's per-request Python heapq build, and as a second row the C++ builder),
its layouts copied back into the same device buffers, then the same tree_verify and tree_accept launches: the two
rounds differ only in where the top-k and the tree are made. K_in is 32 (the drafter's candidates per depth).

The targets never match a draft (each round accepts 0 and advances each prefix by 1), so the state drifts by one
key per round; the measurements are capped at MAX_ROUNDS rounds from a restored state. Stage `step`."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from contract.step import OPS as STEP_OPS
from harness import host_syncs, timing
from harness.bench import cpu_builders, record

pytestmark = [pytest.mark.perf, pytest.mark.gpu]
V, L, K_IN, PREFIX, PAGE = 163_840, 16, 32, 8192, 64
SCALE = 0.1352
MAX_ROUNDS = 200  # per measurement, from a restored state: the prefix drifts by one key per round
GRID_BS, GRID_B, GRID_H = (1, 8, 64), (16, 64, 256), (64, 128)
TP8_H = (8, 16)  # Kimi-K2's and DeepSeek-V3's heads a GPU holds at tensor parallelism 8, at B 64 only (the report's
# per-model lines: tree_verify is the only op whose time depends on H)
QUICK = {"bs": (1, 64), "B": (64,), "H": (128,)}
USERS = {"users_round_python_heapq": "python_heapq", "users_round_cpp": "cpp_1t"}


def _grid():
    shapes = [(bs, B, H) for H in GRID_H for B in GRID_B for bs in GRID_BS]
    for bs, B, H in shapes + [(bs, 64, H) for H in TP8_H for bs in GRID_BS]:
        quick = bs in QUICK["bs"] and B in QUICK["B"] and H in QUICK["H"]
        marks = (pytest.mark.perf_stage("step"),) + (() if quick else (pytest.mark.perf_full,))
        yield pytest.param(bs, B, H, id=f"bs{bs}-B{B}-H{H}", marks=marks)


class _World:
    """The step's device state on torch: a bf16 cache of PREFIX keys per request plus room for the rounds."""

    def __init__(self, torch, bs, B, H):
        self.torch = torch
        g = torch.Generator(device="cuda").manual_seed(bs * 1000 + B + H)
        D = 1 + B
        self.max_context = PREFIX + D + 2 * MAX_ROUNDS + 64
        pages = -(-self.max_context // PAGE)
        self.kv = (torch.randn((bs * pages, PAGE, 576), generator=g, device="cuda") * 0.5).to(torch.bfloat16)
        self.bt = torch.randperm(bs * pages, generator=g, device="cuda").int().reshape(bs, pages)
        self.prefix0 = torch.full((bs,), PREFIX, dtype=torch.int32, device="cuda")
        self.roots0 = torch.randint(0, V, (bs,), generator=g, device="cuda", dtype=torch.int32)
        self.prefix, self.roots = self.prefix0.clone(), self.roots0.clone()
        self.logits = (torch.randn((bs, L, V), generator=g, device="cuda") * 3).to(torch.bfloat16)
        self.q = torch.randn((bs, D, H, 576), generator=g, device="cuda").to(torch.bfloat16)
        self.targets = torch.full((bs, D), V, dtype=torch.int32, device="cuda")  # never a draft: accept 0

    def restore(self):
        """The state before the first round (on torch's stream: waited for, as the step runs on its own)."""
        self.prefix.copy_(self.prefix0)
        self.roots.copy_(self.roots0)
        self.torch.cuda.synchronize()


def _users_round(torch, step, world, build, K):
    """One round as users run it, on a host clock's terms: the GPU top-k, the host build, the layouts back, the
    same verify and accept launches, and a wait for them."""
    tree_dev = step.outputs()["tree_build"]
    prefix_h = world.prefix0.cpu().numpy()
    roots_h = world.roots0.cpu().numpy()

    def one():
        lp = torch.log_softmax(world.logits.float(), dim=-1)
        vals, ids = torch.topk(lp, K, dim=-1)
        top_logp, top_ids = vals.cpu().numpy(), ids.int().cpu().numpy()  # synchronous copies to the host
        tree = build(top_logp, top_ids, roots_h, step.budget, prefix_h)()
        # every layout of the tree goes up, as a user's code hands the whole tree to the GPU
        for f in ("tokens", "first_child", "next_sibling", "visibility", "positions", "parents", "depths",
                  "n_nodes", "ranks", "scores"):  # fmt: skip
            x = np.ascontiguousarray(getattr(tree, f))
            dst = getattr(tree_dev, f)
            dst.copy_(torch.from_numpy(x.view(np.int32) if x.dtype == np.uint32 else x))
        world.restore()
        step.launch_eager("tree_verify")
        step.launch_eager("tree_accept")
        step.sync()

    return one


@pytest.mark.parametrize(("bs", "B", "H"), list(_grid()))
def test_step(benchmark, ceilings, perf_policy, with_comparators, bs, B, H):
    torch = pytest.importorskip("torch")
    from kernels_cu.step import Step

    world = _World(torch, bs, B, H)
    K = K_IN
    benchmark.group = f"step H={H}"
    policy = dataclasses.replace(perf_policy, max_reps=min(perf_policy.max_reps, MAX_ROUNDS))
    flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes())
    step = Step(world.kv, world.bt, world.prefix, world.roots, L=L, V=V, K=K, budget=B, H=H, softmax_scale=SCALE,
                max_context=world.max_context, logits_dtype="bfloat16")  # fmt: skip
    try:
        step.write(logits=world.logits, q=world.q, target_tokens=world.targets)
        step.replay()
        step.check()  # the inputs are good: a round accepts 0 and advances each prefix by one
        assert (world.prefix.cpu().numpy() == PREFIX + 1).all()
        world.restore()
        with host_syncs.counting() as counts:
            for _ in range(3):
                step.replay()
        step.sync()
        syncs = host_syncs.blocking(counts)
        world.restore()
        benchmark.pedantic(lambda: (step.replay(), step.sync()), rounds=3, warmup_rounds=1)
        if not benchmark.enabled:
            return
        world.restore()
        wall = timing.host_times_us(lambda: (step.replay(), step.sync()), policy)
        world.restore()
        plan = timing.L2Plan("flush", 1, flush)
        dev, method = timing.device_times_us([step.replay], plan=plan, policy=policy)
        alone = {}
        for slug in STEP_OPS:
            world.restore()
            samples, _ = timing.device_times_us([lambda s=slug: step.launch_eager(s)], plan=plan, policy=policy)
            alone[slug] = timing.summary(samples)["median_us"]
        step.check()
        comps = {}
        if with_comparators:
            for name, builder in USERS.items():
                try:
                    build = cpu_builders.BUILDERS[builder]
                    fn = _users_round(torch, step, world, build, K)
                    how = "host clock, synchronous copies, pageable memory"
                    users_policy = dataclasses.replace(policy, max_reps=20)
                    samples, how = timing.host_times_capped_us(fn, users_policy, 5.0, how)
                    comps[name] = record.comparator(timing.summary(samples, where="host", method=how),
                                                    note=cpu_builders.NOTES[builder])  # fmt: skip
                except Exception as e:  # a builder that cannot run here (the C++ library not built) is recorded
                    comps[name] = record.comparator(error=f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        step.close()
    dev_med = timing.summary(dev)["median_us"]
    total = sum(alone.values())
    record.put(
        benchmark,
        op="step",
        impl="cuda:step",
        shape={"bs": bs, "B": B, "H": H, "prefix": PREFIX, "V": V, "L": L, "K": K, "dtype": "bf16"},
        time=timing.summary(wall, where="host", method="host clock: the graph's launch and a wait for it"),
        ceilings=ceilings.as_dict(),
        comparators=comps,
        extra={
            "device_us": dev_med,
            "device_method": f"{method}; flush {flush} bytes",
            "alone_us": alone,
            "sum_alone_us": total,
            "graph_over_sum": dev_med / total if total else None,
            "share": {k: v / total for k, v in alone.items()} if total else {},
            "host_syncs_in_3_rounds": syncs,
            "graph_launches_in_3_rounds": counts["graph_launch"],
            "kernel_launches_outside_graph_in_3_rounds": counts["kernel_launch"],
        },
    )

"""tree_accept + commit: CUDA kernel time for bs in {1, 64, 256}, B = 64, L = 15, bf16 latent cache
(576 values a row, page 64, prefix 1024), with the walk going deep (planted matches). The commit moves
accept_len rows of 1152 bytes per request; achieved GB/s is set against the measured copy rate.
Comparator: the numpy reference's walk on the CPU (no commit: that needs the cache on the device).
A CPU case (any machine) times the reference walk alone."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from harness import strategies as hh
from harness import timing
from harness.bench import record, targets
from harness.compare import assert_bit_exact
from reference import tree_accept as ref

pytestmark = [pytest.mark.perf, pytest.mark.perf_stage("build")]
B, L = 64, 15


def inputs(bs, seed=0):
    rng = np.random.default_rng(seed)
    D = B + 1
    par = np.full((bs, D), -1, np.int32)
    fc, ns = np.full((bs, D), -1, np.int32), np.full((bs, D), -1, np.int32)
    tokens = rng.integers(0, 1000, (bs, D)).astype(np.int32)
    target = rng.integers(0, 1000, (bs, D)).astype(np.int32)
    for b in range(bs):
        p = np.array(
            [-1]
            + [max(0, i - 1 - int(rng.integers(0, 3))) if i <= L else int(rng.integers(0, i)) for i in range(1, D)],
            np.int32,
        )
        par[b] = p
        fc[b], ns[b] = hh.links_of(p, D)
        for u in range(D):  # plant the target at the first child, so walks go deep
            if fc[b, u] >= 0:
                target[b, u] = tokens[b, fc[b, u]]
    depth = max(int(hh.depths_of(par[b]).max()) for b in range(bs))
    return tokens, fc, ns, target, depth


def paged_cache(bs, seed=0):
    rng = np.random.default_rng(seed + 1)
    prefix = np.full(bs, 1024, np.int32)
    _, kv, bt = hh.build_paged_cache(rng, ml_dtypes.bfloat16, prefix, B + 1, 64, 1, spare_pages=0)
    return kv, bt, prefix


@pytest.mark.gpu
@pytest.mark.parametrize("variant", targets.variants("tree_accept"))
@pytest.mark.parametrize("bs", [pytest.param(bs, id=f"bs{bs}") for bs in (1, 64, 256)])
def test_tree_accept_commit(benchmark, ceilings, perf_policy, cpu_policy, with_comparators, bs, variant):
    tokens, fc, ns, target, depth = inputs(bs)
    kv, bt, prefix = paged_cache(bs)
    benchmark.group = "tree_accept+commit B=64"
    want_kv = kv.copy()
    want = ref.tree_accept(
        tokens, fc, ns, target, max_depth=depth, kv_cache=want_kv, block_table=bt, prefix_lens=prefix
    )
    p = targets.prepare(
        "tree_accept", variant, tokens, fc, ns, target, max_depth=depth, kv_cache=kv, block_table=bt, prefix_lens=prefix
    )
    try:
        p.launch()  # the first launch is the one checked: the commit is not idempotent
        got = p.results()
        assert_bit_exact(got.accept_path, want.accept_path, what="accept_path", spec_id="TA.2.1")
        assert_bit_exact(kv, want_kv, what="kv_cache", spec_id="TA.3.1")
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=10, warmup_rounds=2)
        if not benchmark.enabled:
            return
        rows = int(want.accept_len.sum())
        nbytes = 2 * rows * 1152 + tokens.nbytes * 4
        plan = timing.l2_plan(nbytes, timing.l2_bytes())
        dev, method = timing.device_times_us([p.launch], plan=plan, policy=perf_policy)
    finally:
        p.finish()
    comps = {}
    if with_comparators:
        walk = timing.host_times_us(lambda: ref.walk(tokens, fc, ns, target, depth), cpu_policy)
        comps["numpy_walk"] = record.comparator(
            timing.summary(walk, where="host", method="host clock"), note="reference walk on the CPU, no commit"
        )
    record.put(
        benchmark,
        op="tree_accept",
        impl=f"cuda:{variant}",
        shape={"bs": bs, "B": B, "L": L, "prefix": 1024, "dtype": "bf16"},
        time=timing.summary(dev, method=f"{method}; {plan.describe(nbytes)}"),
        bytes_moved=nbytes,
        ceilings=ceilings.as_dict(),
        comparators=comps,
        extra={"mean_accept_len": float(want.accept_len.mean())},
    )


@pytest.mark.parametrize("bs", [pytest.param(bs, id=f"bs{bs}") for bs in (1, 64)])
def test_tree_accept_walk_cpu(benchmark, cpu_policy, bs):
    """The reference walk alone on the CPU (any machine): the small reference case of tree_accept."""
    tokens, fc, ns, target, depth = inputs(bs)
    benchmark.group = "tree_accept cpu"
    res = benchmark.pedantic(lambda: ref.walk(tokens, fc, ns, target, depth), rounds=20, warmup_rounds=1)
    assert (res.accept_len >= 1).all()  # the planted matches make every walk accept
    if benchmark.enabled and benchmark.stats:
        record.put(
            benchmark,
            op="tree_accept",
            impl="numpy_walk",
            shape={"bs": bs, "B": B, "L": L},
            time=timing.summary([x * 1e6 for x in benchmark.stats.stats.data], where="host", method="pytest-benchmark"),
            extra={"mean_accept_len": float(res.accept_len.mean())},
        )

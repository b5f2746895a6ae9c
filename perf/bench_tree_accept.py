"""tree_accept + commit: CUDA kernel time (events) for bs in {1, 64, 256}, B = 64, L = 15, bf16 latent cache
(576 values a row, page 64, prefix 1024), with the walk going deep (planted matches). The commit moves
accept_len rows of 1152 bytes per request; achieved GB/s is reported against the measured copy rate."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from harness import strategies as hh
from harness import timing
from harness.compare import assert_bit_exact
from kernels_cu import specs
from reference import tree_accept as ref

pytestmark = [pytest.mark.perf, pytest.mark.gpu]
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
    prefix = np.full(bs, 1024, np.int32)
    _, kv, bt = hh.build_paged_cache(rng, ml_dtypes.bfloat16, prefix, D, 64, 1, spare_pages=0)
    return tokens, fc, ns, target, depth, kv, bt, prefix


@pytest.mark.parametrize("variant", [s.variant for s in specs.for_op("tree_accept")])
@pytest.mark.parametrize("bs", [1, 64, 256])
def test_tree_accept_commit(benchmark, bs, variant):
    from kernels_cu import ops

    tokens, fc, ns, target, depth, kv, bt, prefix = inputs(bs)
    benchmark.group = "tree_accept+commit B=64"
    want_kv = kv.copy()
    want = ref.tree_accept(
        tokens, fc, ns, target, max_depth=depth, kv_cache=want_kv, block_table=bt, prefix_lens=prefix
    )
    p = ops.prepare(
        "tree_accept", variant, tokens, fc, ns, target, max_depth=depth, kv_cache=kv, block_table=bt, prefix_lens=prefix
    )
    try:
        p.launch()  # the first launch is the one checked: the commit is not idempotent
        got = p.results()
        assert_bit_exact(got.accept_path, want.accept_path, what="accept_path", spec_id="TA.2.1")
        assert_bit_exact(kv, want_kv, what="kv_cache", spec_id="TA.3.1")
        dev = timing.summary(timing.event_times_us(p.launch))
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=20, warmup_rounds=3)
    finally:
        p.finish()
    rows = int(want.accept_len.sum())
    nbytes = 2 * rows * 1152 + tokens.nbytes * 4
    benchmark.extra_info.update(
        {
            "bs": bs,
            "B": B,
            "variant": variant,
            "mean_accept_len": float(want.accept_len.mean()),
            "device_us": dev,
            "achieved_gbs": nbytes / (dev["median_us"] * 1e-6) / 1e9,
            "copy_bandwidth_gbs": timing.copy_bandwidth_gbs(),
        }
    )

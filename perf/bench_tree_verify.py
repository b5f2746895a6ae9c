"""tree_verify: no CUDA kernel yet (planned). This times the numpy reference on the CPU for one small
Kimi-K2-shaped step (H = 64, Q = 17, prefix 512), as the baseline a kernel will be compared against, and
records the useful FLOPs so that a kernel's TFLOP/s can be set beside it in the same table."""

from __future__ import annotations

import numpy as np
import pytest

from harness import strategies as hh
from reference import tree_build, tree_verify

pytestmark = pytest.mark.perf


def test_tree_verify_numpy_reference(benchmark):
    rng = np.random.default_rng(0)
    Q, H, P = 17, 64, 512
    par = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, Q)], np.int32)
    vis = tree_build.layouts(par[None], hh.depths_of(par)[None], np.array([Q], np.int32), np.array([P], np.int32))[0]
    q, kv, bt = hh.build_paged_cache(rng, np.float32, np.array([P], np.int32), Q, 64, H)
    benchmark.group = "tree_verify"
    out, lse = benchmark.pedantic(
        tree_verify.tree_verify, args=(q, kv, bt, np.array([P], np.int32), vis, 0.130861), rounds=3, warmup_rounds=1
    )
    keys = P * Q + int(tree_build.unpack_visibility(vis, Q).sum())
    benchmark.extra_info.update({"Q": Q, "H": H, "prefix": P, "useful_flop": 2 * H * keys * (576 + 512)})
    assert np.isfinite(out).all() and np.isfinite(lse).all()

"""tree_build: the CUDA kernel against the CPU builder people use today (Python heapq, one request at a time,
as SGLang's DDTree builders do it), side by side in one run. L = 15 (the DFlash-b16 drafters), K_in = B,
prefix_lens = 0 (the FULL_MASK layout alone is then D^2 bytes per request; longer prefixes add bytes).

Device time = CUDA events around the kernel launch alone (inputs already on the device, as they are when
the drafter's top-k produced them), median of 50 after 5 warm-ups. The CPU time is the numpy/heapq
reference building the same batch with every output layout. speedup = CPU median / kernel median.
The wall time pytest-benchmark reports is launch + stream sync from Python (host overhead included).
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from contract import Tree
from harness import strategies as hh
from harness import timing
from harness.compare import assert_bit_exact
from kernels_cu import specs
from reference import tree_build as ref

pytestmark = [pytest.mark.perf, pytest.mark.gpu]
L = 15


def inputs(bs, B, seed=0):
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, B), "bf16", 0.0)
    ids = np.stack([np.stack([rng.choice(160_000, B, replace=False) for _ in range(L)]) for _ in range(bs)])
    return lp, ids.astype(np.int32), rng.integers(0, 160_000, bs).astype(np.int32), B, np.zeros(bs, np.int32)


@pytest.mark.parametrize("variant", [s.variant for s in specs.for_op("tree_build")])
@pytest.mark.parametrize("B", [16, 64, 256, 1024])
@pytest.mark.parametrize("bs", [1, 4, 16, 64, 256])
def test_tree_build_vs_python_heapq(benchmark, bs, B, variant):
    from kernels_cu import ops

    args = inputs(bs, B)
    benchmark.group = f"tree_build B={B} {variant}"
    p = ops.prepare("tree_build", variant, *args)
    try:
        dev = timing.summary(timing.event_times_us(p.launch))
        benchmark.pedantic(lambda: (p.launch(), p.sync()), rounds=20, warmup_rounds=3)
    finally:
        got = p.finish()
    cpu = timing.cpu_time_us(lambda: ref.tree_build(*args), rounds=5 if bs * B <= 4096 else 1)
    want = ref.tree_build(*args)
    for f in ("parents", "scores", "visibility"):  # refcheck: what was timed is right
        assert_bit_exact(getattr(got, f), getattr(want, f), what=f, spec_id="TB.2.3")
    nbytes = sum(np.asarray(getattr(got, f)).nbytes for f in Tree.FIELDS) + sum(a.nbytes for a in args[:3])
    benchmark.extra_info.update(
        {
            "bs": bs,
            "B": B,
            "variant": variant,
            "L": L,
            "device_us": dev,
            "cpu_heapq_us_median": statistics.median(cpu),
            "speedup_vs_heapq": statistics.median(cpu) / dev["median_us"],
            "bytes_moved": nbytes,
            "achieved_gbs": nbytes / (dev["median_us"] * 1e-6) / 1e9,
            "copy_bandwidth_gbs": timing.copy_bandwidth_gbs(),
        }
    )

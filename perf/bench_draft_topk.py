"""draft_topk: the numpy reference on the CPU (any machine), the small reference case of the drafter's front end:
bf16 logits over the vocabularies of the issue's grid (32,000, DeepSeek-V3's 129,280, Kimi-K2's 163,840), bs 1,
L 1 and 4, K 8 and 64. The logits' bytes are recorded as bytes_moved, so the report shows the rate the reference
reads them at. The CUDA kernel's grid (beside torch.topk + logsumexp and flashinfer.top_k) comes with the kernel
(issue 32); until then this is the op's only benchmark."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from harness import timing
from harness.bench import record
from reference import draft_topk as ref

pytestmark = [pytest.mark.perf, pytest.mark.perf_stage("build")]
BF16 = np.dtype(ml_dtypes.bfloat16)


def logits(bs, L, V, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((bs, L, V)) * 3).astype(np.float32).astype(BF16)


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

"""The engine's copy of the contract limits (engine/include/kdtree/contract.hpp) equals the Python one."""

import pathlib
import re

from reference import validate as v

HEADER = pathlib.Path(__file__).resolve().parent.parent / "engine" / "include" / "kdtree" / "contract.hpp"
PAIRS = {
    "kMaxBatch": v.MAX_BATCH,
    "kMaxBudget": v.MAX_BUDGET,
    "kMaxDepth": v.MAX_DEPTH,
    "kMaxTopK": v.MAX_TOPK,
    "kLatent": v.LATENT,
    "kRope": v.ROPE,
}


def test_engine_limits_equal_the_contract():
    text = HEADER.read_text()
    for name, want in PAIRS.items():
        m = re.search(rf"constexpr int64_t {name} = (\d+);", text)
        assert m, f"{name} is missing from {HEADER.name}"
        assert int(m.group(1)) == want, f"{name} = {m.group(1)} in {HEADER.name}, the contract says {want}"
    assert "kHeadDim = kLatent + kRope" in text

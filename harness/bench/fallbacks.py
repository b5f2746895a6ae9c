"""How often tree_build's select variants fall back to the heap replay, on the inputs a benchmark case times.

A select variant (select_verify, select_warp, select_race, their _99k twins) selects the tree's B nodes in parallel,
checks that the heap would pop exactly those, and replays the heap where a check fails or its candidates overflow.
Both ways the tree is the reference's, so a change that makes the selection fail more often stays exact and shows
only as time, and only where the replay is slower. The benchmark therefore records the rate beside the time, and
the regression gate fails on any rise of it (harness/bench/gate.py).

Two input families per case:
- drafter: the case's own inputs (perf/bench_tree_build.py's bf16-quantized log-prob rows, the ones timed);
- adversarial: the same rows with one token certain in every row (log-prob 0.0 at rank 0, every depth), so every
  node's chain of certain tokens ties its score and is popped right after it: every path of the tree reaches depth
  L (all but the one the budget cuts), and every score sits in a tie group that only the rank tuples order (the
  deep, tie-heavy trees where the selection does the most work and is likeliest to give up: lab/PERF_NOTES.md).

The counting itself (the reporting build, TB_FALLBACK = 2, and its n_nodes codes) is
kernels_cu.tree_build_ops.fallbacks(), shared with lab/tree_build_dev.py's `fallbacks`.
"""

from __future__ import annotations

import numpy as np

from . import record, targets

FAMILIES = {
    "drafter": "the case's own inputs (the ones timed)",
    "adversarial": "the case's inputs with log-prob 0.0 at rank 0 of every row: every path reaches depth L",
}


def adversarial(args: tuple) -> tuple:
    """A tree_build call's positional arguments (top_logp, top_ids, root_tokens, budget, prefix_lens, ...) with one
    certain token in every row: rank 0's log-prob set to 0.0 (rows stay non-increasing: every log-prob is <= 0)."""
    lp = np.array(args[0], dtype=np.float32, copy=True)
    lp[..., 0] = np.float32(0.0)
    return (lp, *args[1:])


def family_args(family: str, args: tuple) -> tuple:
    if family == "drafter":
        return args
    if family == "adversarial":
        return adversarial(args)
    raise ValueError(f"no input family {family!r} (have {', '.join(FAMILIES)})")


def measure(variant: str, args: tuple) -> dict:
    """{family: record.fallback(...)} of tree_build variant's reporting build, one launch per family on args."""
    return {f: record.fallback(**targets.fallbacks("tree_build", variant, *family_args(f, args))) for f in FAMILIES}

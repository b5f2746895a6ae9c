"""How well a cheap look at the rank-0 chain predicts a deep tree (CPU only; the design question of issue 12's
race at B = 64, lab/PERF_NOTES.md): where the tree reaches depth L the selection pays a level loop per depth
and loses to the replay at small B, so a kernel could skip the race there if it could tell in a few warp steps.

  python3 -m lab.tree_build_depth_model [--requests N]

The predictor reads only the log-probs: the chain c[d] = c[d-1] + lp[d][0] (the reference's order), and the
one-deviation paths (the chain to depth e-1, rank r >= 1 at depth e, then rank 0 down to depth j >= e) that score
above the chain's deepest node c[L-1] (scores summed in any order: a heuristic, exactness is the kernel's); fewer
than B - L of them is necessary for that node to be in the tree (they, and the L - 1 chain nodes above it, all
come before it), so "deep" = L + (their count) <= B: L(L+1)/2 searches of a sorted row, 4 per lane of a warp at
L = 15. Printed per input family and budget:
how many trees reach depth L, and the predictor's true / false positives and misses against the reference heap.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from lab.tree_build_dev import bench_inputs, drafter_inputs, peaked_inputs
from reference import tree_build as ref


def predicts_deep(lp: np.ndarray, B: int) -> bool:
    """The cheap test: could the chain's deepest node be in the tree (see the module docstring)?"""
    L = lp.shape[0]
    c, prev, better = 0.0, 0.0, 0
    chain = []
    for d in range(L):
        c = ref.first_score(lp[0, 0]) if d == 0 else ref.child_score(c, lp[d, 0])
        chain.append(c)
    last = chain[-1]
    if last == float("-inf"):
        return False
    for e in range(L):  # a deviation to rank r at depth e, then rank 0 down to depth j: (e, j) a sorted row each
        prev = chain[e - 1] if e > 0 else 0.0
        row = lp[e, 1:B].astype(np.float64)
        for j in range(e, L):
            better += int(np.count_nonzero(prev + row + (chain[j] - chain[e]) > last))
    return L + better <= B


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    a = ap.parse_args(argv)
    for name, make in (("bench", bench_inputs), ("peaked", peaked_inputs), ("drafter_bf16", drafter_inputs)):
        for B in (16, 32, 64, 128, 256):
            lp, ids = make(a.requests, B)[:2]
            L = lp.shape[1]
            rows = {"inputs": name, "B": B, "L": L, "requests": a.requests}
            deep = pred = hit = 0
            for b in range(a.requests):
                depths = ref.build_one(lp[b], ids[b], B)[1]
                is_deep = max(depths, default=0) == L
                p = predicts_deep(lp[b], B)
                deep += is_deep
                pred += p
                hit += is_deep and p
            rows.update(deep=deep, predicted=pred, true_positive=hit, false_positive=pred - hit, missed=deep - hit)
            print(json.dumps(rows), flush=True)


if __name__ == "__main__":
    main()

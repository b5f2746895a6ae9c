"""How long does sm90a_planned's launch take in a model of how the GPU runs its unit table (no GPU needed)?

  python3 -m lab.tree_verify_plan_model [--ctas 132] [--overhead 4]

For each shape of lab/tree_verify_race.py (chains, mixed-length batches) the planned schedule is made by the host
library (kernels_cu/geometry.py: tree_verify.cuh's rule) and its units are run in the model: one CTA per SM, CTAs
started in grid order as SMs free up (list scheduling), a unit taking its key blocks plus a fixed cost per CTA
(tv::kPlanCtaOverhead's 4 key blocks). Printed: the units, the table's makespan in the order the plan gives it, the
same units longest first (longest processing time: the bound an order can reach) and in request order (the plan
before the longest-chunk-first order), and the ideal (every key block spread evenly, one fixed cost), all in key
blocks. A model, not a measurement: it says which order a race should time, not how fast the kernel is.
"""

from __future__ import annotations

import argparse
import heapq

import numpy as np


def units_of(n_keys: list[int], rows: int, ctas: int) -> tuple[list[tuple[int, int]], int]:
    """[(key blocks, request)] of the planned schedule's unit table in its order, and the row tiles per split."""
    from kernels_cu import geometry

    plan = geometry.tree_verify_schedule(n_keys, rows, geometry.tree_verify_variant("sm90a"), ctas)
    table = plan["units"][1:].reshape(-1, 3)
    out = []
    for _tile, split, b in table:
        chunk = int(plan["chunk"][b])
        first = int(split) * chunk
        out.append(((min(n_keys[b], first + chunk) - first + 63) // 64, int(b)))
    return out, -(-rows // 64)


def makespan(blocks: list[int], ctas: int, overhead: int) -> int:
    """The last CTA's end when CTAs start in this order on `ctas` SMs as each frees up."""
    free = [0] * ctas
    end = 0
    for d in blocks:
        t = heapq.heappop(free) + d + overhead
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def model(n_keys: list[int], rows: int, ctas: int, overhead: int) -> dict:
    """The schedule's makespans (key blocks) in its order, longest first, in request order, and the ideal."""
    units, tiles = units_of(n_keys, rows, ctas)
    blocks = [d for d, _ in units]
    by_request = [d for d, _ in sorted(units, key=lambda u: u[1])]  # stable: splits and tiles keep their order
    total = sum(-(-k // 64) for k in n_keys) * tiles
    return {"units": len(units), "table": makespan(blocks, ctas, overhead),
            "longest_first": makespan(sorted(blocks, reverse=True), ctas, overhead),
            "request_order": makespan(by_request, ctas, overhead),
            "ideal": round(total / ctas + overhead, 1)}  # fmt: skip


def main() -> int:
    from lab import tree_verify_race as race

    ap = argparse.ArgumentParser()
    ap.add_argument("--ctas", type=int, default=132, help="CTAs a wave (SMs): 132 on an H100 SXM")
    ap.add_argument("--overhead", type=int, default=4, help="a CTA's fixed cost in key blocks")
    a = ap.parse_args()
    shapes = [(f"H{H} Q{Q} P{P // race.K}k bs{bs}", H, Q, [P] * bs) for H, Q, P, bs in race.CHAINS]
    shapes += race.mixed_shapes()
    print("| shape | units | table | longest first | request order | ideal |\n|---|---|---|---|---|---|")
    for label, H, Q, prefixes in shapes:
        m = model([int(p) + Q for p in np.asarray(prefixes)], Q * H, a.ctas, a.overhead)
        print(f"| {label} | {m['units']} | {m['table']} | {m['longest_first']} | {m['request_order']} | {m['ideal']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""tree_build kernel development timing on a GPU (not part of the test suite): every design side by side in one
process, the registered variants and the design alternatives kept only here (same source, other defines or
block), each checked bit-exact against the reference on the timed inputs first.

  python3 -m lab.tree_build_dev time [--quick] [--json F]     # µs per launch, warm CUDA-graph replays
  python3 -m lab.tree_build_dev profile                        # clock64() cycles: pop loop, select_warp phases
  python3 -m lab.tree_build_dev fallbacks [--json F] [--variants select_warp,select_verify]
                                                               # how often each select variant replays, and why

Inputs are the benchmark's (perf/bench_tree_build.py: bf16-quantized log-probs, L = 15, K_in = B), plus the
drafter-like peaked rows of `peaked_inputs` (one confident token per depth). Times are CUDA-event medians of
graph replays of the same inputs (L2 warm), the number lab/PERF_NOTES.md tracks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

import numpy as np

from harness import strategies as hh
from harness import timing
from harness.bench import fallbacks as bench_fallbacks
from harness.bench import record
from harness.compare import assert_bit_exact
from kernels_cu import specs, tree_build_ops
from lab import design_table
from reference import tree_build as ref

# clock64() marks in the lane-cached pop loop (source patches, as the harness's kernel mutants are): lane 0 of
# the replaying warp sums cycles into shared accumulators, and thread 0 of request 0 writes positions[0, :8] =
# [before the pops, winner found (reductions, ballot, shuffles), node recorded + sibling placed, first child
# placed, rescans + successors, pops end, whole kernel, nodes]; segments summed over the pops.
PROFILE = (
    ('#include "tree_build.cuh"\n', '#include "tree_build.cuh"\n__shared__ long long kdtr_lp[8];\n'),
    (
        "  const int tid = threadIdx.x;\n  // Every log-prob",
        "  const int tid = threadIdx.x;\n"
        "  if (tid == 0) { for (int k = 0; k < 7; ++k) kdtr_lp[k] = 0; kdtr_lp[7] = clock64(); }\n"
        "  __syncthreads();\n  // Every log-prob",
    ),
    (
        "  while (count < B) {\n    if (race != nullptr",
        "  if (lane == 0) kdtr_lp[0] = clock64() - kdtr_lp[7];\n"
        "  while (count < B) {\n    const long long pc0 = clock64();\n    if (race != nullptr",
    ),
    (
        "    const double c3 = __shfl_sync(0xffffffffu, s3, w);",
        "    const double c3 = __shfl_sync(0xffffffffu, s3, w);\n"
        "    const long long pc1 = clock64();\n    if (lane == 0) kdtr_lp[1] += pc1 - pc0;",
    ),
    (
        "    __syncwarp();  // the new node's tuple words are visible before any tie comparison below\n"
        "    if (child && lane == to) {",
        "    __syncwarp();  // the new node's tuple words are visible before any tie comparison below\n"
        "    const long long pc2 = clock64();\n    if (lane == 0) kdtr_lp[2] += pc2 - pc1;\n"
        "    if (child && lane == to) {",
    ),
    (
        "    if (changed) {  // the popping lane",
        "    const long long pc3 = clock64();\n    if (lane == 0) kdtr_lp[3] += pc3 - pc2;\n"
        "    if (changed) {  // the popping lane",
    ),
    (
        "    count = node;\n  }\n  if (lane == 0) *count_out = count + 1;\n",
        "    if (lane == 0) kdtr_lp[4] += clock64() - pc3;\n    count = node;\n  }\n"
        "  if (lane == 0) kdtr_lp[5] = clock64() - kdtr_lp[7];\n  if (lane == 0) *count_out = count + 1;\n",
    ),
    (
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
        "  __syncthreads();\n  if (tid == 0 && b == 0) {\n"
        "    for (int k = 0; k < 6; ++k) positions[k] = int(kdtr_lp[k]);\n"
        "    positions[6] = int(clock64() - kdtr_lp[7]);\n    positions[7] = n;\n  }\n"
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
    ),
)


# clock64() marks in select_warp, every request: cycles summed into block-local shared accumulators by lane 0 of
# warp 0, written to positions[b, :10] = [generation, ranking + checks, whole kernel, nodes, children counted and
# written, passes over a level's parents, tau raises, compactions, levels, replayed].
_ACC = "if (lane == 0) kdtr_prof"
PROFILE_SELECT = (
    ('#include "tree_build.cuh"\n', '#include "tree_build.cuh"\n__shared__ long long kdtr_prof[6];\n'),
    (
        "  const float* g_lp = top_logp + size_t(b) * L * K_in;\n",
        "  const long long prof_t0 = clock64();\n  long long prof_gen = 0, prof_fin = 0;\n"
        "  if (threadIdx.x == 0) for (int k = 0; k < 6; ++k) kdtr_prof[k] = 0;\n"
        "  const float* g_lp = top_logp + size_t(b) * L * K_in;\n",
    ),
    (
        "      int stop = end, took = 0;\n",
        "      long long pq = clock64();\n      int stop = end, took = 0;\n",
    ),
    (
        "      const bool parts = stop < end;\n",
        f"      {_ACC}[0] += clock64() - pq;\n      {_ACC}[1] += 1;\n      const bool parts = stop < end;\n",
    ),
    (
        "        const uint64_t raised = warp_raise_tau(u, n, tau, B, lane);\n"
        "        __syncwarp();\n        if (raised",
        "        pq = clock64();\n        const uint64_t raised = warp_raise_tau(u, n, tau, B, lane);\n"
        f"        __syncwarp();\n        {_ACC}[2] += clock64() - pq;\n        if (raised",
    ),
    (
        "          n = warp_compact(u, n, tau, idx, lane);\n",
        "          pq = clock64();\n          n = warp_compact(u, n, tau, idx, lane);\n"
        f"          {_ACC}[3] += clock64() - pq;\n",
    ),
    ("    pb = end;\n  }\n", f"    pb = end;\n    {_ACC}[4] += 1;\n  }}\n"),
    (
        "    const int st = s_gen[0] != kSelected ? s_gen[0]",
        "    prof_gen = clock64() - prof_t0;\n    const int st = s_gen[0] != kSelected ? s_gen[0]",
    ),
    ("    replay = st == kOverflow ||", "    prof_fin = clock64() - prof_t0;\n    replay = st == kOverflow ||"),
    (
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
        "  __syncthreads();\n  if (tid == 0) {\n    int* pr = positions + size_t(b) * D;\n"
        "    pr[0] = int(prof_gen);\n    pr[1] = int(prof_fin - prof_gen);\n"
        "    pr[2] = int(clock64() - prof_t0);\n    pr[3] = n;\n"
        "    for (int k = 0; k < 5; ++k) pr[4 + k] = int(kdtr_prof[k]);\n"
        "    pr[9] = replay ? 1 : 0;\n  }\n"
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
    ),
)
# clock64() marks in select_race, every request: positions[b, :7] = [the replay's end, the generation's end, the
# finish's end (0 where the selection never got there), both done, winner (1 selection, 2 replay), pops, kernel].
PROFILE_RACE = (
    ('#include "tree_build.cuh"\n', '#include "tree_build.cuh"\n__shared__ long long kdtr_rp[5];\n'),
    (
        "  const float* g_lp = top_logp + size_t(b) * L * K_in;\n",
        "  const long long prof_t0 = clock64();\n"
        "  if (threadIdx.x == 0) for (int k = 0; k < 5; ++k) kdtr_rp[k] = 0;\n"
        "  const float* g_lp = top_logp + size_t(b) * L * K_in;\n",
    ),
    (
        "    if (lane == 0) atomicCAS(&s_race, kUndecided, kReplayWon);",
        "    if (lane == 0) { kdtr_rp[0] = clock64() - prof_t0; kdtr_rp[4] = s_count - 1; }\n"
        "    if (lane == 0) atomicCAS(&s_race, kUndecided, kReplayWon);",
    ),
    (
        "        if (tid == 0) { s_gen[0] = st; s_gen[1] = n_u; s_gen[2] = chain_failed; }\n      }\n      g.sync();",
        "        if (tid == 0) { s_gen[0] = st; s_gen[1] = n_u; s_gen[2] = chain_failed; }\n"
        "        if (tid == 0) kdtr_rp[1] = clock64() - prof_t0;\n      }\n      g.sync();",
    ),
    (
        "        atomicCAS(&s_race, kUndecided, kSelectWon | count_sel << kRaceCountShift);",
        "        atomicCAS(&s_race, kUndecided, kSelectWon | count_sel << kRaceCountShift);\n"
        "      if (g.tid == 0) kdtr_rp[2] = clock64() - prof_t0;",
    ),
    (
        "  const int race_word = s_race;\n",
        "  const int race_word = s_race;\n  const long long prof_both = clock64() - prof_t0;\n",
    ),
    (
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
        "  __syncthreads();\n  if (tid == 0) {\n    int* pr = positions + size_t(b) * D;\n"
        "    for (int k = 0; k < 3; ++k) pr[k] = int(kdtr_rp[k]);\n    pr[3] = int(prof_both);\n"
        "    pr[4] = race_winner(s_race);\n    pr[5] = int(kdtr_rp[4]);\n    pr[6] = int(clock64() - prof_t0);\n  }\n"
        "  if (full_mask == nullptr) return;  // the FULL_MASK layout is opt-in\n",
    ),
)
RACE_MARKS = ("replay_end", "gen_end", "finish_end", "both_done", "winner", "pops", "kernel")


def profile_race(cells, names=("select_race_every_b",)):
    """The race build's timeline per request (cycles): when the replay ended, when the generation and the finish
    ended, when both were done, who won."""
    for name in names:
        spec = dataclasses.replace(designs()[name], variant=f"{name}_profile", patches=PROFILE_RACE)
        for kind, make in (("bench", bench_inputs), ("peaked", peaked_inputs)):
            for bs, B in cells:
                pos = _profiled_positions(spec, make(bs, B), len(RACE_MARKS), every_request=True)
                for r in range(min(bs, 4)):
                    row = {"design": name, "inputs": kind, "bs": bs, "B": B, "request": r}
                    print(json.dumps({**row, **dict(zip(RACE_MARKS, map(int, pos[r])))}), flush=True)


SELECT_MARKS = ("generate", "rank+check", "kernel", "nodes", "children", "passes", "raises", "compact", "levels")
SELECT_MARKS += ("replayed",)


def profile(cells, select_designs=("select_warp",)):
    """Cycle breakdown of the lane-cached pop loops (request 0) and of select designs' phases (request 0, and
    for bs > 1 the spread over every request) on the benchmark's and the peaked inputs."""
    lane = dataclasses.replace(designs()["lane_cached"], variant="lane_cached_profile", patches=PROFILE)
    names = ("before pops", "winner", "record+sibling", "child", "rescan+successors", "pops end", "kernel")
    for bs, B in cells:
        pos = _profiled_positions(lane, bench_inputs(bs, B), 8)
        pops = max(int(pos[7]) - 1, 1)
        per = {k: int(v) for k, v in zip(names, pos[:7])}
        row = {"design": lane.variant, "bs": bs, "B": B, "nodes": int(pos[7]), "cycles": per}
        print(json.dumps({**row, "per_pop": {k: round(per[k] / pops, 1) for k in names[1:5]}}), flush=True)
    for name in select_designs:
        warp = dataclasses.replace(designs()[name], variant=f"{name}_profile", patches=PROFILE_SELECT)
        for kind, make in (("bench", bench_inputs), ("peaked", peaked_inputs)):
            for bs, B in cells:
                pos = _profiled_positions(warp, make(bs, B), len(SELECT_MARKS), every_request=True)
                row = {"design": name, "inputs": kind, "bs": bs, "B": B}
                print(json.dumps({**row, **dict(zip(SELECT_MARKS, map(int, pos[0])))}), flush=True)
                if bs > 1:  # the spread over the requests: a launch is as slow as its slowest request
                    q = np.percentile(pos, [0, 50, 90, 100], axis=0).astype(np.int64)
                    spread = {k: q[:, j].tolist() for j, k in enumerate(SELECT_MARKS)}
                    slow = int(np.argmax(pos[:, 2]))
                    print(
                        json.dumps(
                            {
                                **row,
                                "min/median/p90/max": spread,
                                "slowest": slow,
                                "slowest_marks": dict(zip(SELECT_MARKS, map(int, pos[slow]))),
                            }
                        ),
                        flush=True,
                    )


def _profiled_positions(spec, args, n, every_request=False):
    """Request 0's (or every request's) first n `positions` words after a second launch of a profile build (the
    first warms up)."""
    p = tree_build_ops.prepare(spec, *args)
    p.launch()
    p.launch()
    pos = np.asarray(p.finish().positions)[:, :n].astype(np.int64)
    return pos if every_request else pos[0]


def designs() -> dict[str, specs.KernelSpec]:
    """The registered variants, and alternatives measured here only (what PERF_NOTES.md reports)."""
    out = {s.variant: s for s in specs.for_op("tree_build")}
    lane = out["lane_cached"]
    out["lane_cached_block32"] = dataclasses.replace(lane, variant="lane_cached_block32", block=32)
    out["lane_cached_block256"] = dataclasses.replace(lane, variant="lane_cached_block256", block=256)
    out["lane_cached_staged_lp"] = lane.with_defines("lane_cached_staged_lp", TB_STAGE_LP="1")
    sel = out["select_verify"]
    out["select_verify_block128"] = dataclasses.replace(sel, variant="select_verify_block128", block=128)
    out["select_verify_block256"] = dataclasses.replace(sel, variant="select_verify_block256", block=256)
    out["select_verify_block64"] = dataclasses.replace(sel, variant="select_verify_block64", block=64)
    out["select_verify_no_stair"] = sel.with_defines("select_verify_no_stair", TB_STAIR_MAX="0")
    out["select_verify_cap8"] = sel.with_defines("select_verify_cap8", TB_SELECT_CAP="2")
    warp = out["select_warp"]
    out["select_warp_block128"] = dataclasses.replace(warp, variant="select_warp_block128", block=128)
    out["select_warp_block512"] = dataclasses.replace(warp, variant="select_warp_block512", block=512)
    out["select_warp_cap8"] = warp.with_defines("select_warp_cap8", TB_SELECT_CAP="2")
    out["select_warp_raise2"] = warp.with_defines("select_warp_raise2", TB_RAISE_WAYS="2")
    out["select_warp_global_lp"] = warp.with_defines("select_warp_global_lp", TB_STAGE_LP="0")
    out["select_warp_prune150"] = warp.with_defines("select_warp_prune150", TB_PRUNE_PCT="150")
    out["select_warp_prune300"] = warp.with_defines("select_warp_prune300", TB_PRUNE_PCT="300")
    out["select_warp_from_b128"] = warp.with_defines("select_warp_from_b128", TB_SELECT_MIN_B="128")
    # occupancy: ptxas's register target (min CTAs per SM; 256 threads x 96 registers allow 2 CTAs an SM)
    out["select_warp_mb3"] = warp.with_defines("select_warp_mb3", TB_MIN_BLOCKS="3")
    out["select_warp_b128_mb8"] = dataclasses.replace(warp, block=128).with_defines(
        "select_warp_b128_mb8", TB_MIN_BLOCKS="8"
    )
    # the race build's designs race at every budget (select_race's launch hands B < its race_min_b over to
    # lane_cached's build; a design that did too would time lane_cached there)
    race = out["select_race"].with_defines("select_race_every_b", TB_RACE_MIN_B="1")
    out["select_race_every_b"] = race
    out["select_race_replay_only"] = race.with_defines("select_race_replay_only", TB_SELECT_MIN_B="100000")
    out["select_race_poll16"] = race.with_defines("select_race_poll16", TB_RACE_POLL="16")
    out["select_race_cap8"] = race.with_defines("select_race_cap8", TB_SELECT_CAP="2")
    out["select_race_mb3"] = race.with_defines("select_race_mb3", TB_MIN_BLOCKS="3")
    out["select_race_block128"] = dataclasses.replace(race, variant="select_race_block128", block=128)
    out["select_race_block128_mb6"] = dataclasses.replace(race, block=128).with_defines(
        "select_race_block128_mb6", TB_MIN_BLOCKS="6"
    )
    return out


def fallbacks(json_path=None, variant="select_warp"):
    """A select variant built to report its replays (kernels_cu.tree_build_ops.fallbacks, the benchmark's own
    counting: n_nodes = -1 a check failed, -2 the candidates overflowed), over many requests of each input family:
    the fallback rate per (inputs, B). "adversarial" is the benchmark's adversarial family (one certain token in
    every row, harness/bench/fallbacks.py) over the benchmark's rows."""
    spec = specs.get("tree_build", variant)
    if tree_build_ops.policies(spec)[2]:  # a race: its launches of 1024 requests would run lane_cached's build
        raise SystemExit(f"fallbacks: {variant} selects as select_warp does; measure select_warp")
    rows = []
    families = (
        ("bench", bench_inputs),
        ("peaked", peaked_inputs),
        ("drafter_bf16", drafter_inputs),
        ("continuous", continuous_inputs),
        ("adversarial", lambda bs, B, L: bench_fallbacks.adversarial(bench_inputs(bs, B, L))),
    )
    for kind, make in families:
        for B, L in ((16, 15), (64, 15), (256, 15), (1024, 15), (64, 32)):
            bs = (1024 if B <= 256 else 256) if kind in ("bench", "peaked", "adversarial") else 128
            got = tree_build_ops.fallbacks(spec, *make(bs, B, L=L))
            entry = record.fallback(**got)
            row = {"variant": variant, "inputs": kind, "B": B, "L": L, **got}
            row["fallback_rate"] = None if entry["rate"] is None else round(entry["rate"], 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def drafter_inputs(bs, B, L=15, seed=2):
    """A drafter's per-depth top-B log-probs: log-softmax of Gaussian logits over an 8k vocabulary (a
    temperature per depth), top-B sorted, bf16-quantized, as a draft model's bf16 logits give them."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    out = np.empty((bs, L, B), np.float32)
    for b in range(bs):
        logits = rng.standard_normal((L, 8192)) * rng.uniform(1.0, 4.0, (L, 1))
        logits = logits.astype(ml_dtypes.bfloat16).astype(np.float64)
        top = -np.sort(-logits, axis=-1)[:, :B]
        mx = logits.max(-1, keepdims=True)
        lse = np.log(np.exp(logits - mx).sum(-1, keepdims=True)) + mx
        out[b] = (top - lse).astype(ml_dtypes.bfloat16).astype(np.float32)
    out = np.minimum(out, np.float32(0))
    _, ids, roots, _, pre = bench_inputs(bs, B, L)
    return out, ids, roots, B, pre


def continuous_inputs(bs, B, L=15, seed=5):
    """float32 log-prob rows with no quantization (harness.strategies 'continuous' style), as a drafter that
    computes its log-softmax in float32 gives them."""
    lp = hh.logp_rows(np.random.default_rng(seed), (bs, L, B), "continuous", 0.0)
    _, ids, roots, _, pre = bench_inputs(bs, B, L)
    return lp, ids, roots, B, pre


def bench_inputs(bs, B, L=15, seed=0):
    """The benchmark's log-prob rows (perf/bench_tree_build.py), with cheaper distinct ids per row."""
    rng = np.random.default_rng(seed)
    lp = hh.logp_rows(rng, (bs, L, B), "bf16", 0.0)
    ids = (rng.integers(0, 160_000, (bs, L, 1)) + 37 * np.arange(B)) % 160_000
    return lp, ids.astype(np.int32), rng.integers(0, 160_000, bs).astype(np.int32), B, np.zeros(bs, np.int32)


def peaked_inputs(bs, B, L=15, seed=1):
    """Drafter-like rows: a confident rank 0 (log-prob near 0), the rest far below, bf16-quantized."""
    rng = np.random.default_rng(seed)
    top = -rng.exponential(0.05, (bs, L, 1))
    rest = np.log(rng.dirichlet(np.full(B, 0.3), (bs, L)) + 1e-30)[..., : B - 1] - 3.0
    raw = np.concatenate([top, rest], axis=-1).astype(np.float32)
    import ml_dtypes

    raw = raw.astype(ml_dtypes.bfloat16).astype(np.float32)
    lp = -np.sort(-raw, axis=-1)
    lp = np.minimum(lp, np.float32(0))
    _, ids, roots, _, pre = bench_inputs(bs, B, L)
    return lp.astype(np.float32), ids, roots, B, pre


def expected(args, ds):
    """The reference's tree, or for large cells (the numpy layouts take minutes there) the committed
    heap_smem kernel's, which the conformance suite certifies bit-exact."""
    bs, B = args[0].shape[0], args[3]
    if bs * B <= 16 * 1024:
        return ref.tree_build(*args)
    p = tree_build_ops.prepare(ds["heap_smem"], *args)
    p.launch()
    return p.finish()


def time_one(spec, args, want, policy) -> tuple[float, None]:
    p = tree_build_ops.prepare(spec, *args)
    try:
        p.launch()
        got = p.results()
        for f in ("parents", "scores", "visibility", "first_child", "next_sibling"):
            assert_bit_exact(getattr(got, f), getattr(want, f), what=f"{spec.variant} {f}", spec_id="TB.2.3")
        dev, _ = timing.device_times_us([p.launch], plan=timing.WARM, policy=policy)
    finally:
        p.finish()
    return timing.summary(dev)["median_us"], None


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["time", "profile", "fallbacks"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument(
        "--designs",
        default="heap_global,lane_cached,select_verify,select_warp,select_race",
        help="comma list of designs() names to time",
    )
    ap.add_argument("--variants", default="select_warp,select_verify", help="fallbacks: the select variants")
    ap.add_argument("--budgets", default="16,64,256,1024", help="time: the budgets B of the grid")
    ap.add_argument("--cells", default="1x16,1x64,1x256,1x1024", help="profile: bs x B cells")
    ap.add_argument("--profile-designs", default="select_warp", help="profile: the select designs ('' for none)")
    ap.add_argument("--no-profile-race", dest="profile_race", action="store_false", help="profile: skip the race's")
    a = ap.parse_args(argv)
    policy = timing.Policy(warmup=2, min_reps=3, max_reps=30, budget_s=0.15)
    budgets = [int(x) for x in a.budgets.split(",")]
    grid = [(bs, B) for B in budgets for bs in (1, 4, 16, 64, 256, 1024)]
    if a.quick:
        grid = [(1, 16), (1, 64), (64, 64), (256, 64), (1, 256), (1, 1024)]
    if a.what == "profile":
        cells = [tuple(int(x) for x in c.split("x")) for c in a.cells.split(",")]
        profile(cells, [d for d in a.profile_designs.split(",") if d])
        if a.profile_race:
            profile_race(cells)
        return
    if a.what == "fallbacks":
        for v in a.variants.split(","):  # one file per variant: F.json -> F-VARIANT.json
            fallbacks(a.json and f"{os.path.splitext(a.json)[0]}-{v}.json", v)
        return
    rows = []
    ds = {k: v for k, v in designs().items() if k in a.designs.split(",") or k == "heap_smem"}
    for kind, make in (("bench", bench_inputs), ("peaked", peaked_inputs)):
        for bs, B in grid:
            if kind == "peaked" and bs not in (1, 64):
                continue
            args = make(bs, B)
            row = {"inputs": kind, "bs": bs, "B": B}
            want = expected(args, ds)
            for name, spec in ds.items():
                row[name], _ = design_table.cell(time_one, spec, args, want, policy)
            rows.append(row)
            print(json.dumps(row), flush=True)
    design_table.report(rows, {"inputs": "inputs", "bs": "bs", "B": "B"}, list(ds), a.json)


if __name__ == "__main__":
    main()

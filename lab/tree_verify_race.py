"""tree_verify's sm90a kernels beside the public MLA kernels, in one run on one GPU (not part of the test suite):

  python3 -m lab.tree_verify_race [--json F] [--quick]     # chains, mixed-length batches, trees: a table per grid
  python3 -m lab.tree_verify_race fixed                     # bs 1 launches for ncu's per-kernel durations
  python3 -m lab.tree_verify_race profile [--variant V]     # two launches of one build (or of FlashMLA: V =
                                                            # flashmla) at H128 Q4 8k bs32, for an ncu profile of
                                                            # the inner loop (launch 2 of ncu's)

Each shape is timed for both sm90a variants (batch-invariant and planned) and for the peers (FlashMLA and
FlashInfer MLA fa3 on chains, both cascades on trees), all on the
same inputs (harness/bench/verify_baselines.make_case), each output checked first: ours against a float32 attention
(request 0), the peers against the float64 oracle (harness/bench/peers.check). Times as the perf suite takes them
(harness/timing: ours from CUDA graph replays with the L2 flushed or inputs rotated, the peers with torch events,
a flush and their host launch hidden), with the read ceiling and the bf16 matmul rate measured in the same run
(harness/bench/ceilings). The committed benchmark is perf/bench_tree_verify.py; this is the quick look a kernel
change needs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import zlib

import numpy as np

from harness.bench.report import RACE_BUILDS, RACE_GRIDS  # the batch-invariant and planned builds; the grids
from harness.torch_staging import to_host
from perf import bench_tree_verify as _perf

K = 1024
# (H, Q, prefix, bs): the chain grid's corners, the shapes the issue quotes, and H128 Q64 8k bs128 (128 row tiles a
# request: where the planned build was slower than the invariant one, reports/h100/2026-12-07 call 13)
CHAINS = [(64, 2, 8 * K, 1), (16, 1, 32 * K, 1), (128, 4, 8 * K, 1), (16, 1, 8 * K, 128), (128, 1, 8 * K, 128),
          (128, 2, 8 * K, 32), (128, 4, 8 * K, 32), (64, 4, 8 * K, 128), (64, 16, 8 * K, 32), (16, 4, 32 * K, 128),
          (128, 16, 32 * K, 32), (128, 64, 8 * K, 128)]  # fmt: skip
QUICK_CHAINS = [(64, 2, 8 * K, 1), (16, 1, 8 * K, 128), (128, 4, 8 * K, 32), (64, 4, 8 * K, 128)]
MIXED_PREFIXES = list(_perf.MIXED_PREFIXES)  # ThunderMLA's mixed-length batch
lognormal_prefixes = _perf.lognormal_prefixes  # seeded, median 8k, a long tail cut at 128k (the perf suite's)


def mixed_shapes():
    """(label, H, Q, prefixes): the mixed-length batches, chains."""
    out = [(f"mixed4 Q{Q}", 128, Q, MIXED_PREFIXES) for Q in (1, 2, 4)]
    out += [(f"lognormal bs{bs} Q{Q}", 64, Q, lognormal_prefixes(bs)) for bs in (32, 128) for Q in (2,)]
    return out


TREES = [(64, 17, 8 * K, 8), (64, 17, 8 * K, 32), (128, 65, 8 * K, 8), (64, 257, 8 * K, 1)]


DESIGNS: dict[str, dict[str, str]] = {}  # --design LABEL=DEFINE[,DEFINE...]: builds of both modes with the defines


def design_builds(label: str, defines: dict[str, str]) -> dict:
    """{`MODE+label`: KernelSpec}: both sm90a builds with a design's defines (tools.precompile caches the same)."""
    from kernels_cu import specs

    return {f"{v}+{label}": specs.get("tree_verify", v).with_defines(f"{v}_{label}", **defines) for v in RACE_BUILDS}


def builds():
    """{label: KernelSpec}: the sm90a builds compared, then each --design's builds of both (spec.with_defines)."""
    from kernels_cu import specs

    out = {v: specs.get("tree_verify", v) for v in RACE_BUILDS}
    for label, defines in DESIGNS.items():
        out |= design_builds(label, defines)
    return out


def design(text: str) -> tuple[str, dict[str, str]]:
    """`seesaw=TV90_SEESAW` -> ("seesaw", {"TV90_SEESAW": "1"}); NAME=VALUE defines keep VALUE
    (`a=X:2,Y` for X=2 and Y)."""
    label, _, names = text.partition("=")
    if not label or not names:
        raise argparse.ArgumentTypeError(f"--design {text!r}: expected LABEL=DEFINE[,DEFINE...]")
    return label, {n.partition(":")[0]: n.partition(":")[2] or "1" for n in names.split(",")}


def time_ours(spec, case, plan, policy):
    from harness import timing
    from harness.bench import verify_baselines as vb
    from kernels_cu import tree_verify_ops

    p = tree_verify_ops.prepare(spec, case.q, case.kv, case.block_table, case.prefix_lens, case.visibility, case.scale)
    try:
        p.launch()
        res = p.results()
        err = vb.spot_check(case, res.out, vb.row_index(case, "cuda")) if case.uniform else None
        # the outputs' bits, so that a design meant to change no arithmetic shows that it changed none (same_bits)
        crc = zlib.crc32(_raw(res.lse), zlib.crc32(_raw(res.out)))
        dev, _ = timing.device_times_us([p.launch], plan=plan, policy=policy)
    finally:
        p.finish()
    return {"us": statistics.median(dev), "rel_err": err, "crc32": crc}


def _raw(a) -> bytes:
    """The bytes of an output (a host array, or the torch tensor device inputs give back)."""
    return np.ascontiguousarray(to_host(a)).tobytes()


def time_peer(name, case, flush, policy):
    import torch

    from harness.bench import Unavailable, peers

    try:
        t, _chk = peers.time_checked(name, case, flush_bytes=flush, policy=policy)
    except (Unavailable, peers.WrongResult) as e:
        return {"error": str(e.args[0])}
    except Exception as e:  # a peer failing on a shape is recorded, the run goes on
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    finally:
        torch.cuda.empty_cache()
    return {"us": statistics.median(t)}


def run_shape(label, H, Q, prefix, bs, chain, peer_names, ceil):
    import torch

    from harness import timing
    from harness.bench import verify_baselines as vb

    case = vb.make_case(bs, Q, H, prefix, device="cuda", chain=chain)
    nbytes, flops = vb.min_bytes(case), vb.useful_flops(case)
    plan = timing.l2_plan(nbytes, timing.l2_bytes())
    policy = timing.policy_from_env(warmup=2, min_reps=7, max_reps=40, budget_s=1.5)
    flush = max(timing.ROTATE_TARGET_BYTES, 2 * timing.l2_bytes()) if nbytes < timing.ROTATE_TARGET_BYTES else 0
    row = {"shape": label, "H": H, "Q": Q, "bs": bs, "prefixes": [int(p) for p in case.prefix_lens[:8]],
           "bytes": nbytes, "flops": flops, "times": {}}  # fmt: skip
    for name, spec in builds().items():
        try:
            row["times"][name] = time_ours(spec, case, plan, policy)
        except Exception as e:
            row["times"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    for name, r in row["times"].items():  # a design's build beside the default build of its mode
        if "+" in name and "crc32" in r:
            r["same_bits"] = r["crc32"] == row["times"][name.partition("+")[0]].get("crc32")
    for name in peer_names:
        row["times"][name] = time_peer(name, case, flush, policy)
    for r in row["times"].values():
        if "us" in r:
            r["tflops"] = flops / r["us"] / 1e6
            r["pct_read"] = 100 * nbytes / r["us"] / 1e3 / ceil["read_gbs"]
    del case
    torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def provenance(quick: bool) -> dict:
    """Where the numbers hold (tools.bench_report prints it): the device, the revision, the date and the command."""
    import datetime

    import torch

    from harness.device import git_revision

    root = str(pathlib.Path(__file__).resolve().parent.parent)
    return {"device": torch.cuda.get_device_name(), "revision": git_revision(root),
            "date": datetime.datetime.now(datetime.UTC).isoformat(),
            "command": "python3 -m lab.tree_verify_race" + (" --quick" if quick else "")
            + "".join(f" --design {label}=" + ",".join(k if v == "1" else f"{k}:{v}" for k, v in d.items())
                      for label, d in DESIGNS.items())}  # fmt: skip


def race(json_path=None, quick=False) -> int:
    from harness.bench import ceilings as cl
    from harness.bench import peers

    c = cl.Ceilings()
    ceil = {"read_gbs": c.read_gbs, "copy_gbs": c.copy_gbs, "bf16_tflops": c.bf16_tflops}
    print(f"ceilings: {json.dumps(ceil)}; peers {json.dumps(peers.versions())}", flush=True)
    chain_peers = ("flashmla", "flashinfer_mla")
    out = {"meta": provenance(quick), "ceilings": ceil, "peers": peers.versions(), "chains": [], "mixed": [],
           "trees": []}  # fmt: skip
    for H, Q, P, bs in QUICK_CHAINS if quick else CHAINS:
        out["chains"].append(run_shape(f"H{H} Q{Q} P{P // K}k bs{bs}", H, Q, P, bs, True, chain_peers, ceil))
    for label, H, Q, prefixes in mixed_shapes()[: 2 if quick else None]:
        out["mixed"].append(run_shape(label, H, Q, prefixes, len(prefixes), True, chain_peers, ceil))
    for H, Q, P, bs in TREES[: 1 if quick else None]:
        out["trees"].append(run_shape(f"tree H{H} Q{Q} P{P // K}k bs{bs}", H, Q, P, bs, False,
                                      tuple(peers.CASCADES), ceil))  # fmt: skip
    from harness.bench import report  # the tables docs/BENCHMARKS.md shows, from the same rows

    print("\n".join(report.race_section([{**out, "file": pathlib.Path(json_path).name if json_path else "not saved"}])))
    rows = [r for grid in RACE_GRIDS for r in out[grid]]
    for name in sorted({n for r in rows for n in r["times"] if "+" in n}):
        same = [r["times"][name].get("same_bits") for r in rows if name in r["times"]]
        print(f"{name}: the default build's bits at {sum(x is True for x in same)} of {len(same)} shapes", flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def fixed() -> int:
    """A few launches of each build and of FlashMLA at bs 1 (H 64, Q 2, prefix 8k), for ncu's per-kernel
    durations: where a bs-1 call's time goes (plan, attention, combine, launch gaps)."""
    from harness.bench import peers
    from harness.bench import verify_baselines as vb
    from kernels_cu import tree_verify_ops

    case = vb.make_case(1, 2, 64, 8 * K, device="cuda", chain=True)
    for spec in builds().values():
        p = tree_verify_ops.prepare(spec, case.q, case.kv, case.block_table, case.prefix_lens, case.visibility,
                                    case.scale)  # fmt: skip
        for _ in range(3):
            p.launch()
        p.finish()
    fn = peers.prepare("flashmla", case)
    for _ in range(3):
        fn()
    import torch

    torch.cuda.synchronize()
    return 0


PROFILED = (128, 4, 8 * K, 32)  # compute-bound, where the planned build is furthest behind FlashMLA (0.67)


def profile(variant: str) -> int:
    """Two launches of one build, or of FlashMLA (`flashmla`: its split kernel beside ours, the same inputs), a
    warm-up then the one to profile (ncu --launch-skip 1 --launch-count 1 with the kernel's name), on the chain shape
    PROFILED, for the stall reasons and instruction counts of the inner loop."""
    from harness.bench import peers
    from harness.bench import verify_baselines as vb
    from kernels_cu import tree_verify_ops

    H, Q, P, bs = PROFILED
    case = vb.make_case(bs, Q, H, P, device="cuda", chain=True)
    if variant == "flashmla":
        fn = peers.prepare("flashmla", case)
        for _ in range(2):
            fn()
        import torch

        torch.cuda.synchronize()
        return 0
    p = tree_verify_ops.prepare(builds()[variant], case.q, case.kv, case.block_table, case.prefix_lens,
                                case.visibility, case.scale)  # fmt: skip
    for _ in range(2):
        p.launch()
    p.finish()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="race", choices=["race", "fixed", "profile"])
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--variant", default="sm90a_planned", choices=["sm90a", "sm90a_planned", "flashmla"])
    ap.add_argument("--design", type=design, action="append", default=[],
                    help="LABEL=DEFINE[,DEFINE...]: both builds with these defines too (e.g. "
                    "seesaw=TV90_SEESAW for a kernel source with an #ifdef TV90_SEESAW design)")  # fmt: skip
    a = ap.parse_args()
    DESIGNS.update(a.design)
    if a.mode == "profile":
        return profile(a.variant)
    return race(a.json, a.quick) if a.mode == "race" else fixed()


if __name__ == "__main__":
    sys.exit(main())

"""Synthetic benchmark runs, for the tests of the report, the plots and the gate (never a reported result).

A run has the JSON layout `pytest perf --benchmark-json` writes, with every op's GPU cases: tree_build and
tree_accept kernel medians and the Python heapq times from the 2026-12-02 H200 run (h200-2026-12-02, hot-L2 method;
removed from the tree: `git show d10a513:reports/h200-2026-12-02/README.md`), tree_verify times made up from a
roofline at fixed efficiencies, torch comparators a fixed factor slower (out of memory past a size). `noise` scales
every time by a random factor, `slow_us` adds a fixed delay to the tree_build kernel (the gate's planted slowdown),
`fallback` gives the tree_build cases a select variant's fallback record with that share of the drafter family's
requests replayed (the fallback gate's planted build: 1.0).
"""

from __future__ import annotations

import numpy as np

from . import record
from . import verify_baselines as vb

# (bs, B) -> (kernel µs, Python heapq µs), H200 2026-12-02
TREE_BUILD = {
    (1, 16): (15.04, 242), (4, 16): (15.33, 325), (16, 16): (15.60, 1157), (64, 16): (15.58, 3862),
    (256, 16): (16.28, 16793), (1, 64): (55.05, 606), (4, 64): (55.92, 993), (16, 64): (55.56, 3808),
    (64, 64): (59.67, 19605), (256, 64): (63.13, 114456), (1, 256): (290.05, 1982), (4, 256): (318.97, 3828),
    (16, 256): (324.00, 16135), (64, 256): (342.60, 83658), (256, 256): (354.46, 290797),
    (1, 1024): (2797.78, 4818), (4, 1024): (2966.54, 33438), (16, 1024): (3193.80, 111554),
    (64, 1024): (3089.69, 562520), (256, 1024): (6935.08, 1384489),
}  # fmt: skip
TREE_ACCEPT = {1: 7.33, 64: 9.76, 256: 11.36}
CEILINGS = {"copy_gbs": 4300.0, "bf16_tflops": 790.0, "memcpy_dtod_gbs": 2760.0, "unavailable": {}}
TORCH_FACTOR = {"absorb_eager": 6.0, "sdpa_bool_mask": 9.0, "cascade": 4.0}


def _t(us: float, rel=0.01, where="device") -> dict:
    return {"median_us": us, "p10_us": us * (1 - rel / 2), "p90_us": us * (1 + rel / 2), "q1_us": us, "q3_us": us,
            "min_us": us * (1 - rel / 2), "mean_us": us, "rel_spread": rel, "n": 50, "where": where,
            "method": "synthetic"}  # fmt: skip


def _bench(name: str, group: str, info: dict) -> dict:
    s = info["time"]["median_us"] * 1e-6
    return {"group": group, "name": name, "fullname": f"perf/synthetic.py::{name}", "params": {}, "param": None,
            "extra_info": info, "options": {}, "stats": {"median": s, "min": s, "max": s, "mean": s, "iqr": 0.0,
                                                          "stddev": 0.0, "rounds": 1, "data": [s]}}  # fmt: skip


def _verify_us(H, Q, P, bs):
    flops = 2 * H * bs * Q * (P + 4) * (576 + 512)
    nbytes = bs * (P + Q) * 576 * 2 + bs * Q * H * (576 + 512) * 2
    return max(flops / (0.55 * 790e12), nbytes / (0.8 * 4300e9)) * 1e6 + 6.0, flops, nbytes


def _fallback(bs: int, B: int, share: float) -> dict | None:
    """A select variant's fallback record for a synthetic cell: none at B = 16 (a case without rates), no selection
    at bs = 256 (as select_race hands a batch beyond a wave of races to lane_cached's build), else `share` of the
    drafter family's requests replayed (checks failed) and half or more of the adversarial family's (overflowed)."""
    if B == 16:
        return None
    if bs == 256:
        why = "the launch runs lane_cached's build (synthetic)"
        return {f: record.fallback(bs, no_selection=why) for f in ("drafter", "adversarial")}
    n = round(share * bs)
    return {
        "drafter": record.fallback(bs, checks_failed=n),
        "adversarial": record.fallback(bs, overflowed=max(n, bs // 2)),
    }


def run(
    *, seed: int = 0, noise: float = 0.0, slow_us: float = 0.0, verify: bool = True, fallback: float | None = None
) -> dict:
    rng = np.random.default_rng(seed)
    jitter = lambda: float(np.exp(rng.normal(0.0, noise))) if noise else 1.0
    out = []
    for impl, gbs in (("copy_kernel", 4300.0), ("cuMemcpyDtoD", 2760.0)):
        us = 2 * 2**31 / (gbs * 1e9) * 1e6
        info = record.build(op="ceiling", impl=impl, shape={"bytes_each_way": 2**31}, time=_t(us),
                            bytes_moved=2**32, ceilings=CEILINGS)  # fmt: skip
        out.append(_bench(f"test_{impl}", "ceilings", info))
    for (bs, B), (k_us, heap_us) in sorted(TREE_BUILD.items()):
        copies = 25.0 + (bs * 15 * B * 8 + bs * (B + 1) * (B + 1) * 2) / 10e9 * 1e6
        comps = {
            "python_heapq": record.comparator(_t(heap_us * jitter(), 0.3, "host")),
            "python_heapq+copies": record.comparator(_t(heap_us + copies, 0.3, "host")),
            "cpp_1t": record.comparator(error="C++ builder not built (build/engine/libkdtree_cpu.so)"),
            "copies_only": record.comparator(_t(copies, 0.1, "host")),
        }
        info = record.build(op="tree_build", impl="cuda", shape={"bs": bs, "B": B, "L": 15, "K_in": B},
                            time=_t(k_us * jitter() + slow_us), bytes_moved=bs * (B + 1) * 80, ceilings=CEILINGS,
                            comparators=comps, extra={"warm_graph": _t(k_us * 0.97)},
                            fallback=None if fallback is None else _fallback(bs, B, fallback))  # fmt: skip
        out.append(_bench(f"test_tree_build[bs{bs}-B{B}]", f"tree_build B={B}", info))
    for bs, us in TREE_ACCEPT.items():
        walk = record.comparator(_t(9.6 * bs, 0.2, "host"))
        info = record.build(op="tree_accept", impl="cuda", shape={"bs": bs, "B": 64, "L": 15, "prefix": 1024},
                            time=_t(us * jitter()), bytes_moved=bs * 4 * 1152, ceilings=CEILINGS,
                            comparators={"numpy_walk": walk}, extra={"mean_accept_len": 4.0})  # fmt: skip
        out.append(_bench(f"test_tree_accept_commit[bs{bs}]", "tree_accept", info))
    if verify:
        shapes = [(H, Q, P, bs, None) for H in (64, 128) for Q in (1, 2, 16, 64, 257)
                  for P in (1024, 8192, 32768, 131072) for bs in (1, 8, 32, 128)]  # fmt: skip
        shapes += [(H, 1 + B, 8192, 8, "budget") for H in (64, 128) for B in (16, 32, 64, 128, 256, 512, 1024)]
        for H, Q, P, bs, sweep in shapes:
            us, flops, nbytes = _verify_us(H, Q, P, bs)
            comps = {}
            for name, f in TORCH_FACTOR.items():
                need = vb.estimate_bytes(name, bs, Q, H, P + Q)
                if need < 100e9:
                    comps[name] = record.comparator(_t(us * f, 0.05))
                else:
                    comps[name] = record.comparator(error=f"out of memory: needs ~{need / 2**30:.0f} GiB")
            shape = {"H": H, "Q": Q, "prefix": P, "bs": bs, "dtype": "bf16", "page": 64}
            if sweep:
                shape.update(sweep=sweep, B=Q - 1)
            info = record.build(op="tree_verify", impl="cuda:portable", shape=shape, time=_t(us * jitter()),
                                bytes_moved=nbytes, flops=flops, ceilings=CEILINGS, comparators=comps)  # fmt: skip
            tag = f"{sweep or 'grid'}-H{H}-Q{Q}-P{P}-bs{bs}"
            out.append(_bench(f"test_tree_verify[{tag}]", f"tree_verify H={H}", info))
            if sweep or (P == 8192 and bs in (1, 32) and Q in (2, 64)):  # the 99 KB twin on the quick shapes
                info = record.build(op="tree_verify", impl="cuda:portable_99k", shape=shape,
                                    time=_t(1.3 * us * jitter()), bytes_moved=nbytes, flops=flops,
                                    ceilings=CEILINGS)  # fmt: skip
                out.append(_bench(f"test_tree_verify[{tag}-portable_99k]", f"tree_verify H={H}", info))
    return {
        "machine_info": {
            "gpu": {
                "name": "NVIDIA H200",
                "arch": "sm_90",
                "driver": "580.159.04",
                "driver_api": "13.0",
                "nvrtc": "13.0",
            },
            "cpu": {"brand_raw": "synthetic"},
            "packages": {"torch": "2.11.0", "cuda-core": "1.2.0", "pytest-benchmark": "5.2.3"},
            "git_revision": "synthetic",
        },
        "commit_info": {},
        "benchmarks": out,
        "datetime": "2026-12-02T00:00:00+00:00",
        "version": "5.2.3",
        "kdtr": {"command": "synthetic", "stage": None, "quick": False, "ceilings": CEILINGS, "kernel_mutant": None},
    }

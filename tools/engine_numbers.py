"""Numbers of the C++ engine on the tiny MLA+MoE model, per device (--device cpu, the default, and/or cuda):
AR and DDTree tokens per second (the drafter's own time apart, since it runs the target ahead), mean
acceptance per budget, each op's share of a DDTree step, on cuda the host<->device traffic per round with the
drafter's top-k by the draft_topk kernel and by the CPU op (--host-topk, the path before), and the C++ tree
builder (libkdtree_cpu through ctypes) against the Python heapq reference.

    python -m tools.engine_numbers OUT_DIR [--device cpu] [--device cuda] [--prompts 20] [--max-new 64]
        [--threads 0] [--repeat 3]

Writes OUT_DIR/numbers.json and OUT_DIR/numbers.md. Each decode runs `--repeat` times; the table shows
the median run (by decode time). Numbers hold only with their machine, date and revision (recorded).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from harness import decoding, device, kdtree_cpu  # noqa: E402
from harness import strategies as hh  # noqa: E402
from reference import tree_build as ref_build  # noqa: E402
from reference.model import Config, Model  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent

BUDGETS = (4, 16, 64)
DEPTH, NOISE = 8, 0.5
OPS = ("tree_build", "tree_verify", "tree_accept", "model")


def prompts(n: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, Config().vocab, int(rng.integers(4, 17))).tolist() for _ in range(n)]


def decode_numbers(work: pathlib.Path, args, dev: str) -> dict:
    model = work / "model.kdtr"
    if not model.exists():
        Model.random(Config(), seed=1).save(model)
    ps = prompts(args.prompts)
    tokens = len(ps) * args.max_new
    runs = {}
    # on cuda each DDTree budget runs twice: the draft_topk kernel, then the CPU op (--host-topk, the path before)
    plan = [("ar", 0, False), *(("ddtree", b, False) for b in BUDGETS)]
    plan += [("ddtree", b, True) for b in BUDGETS] if dev == "cuda" else []
    for mode, budget, host_topk in plan:
        opts = {"threads": args.threads, "device": dev, "host_topk": host_topk}
        if mode == "ddtree":
            opts |= {"budget": budget, "depth": DEPTH, "noise": NOISE}
        key = f"{mode}{budget}" + ("_host_topk" if host_topk else "")
        trials = [
            decoding.engine_decode(model, ps, work / f"{dev}{key}", mode=mode, max_new=args.max_new, **opts)
            for _ in range(args.repeat)
        ]
        r = sorted(trials, key=lambda t: float(t["time_decode"]))[len(trials) // 2]
        t = {k[5:]: float(r[k]) for k in r if k.startswith("time_")}
        step = t["decode"] - t["drafter"]
        acc = r["accept_lens"][r["accept_lens"] >= 0]
        row = {
            "mode": mode,
            "budget": budget,
            "draft_topk": r["metadata"]["draft_topk"],
            "tokens": tokens,
            "rounds": int(acc.size),
            "decode_s": t["decode"],
            "drafter_s": t["drafter"],
            "tokens_per_s": tokens / t["decode"],
            "tokens_per_s_without_drafter": tokens / step,
            "mean_accepted_drafts": float(acc.mean()),
            "tokens_per_round": float(acc.mean()) + 1.0,
            "off_first_branch_rounds": float((r["path_max_rank"][r["accept_lens"] >= 0] > 0).mean()),
            "step_s": step,
            "op_seconds": {op: t[op] for op in OPS},
            "op_share_of_step": {op: t[op] / step for op in OPS},
            "all_decode_s": sorted(float(x["time_decode"]) for x in trials),
            "draft_topk_s": t["draft_topk"],
            "decode_rounds": int(r["rounds"].max()),
            "io": {ph: decoding.traffic(r, ph) for ph in decoding.IO_PHASES},
        }
        if mode == "ddtree":
            ar = runs["ar0"]
            row["equals_ar_tokens"] = bool(np.array_equal(r["tokens"], ar["_tokens"]))
        row["_tokens"] = r["tokens"]
        runs[key] = row
    for row in runs.values():
        row.pop("_tokens")
    return {
        "device": dev,
        "model": {"seed": 1, **Config().__dict__},
        "prompts": len(ps),
        "max_new": args.max_new,
        "runs": runs,
    }


def tree_build_numbers(threads: int) -> list[dict]:
    lib = kdtree_cpu.KdtreeCpu()
    rows = []
    for bs in (1, 16):
        for B in (16, 64, 256, 1024):
            rng = np.random.default_rng(B + bs)
            L = 15
            lp = hh.logp_rows(rng, (bs, L, B), "bf16", 0.0)
            ids = np.stack([np.stack([rng.choice(160_000, B, replace=False) for _ in range(L)]) for _ in range(bs)])
            args = (lp, ids.astype(np.int32), rng.integers(0, 160_000, bs).astype(np.int32), B, np.zeros(bs, np.int32))
            want = ref_build.tree_build(*args)
            row = {"bs": bs, "B": B, "L": L}
            row["python_heapq_us"] = _median_us(lambda a=args: ref_build.tree_build(*a), 3)
            for n in sorted({1, threads or os.cpu_count() or 1}):
                call = lib.bind(*args, threads=n, validate=False)
                got = call()
                assert all(np.array_equal(getattr(got, f), getattr(want, f)) for f in ref_build.Tree.FIELDS[:-1])
                row[f"cpp_{n}_threads_us"] = _median_us(call, 30)
            rows.append(row)
    return rows


def _gpu() -> str:
    p = device.probe()
    return f"{p.name} {p.arch}, driver {device.driver_version_string()}" if p.ok else f"none ({p.reason})"


def _median_us(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def markdown(res: dict) -> str:
    env = res["environment"]
    lines = [
        f"# kdtree-engine on {', '.join(d['device'].upper() for d in res['decodes'])} — {env['date']}",
        "",
        f"Machine: {env['cpu']}, {env['cores']} cores ({env['platform']}); GPU: {env['gpu']}. "
        f"Revision `{env['git_revision']}`.",
        f"Command: `{env['command']}`. Load average before the run: {env['loadavg']}.",
        "",
    ]
    for dec in res["decodes"]:
        lines += decode_markdown(dec)
    return "\n".join(lines + tree_build_markdown(res["tree_build"])) + "\n"


def decode_markdown(dec: dict) -> list[str]:
    gpu_note = (
        " On cuda the whole step runs on the GPU (the ops and the drafter's top-k by the kernels, every matmul by "
        "the engine's own kernels), host to device copies included; norms, RoPE and routing stay on the host; "
        "`top-k` cpu rows are the same decode with the drafter's top-k by the CPU op (--host-topk)."
        if dec["device"] == "cuda"
        else ""
    )
    lines = [
        f"## Device: {dec['device']}",
        "",
        f"Model: reference/model.py defaults (seed 1): {dec['model']['n_layers']} layers, hidden "
        f"{dec['model']['hidden']}, {dec['model']['n_heads']} heads, 576-wide latent cache, "
        f"{dec['model']['n_experts']} experts top-{dec['model']['top_k']} + shared, vocab "
        f"{dec['model']['vocab']}. {dec['prompts']} prompts of 4-16 tokens, "
        f"{dec['max_new']} new tokens each, all prompts batched; drafter depth {DEPTH}, noise {NOISE}. "
        "Times are the engine's own (steady clock around each phase), median of the repeats." + gpu_note,
        "",
        "| mode | B | top-k | tok/s | tok/s without drafter | drafter s | top-k s | decode s | "
        "accepted drafts/round | tokens/round | rounds off the first branch | = AR |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in dec["runs"].values():
        dd = r["mode"] == "ddtree"
        lines.append(
            f"| {r['mode']} | {r['budget'] if dd else '-'} | {_topk_label(r)} | {r['tokens_per_s']:.1f} | "
            f"{r['tokens_per_s_without_drafter']:.1f} | {r['drafter_s']:.2f} | {r['draft_topk_s']:.3f} | "
            f"{r['decode_s']:.2f} | "
            f"{r['mean_accepted_drafts']:.2f} | {r['tokens_per_round']:.2f} | "
            f"{r['off_first_branch_rounds']:.0%} | {'yes' if r.get('equals_ar_tokens', True) else 'NO'} |"
        )
    lines += [
        "",
        "Share of a step (one round without the drafter: tree_build, the target forward over the tree whose "
        "attention is tree_verify, tree_accept's walk and commit on every layer; `model` is the rest of the "
        "forward: projections, MoE, norms, lm_head, argmax):",
        "",
        "| mode | B | top-k | tree_build | tree_verify | tree_accept | model |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in dec["runs"].values():
        s = r["op_share_of_step"]
        lines.append(
            f"| {r['mode']} | {r['budget'] or '-'} | {_topk_label(r)} | {s['tree_build']:.2%} | "
            f"{s['tree_verify']:.1%} | {s['tree_accept']:.2%} | {s['model']:.1%} |"
        )
    if dec["device"] == "cuda":
        lines += ["", *traffic_markdown(dec)]
    return [*lines, ""]


def _topk_label(run: dict) -> str:
    """What ran the drafter's top-k: cpu, the kernel variant (draft_topk:VARIANT), or - (AR)."""
    return {"none": "-", "cpu": "cpu"}.get(run["draft_topk"], run["draft_topk"].removeprefix("cuda "))


def traffic_markdown(dec: dict) -> list[str]:
    """The host<->device traffic per decode round (a round runs every unfinished request): the whole loop's and
    the drafter's top-k's, as the engine counted them (spec/engine.md EN.5.3)."""
    lines = [
        "Host↔device traffic per decode round, counted by the engine at the CUDA backend's copies, frees and "
        "synchronisations (syncs: every call after which the host waits for the GPU, each synchronous copy "
        "included): the whole round, and inside it the drafter's top-k (`--host-topk`: the CPU op, the path "
        "before the kernel).",
        "",
        "| mode | B | top-k | round H2D KiB | round D2H KiB | round copies | round syncs | top-k H2D KiB | "
        "top-k D2H KiB | top-k syncs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in dec["runs"].values():
        n = r["decode_rounds"]
        io, tk = r["io"]["decode"], r["io"]["draft_topk"]
        lines.append(
            f"| {r['mode']} | {r['budget'] or '-'} | {_topk_label(r)} | {io['h2d_bytes'] / n / 1024:.1f} | "
            f"{io['d2h_bytes'] / n / 1024:.1f} | {(io['h2d_copies'] + io['d2h_copies']) / n:.1f} | "
            f"{io['syncs'] / n:.1f} | {tk['h2d_bytes'] / n / 1024:.1f} | {tk['d2h_bytes'] / n / 1024:.1f} | "
            f"{tk['syncs'] / n:.1f} |"
        )
    return lines


def tree_build_markdown(tb: list[dict]) -> list[str]:
    cols = [k for k in tb[0] if k.startswith("cpp_")]
    lines = [
        "C++ tree builder (libkdtree_cpu through ctypes, arguments bound once, preallocated outputs, no "
        "validation, no file I/O) against the Python heapq reference (with its validation and every layout), "
        "L = 15, K_in = B, median µs per batch:",
        "",
        "| bs | B | Python heapq | "
        + " | ".join(c.replace("cpp_", "C++ ").replace("_threads_us", " thr") for c in cols)
        + " |",
        "|---|---|---|" + "---|" * len(cols),
    ]
    for r in tb:
        lines.append(
            f"| {r['bs']} | {r['B']} | {r['python_heapq_us']:.0f} | " + " | ".join(f"{r[c]:.1f}" for c in cols) + " |"
        )
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", action="append", choices=("cpu", "cuda"), help="repeat for several (default cpu)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cpuinfo = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "?")
    env = {
        "date": datetime.date.today().isoformat(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "git_revision": device.git_revision(str(ROOT)),
        "command": "python -m tools.engine_numbers " + " ".join(argv if argv is not None else sys.argv[1:]),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "compiler": subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "gpu": _gpu(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        decodes = [decode_numbers(pathlib.Path(tmp), args, d) for d in args.device or ["cpu"]]
        res = {"environment": env, "decodes": decodes}
    res["tree_build"] = tree_build_numbers(args.threads)
    (args.out / "numbers.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "numbers.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()

"""Benchmark JSON (one file per perf stage) -> docs/BENCHMARKS.md: a header with the device, driver,
versions, dates and commands; the ceilings each stage measured; a table per op; the end-to-end analysis
(modelled); links to the plots (harness/bench/plots.py)."""

from __future__ import annotations

import collections
import json
import pathlib
import statistics

from contract import step as contract_step

from . import e2e, record, sm120

PACKAGES = ("torch", "cuda-bindings", "cuda-core", "nvidia-cuda-nvrtc", "nvidia-cublas", "numpy", "pytest-benchmark")


def load(paths) -> dict:
    """Merge stage files: {"runs": [per file facts], "cases": [extra_info + name], "machine": machine_info}."""
    runs, cases, machine, peers, races = [], {}, None, {}, []
    for path in paths:
        data = json.loads(pathlib.Path(path).read_text())
        if is_race(data):  # lab.tree_verify_race's file: its own section, its provenance in the header
            meta = data["meta"]
            races.append({**data, "file": pathlib.Path(path).name})
            rows = sum(len(data.get(g, [])) for g in RACE_GRIDS)
            runs.append({"file": pathlib.Path(path).name, "datetime": meta.get("date"), "stage": "race",
                         "command": meta.get("command"), "ceilings": data.get("ceilings") or {},
                         "revision": meta.get("revision"), "device": meta.get("device"), "kernel_mutant": None,
                         "cases": rows})  # fmt: skip
            continue
        machine = machine or data.get("machine_info", {})
        peers.update({p: v for p, v in (data.get("machine_info", {}).get("peers") or {}).items() if v})
        k = data.get("kdtr", {})
        runs.append(
            {
                "file": pathlib.Path(path).name,
                "datetime": data.get("datetime"),
                "stage": k.get("stage"),
                "command": k.get("command"),
                "ceilings": k.get("ceilings") or {},
                "revision": data.get("machine_info", {}).get("git_revision"),
                "device": _device(data.get("machine_info", {})),
                "kernel_mutant": k.get("kernel_mutant"),
                "cases": len(data.get("benchmarks", [])),
            }
        )
        for b in data.get("benchmarks", []):
            info = b.get("extra_info", {})
            if info.get("schema") != record.SCHEMA:
                continue
            key = b["fullname"] if info.get("op") != "ceiling" else f"{b['fullname']}@{path}"
            case = {**info, "name": b["name"], "fullname": b["fullname"], "stage_file": pathlib.Path(path).name}
            # "cuda:heap_smem" -> impl "cuda", variant "heap_smem": tables and plots keep one row per variant
            case["impl"], _, case["variant"] = str(case.get("impl", "")).partition(":")
            cases[key] = case
    # the peers' versions from whichever file timed them (the first file's machine may have had none)
    return {"runs": runs, "cases": list(cases.values()), "machine": {**(machine or {}), "peers": peers},
            "races": races}  # fmt: skip


RACE_GRIDS = {"chains": "chains (FlashMLA, FlashInfer MLA fa3)", "mixed": "mixed-length batches (chains)",
              "trees": "DDTree trees (the FlashMLA and FlashInfer cascades)"}  # fmt: skip
RACE_BUILDS = ("sm90a", "sm90a_planned")  # the batch-invariant and the planned builds
# the tree_verify aims (issues 25 and 45), written once for the race's tables and the perf grids' summaries: the
# planned build's speed over the faster peer per grid, and the invariant build's time within this factor of planned's
AIMS = {"chains": 1.0, "mixed": 1.2, "trees": 1.3}
INVARIANT_WITHIN = 1.15


def is_race(data) -> bool:
    return isinstance(data, dict) and "meta" in data and all(g in data for g in RACE_GRIDS)


def race_section(races) -> list[str]:
    """tree_verify's two sm90a builds beside the peers, every comparator timed in the same run on one GPU
    (lab.tree_verify_race): per grid, each one's µs with its useful TFLOP/s and its fraction of the read ceiling
    measured in that run, planned ÷ invariant, and the faster peer's time over each build's (> 1: ours is faster),
    with the issue's aims counted (planned ≥ 1.0× the faster peer on chains, ≥ 1.2× on mixed batches, ≥ 1.3× the
    faster cascade on trees; invariant within 1.15× of planned)."""
    if not races:
        return []
    out = ["## tree_verify: the sm90a builds beside the peers (one run)", ""]
    for race in races:
        m = race["meta"]
        out += [
            f"`{m.get('command')}` on {m.get('device')}, revision {m.get('revision')}, {m.get('date')} "
            f"({race['file']}); ceilings of that run: read {fmt(race['ceilings'].get('read_gbs'))} GB/s, bf16 "
            f"{fmt(race['ceilings'].get('bf16_tflops'))} TFLOP/s. Cells: µs (useful TFLOP/s, % of the read ceiling); "
            "peer ÷ build: the faster peer's time over the build's (> 1: the build is faster).",
            "",
        ]
        for grid, title in RACE_GRIDS.items():
            rows = race.get(grid) or []
            if not rows:
                continue
            names = list(dict.fromkeys(n for r in rows for n in r["times"]))
            peer_names = [n for n in names if not n.startswith("sm90a")]  # designs (sm90a+...) are ours
            out += [
                f"### {title}",
                "",
                "| shape | "
                + " | ".join(f"{n} µs" for n in names)
                + " | planned ÷ invariant | peer ÷ planned | peer ÷ invariant |",
                "|---|" + "---|" * (len(names) + 3),
            ]
            met = within = 0
            for r in rows:
                t = {n: x for n, x in r["times"].items() if "us" in x}
                cells = [f"{fmt(t[n]['us'])} ({t[n]['tflops']:.0f} TF, {t[n]['pct_read']:.0f} %)" if n in t else "—"
                         for n in names]  # fmt: skip
                best = min((t[n]["us"] for n in peer_names if n in t), default=None)
                inv, plan = (t.get(b, {}).get("us") for b in RACE_BUILDS)
                ratio = plan / inv if plan and inv else None
                met += bool(best and plan and best / plan >= AIMS[grid])
                within += bool(plan and inv and inv / plan <= INVARIANT_WITHIN)
                out.append(  # four digits: a ratio shown as 1.3 must not be 1.298 (an aim missed)
                    f"| {r['shape']} | " + " | ".join(cells) + f" | {fmt(ratio, 4)} | "
                    f"{fmt(best / plan, 4) if best and plan else '—'} | {fmt(best / inv, 4) if best and inv else '—'} |"
                )
            out += [
                "",
                f"Aims met: planned ≥ {AIMS[grid]}× the faster peer at {met} of {len(rows)} shapes; invariant "
                f"within {INVARIANT_WITHIN}× of planned at {within} of {len(rows)}.",
                "",
            ]
            errors = [f"- {r['shape']} {n}: {x['error']}" for r in rows for n, x in r["times"].items() if "error" in x]
            out += [*errors, ""] if errors else []
    return out


def _device(machine: dict) -> str:
    gpu = machine.get("gpu") or {}
    return f"{gpu.get('name') or 'no GPU'} ({gpu.get('arch') or '—'})"


def best_ceilings(run: dict) -> dict:
    """The ceilings to quote for the whole report: the highest copy and matrix rate any stage measured on the first
    file's device (a file from another device keeps its own ceilings: its rows' fractions are of those)."""
    out = {}
    first = run["runs"][0]["device"] if run["runs"] else None
    for key in ("copy_gbs", "bf16_tflops", "memcpy_dtod_gbs"):
        vals = [r["ceilings"].get(key) for r in run["runs"] if r["ceilings"].get(key) and r["device"] == first]
        out[key] = max(vals) if vals else None
    return out


def fmt(x, digits=3) -> str:
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_time(t: dict | None) -> str:
    if not t:
        return "—"
    return f"{fmt(t['median_us'])} ({fmt(t['p10_us'])}–{fmt(t['p90_us'])})"


def pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def header(run: dict, command: str) -> list[str]:
    m = run["machine"]
    gpu = m.get("gpu") or {}
    pk = m.get("packages") or {}
    cpu = (m.get("cpu") or {}).get("brand_raw") or m.get("processor") or "?"
    dates = sorted(r["datetime"] for r in run["runs"] if r["datetime"])
    devices: dict[str, list[str]] = {}
    for r in run["runs"]:
        devices.setdefault(r["device"], []).append(r["file"])
    if len(devices) > 1:  # each device with its files: a number holds only with its own file's device
        device = "; ".join(f"{d}: {', '.join(files)}" for d, files in devices.items())
        held = "each file's device (below), driver and date"
    else:
        device, held = f"{gpu.get('name') or 'no GPU'} ({gpu.get('arch') or '—'})", "this device, driver and date"
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `{command}` from {len(run['runs'])} benchmark file(s). Numbers hold only with {held}.",
        "",
        "| | |",
        "|---|---|",
        f"| device{'s' if len(devices) > 1 else ''} | {device} |",
        f"| driver | {gpu.get('driver') or '—'} (CUDA driver API {gpu.get('driver_api') or '—'}) |",
        f"| NVRTC | {gpu.get('nvrtc') or '—'} |",
        f"| CPU | {cpu} |",
        f"| packages | {', '.join(f'{p} {pk[p]}' for p in PACKAGES if p in pk) or '—'} |",
        f"| peers | {', '.join(f'{p} {v}' for p, v in (m.get('peers') or {}).items() if v) or 'none installed'} |",
        f"| revision | {', '.join(sorted({str(r['revision']) for r in run['runs']}))} |",
        f"| date | {dates[0] if dates else '—'}{' … ' + dates[-1] if len(dates) > 1 else ''} |",
        "",
        "| file | device | stage | date | command | cases |",
        "|---|---|---|---|---|---|",
    ]
    for r in run["runs"]:
        lines.append(
            f"| {r['file']} | {r['device']} | {r['stage'] or 'all'} | {r['datetime'] or '—'} | "
            f"`{r['command'] or '?'}` | {r['cases']} |"
        )
    return [*lines, ""]


def ceilings_section(run: dict) -> list[str]:
    lines = [
        "## Ceilings (measured in each stage's run)",
        "",
        "Copy rate: a copy kernel over 2 GiB each way, bytes read + written (cuMemcpyDtoD beside it for the "
        "record); read rate: a read-only kernel over the same 2 GiB, bytes read; bf16 matrix rate: torch.matmul "
        "(cuBLAS) 8192³ on random data.",
        "",
        "| stage | copy kernel GB/s | read kernel GB/s | cuMemcpyDtoD GB/s | bf16 matmul TFLOP/s | not measured |",
        "|---|---|---|---|---|---|",
    ]
    for r in run["runs"]:
        c = r["ceilings"]
        missing = "; ".join(f"{k}: {v}" for k, v in (c.get("unavailable") or {}).items())
        lines.append(
            f"| {r['stage'] or 'all'} | {fmt(c.get('copy_gbs'), 4)} | {fmt(c.get('read_gbs'), 4)} | "
            f"{fmt(c.get('memcpy_dtod_gbs'), 4)} | "
            f"{fmt(c.get('bf16_tflops'), 4)} | {missing or '—'} |"
        )
    return [*lines, ""]


def _errors(cases, names) -> list[str]:
    """One line per (comparator, error) pair, with how many cases it covers."""
    seen = collections.Counter()
    for c in cases:
        for n in names:
            e = c["comparators"].get(n, {}).get("error")
            if e:
                seen[(n, e.split(": ")[0] if e.startswith("out of memory") else e)] += 1
    return [f"- `{n}` did not run in {k} case(s): {e}" for (n, e), k in sorted(seen.items())]


def _comparator_names(cases) -> list[str]:
    names = []
    for c in cases:
        for n in c["comparators"]:
            if n not in names:
                names.append(n)
    return names


def tree_build_section(cases, plots: dict) -> list[str]:
    gpu = sorted((c for c in cases if c["op"] == "tree_build" and c["impl"] == "cuda"),
                 key=lambda c: (c["shape"].get("L", 15), c["shape"]["B"], c["shape"]["bs"],
                                c.get("variant", "")))  # fmt: skip
    cpu = sorted((c for c in cases if c["op"] == "tree_build" and c["impl"] != "cuda"),
                 key=lambda c: (c["impl"], c["shape"]["B"], c["shape"]["bs"]))  # fmt: skip
    if not gpu and not cpu:
        return []
    lines = ["## tree_build", ""]
    if gpu:
        names = _comparator_names(gpu)
        timed = [n for n in names if any("time" in c["comparators"].get(n, {}) for c in gpu)]
        lines += [
            "Kernel: device time, median (p10–p90) µs, L2 flushed before each launch; warm graph = replays of the "
            "same inputs (L2 warm); e2e = the whole call on device-resident inputs (wrapper, validation on host "
            "copies, launch, synchronised; host clock); deferred = the same through the capturable path (TB.4.5: "
            "value checks on the device, flag read), as a whole call and as a replay of a call prepared once. "
            "Comparators on the CPU, same inputs, same run; `+copies` = end to end as a serving engine runs it (top-k"
            " device→host, the build, every layout host→device, synchronised). "
            "Speedup = comparator median / kernel median.",
            "",
            "| bs | B | L | variant | kernel µs | warm graph µs | e2e µs | deferred µs | deferred replay µs | "
            + " | ".join(f"{n} µs" for n in timed)
            + " | " + " | ".join(f"× vs {n}" for n in timed if n != "copies_only") + " |",
            "|---|---|---|---|---|---|---|---|---|" + "---|" * (2 * len(timed) - ("copies_only" in timed)),
        ]  # fmt: skip
        for c in gpu:
            s = c["shape"]
            warm = (c.get("extra") or {}).get("warm_graph")
            e2e_dev = (c.get("extra") or {}).get("e2e_device_inputs") or {}
            deferred = (c.get("extra") or {}).get("e2e_deferred") or {}
            cells = [fmt_time(c["comparators"].get(n, {}).get("time")) for n in timed]
            sp = [fmt(c["speedups"].get(n)) for n in timed if n != "copies_only"]
            lines.append(
                f"| {s['bs']} | {s['B']} | {s.get('L', '—')} | {c.get('variant') or '—'} | {fmt_time(c['time'])} | "
                f"{fmt(warm['median_us']) if warm else '—'} | {fmt(e2e_dev.get('median_us'))} | "
                f"{fmt((deferred.get('call') or {}).get('median_us'))} | "
                f"{fmt((deferred.get('replay') or {}).get('median_us'))} | "
                + " | ".join(cells) + " | " + " | ".join(sp) + " |"
            )  # fmt: skip
        lines += ["", *_errors(gpu, names), ""]
        for key in ("tree_build_time", "tree_build_speedup"):
            if key in plots:
                lines += [f"![{key}]({plots[key]})", ""]
    if cpu:
        lines += [
            "CPU builders alone (pytest-benchmark rounds, host time):",
            "",
            "| builder | bs | B | median µs (p10–p90) |",
            "|---|---|---|---|",
        ]
        lines += [f"| {c['impl']} | {c['shape']['bs']} | {c['shape']['B']} | {fmt_time(c['time'])} |" for c in cpu]
        lines.append("")
    return lines


def tree_accept_section(cases) -> list[str]:
    rows = sorted((c for c in cases if c["op"] == "tree_accept"), key=lambda c: (c["impl"], c["shape"]["bs"]))
    if not rows:
        return []
    lines = [
        "## tree_accept + commit",
        "",
        "| impl | bs | median µs (p10–p90) | mean accept_len | GB/s | % of copy | CPU walk µs | × vs CPU walk |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        e = c.get("extra") or {}
        walk = c["comparators"].get("numpy_walk", {}).get("time")
        lines.append(
            f"| {c['impl']} | {c['shape']['bs']} | {fmt_time(c['time'])} | {fmt(e.get('mean_accept_len'))} | "
            f"{fmt(c['gbs'])} | {pct(c['fraction']['copy'])} | {fmt(walk['median_us']) if walk else '—'} | "
            f"{fmt(c['speedups'].get('numpy_walk'))} |"
        )
    return [*lines, ""]


DRAFT_TOPK_COMPARATORS = ("torch_topk_lse", "torch_topk_lse_fp32", "flashinfer_top_k_lse")


def draft_topk_section(cases) -> list[str]:
    """The drafter's front end: the numpy reference on the CPU, and the CUDA variants on the GPU with the fraction
    of the read ceiling (the logits' bytes over the time) and, per comparator (timed in the same run, replayed
    from a CUDA graph), its time and the ratio comparator / kernel (above 1: the kernel is faster)."""
    ops = [c for c in cases if c["op"] == "draft_topk"]
    if not ops:
        return []
    lines = ["## draft_topk", ""]
    cpu = sorted((c for c in ops if c["impl"] != "cuda"), key=lambda c: (c["impl"], *_topk_key(c)))
    if cpu:
        lines += [
            "| impl | bs | L | V | K | dtype | median µs (p10–p90) | logits GB/s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in cpu:
            sh = c["shape"]
            lines.append(
                f"| {c['impl']} | {sh['bs']} | {sh['L']} | {sh['V']} | {sh['K']} | {sh['dtype']} | "
                f"{fmt_time(c['time'])} | {fmt(c['gbs'])} |"
            )
        lines.append("")
    gpu = sorted(
        share_comparators([c for c in ops if c["impl"] == "cuda"], key=_topk_key),
        key=lambda c: (*_topk_key(c), c.get("variant", "")),
    )
    if not gpu:
        return lines
    names = [n for n in DRAFT_TOPK_COMPARATORS if any(n in c["comparators"] for c in gpu)]
    lines += [
        "% read = the logits' bytes over the kernel's time, as a fraction of the read ceiling measured in the same "
        "run; × vs X = X's time / the kernel's. Comparators: `torch_topk_lse` = `torch.topk` on the logits' dtype "
        "and each chosen logit minus `torch.logsumexp` of the float32 logits; `_fp32` = the same after a cast to "
        "float32 (the reference drafter's code); `flashinfer_top_k_lse` = `flashinfer.top_k` and the same "
        "logsumexp. Each is replayed from a CUDA graph with the L2 flushed, as the kernel is timed, once per shape "
        "beside one variant in the same run (every variant's row shows their times and its own ratio); their ids "
        "are checked against the kernel's as sets.",
        "",
        "| variant | bs | L | V | K | dtype | kernel µs (p10–p90) | % read | "
        + " | ".join(f"{n} µs | × vs {n}" for n in names)
        + " |",
        "|---|---|---|---|---|---|---|---|" + "---|---|" * len(names),
    ]
    for c in gpu:
        sh = c["shape"]
        cells = [f"{_cell(c['comparators'].get(n))} | {fmt(c['speedups'].get(n))}" for n in names]
        lines.append(
            f"| {c.get('variant') or '—'} | {sh['bs']} | {sh['L']} | {sh['V']} | {sh['K']} | {sh['dtype']} | "
            f"{fmt_time(c['time'])} | {pct(c['fraction'].get('read'))} | " + " | ".join(cells) + " |"
        )
    lines += ["", *_topk_aims(gpu), ""]
    return lines


STEP_USERS = ("users_round_python_heapq", "users_round_cpp")


def _step_shape(c) -> tuple:
    """A step record's table order: by H, then B, then bs."""
    return tuple(c["shape"][k] for k in ("H", "B", "bs"))


STEP_OPS = contract_step.OPS  # the step's ops in order


def step_section(cases) -> list[str]:
    """One DDTree step on the device (kernels_cu.step, one CUDA graph per round) beside the users' round: its round
    on a host clock, its device time against the sum of its ops launched alone, each op's share, the host waits
    counted in a round, and the users' rounds (their host clock) with the ratio users' round / step round."""
    ops = sorted((c for c in cases if c["op"] == "step" and c.get("impl") != TORCH_OPS), key=_step_shape)
    if not ops:
        return torch_ops_lines(cases)
    names = [n for n in STEP_USERS if any(n in c["comparators"] for c in ops)]
    lines = [
        "## One DDTree step on the device",
        "",
        "`kernels_cu.step`: draft_topk → tree_build → tree_verify → tree_accept with its commit and the advance of "
        "each request's prefix and root, one CUDA graph replayed per round (V 163,840, L 16, K 32, bf16, prefix "
        "8,192). round µs = the graph's launch and a wait for it, host clock; device µs = events around each replay, "
        "L2 flushed; alone = each op captured and replayed alone (L2 flushed), their sum and shares; syncs = host "
        "waits counted in 3 rounds. Users' round (host clock): torch.log_softmax on the float32 logits and "
        "torch.topk on the GPU, a copy to the host, the tree built there (Python heapq: the paper's build; C++: "
        "the engine's builder), its layouts copied back, the same verify and accept; × = users' round / step round.",
        "",
        "| H | B | bs | round µs (p10–p90) | device µs | sum alone µs | device / sum | draft_topk | tree_build | "
        "tree_verify | tree_accept | syncs | " + " | ".join(f"{n} µs | × vs {n}" for n in names) + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|---|" * len(names),
    ]
    for c in ops:
        sh, ex = c["shape"], c.get("extra", {})
        share = ex.get("share", {})
        cells = [f"{_cell(c['comparators'].get(n))} | {fmt(c['speedups'].get(n))}" for n in names]
        lines.append(
            f"| {sh['H']} | {sh['B']} | {sh['bs']} | {fmt_time(c['time'])} | {fmt(ex.get('device_us'))} | "
            f"{fmt(ex.get('sum_alone_us'))} | {fmt(ex.get('graph_over_sum'))} | "
            + " | ".join(pct(share.get(o)) for o in STEP_OPS)
            + f" | {ex.get('host_syncs_in_3_rounds', '—')} | "
            + " | ".join(cells)
            + " |"
        )
    return [*lines, "", *_step_aims(ops), *step_per_model_lines(ops), *torch_ops_lines(cases)]


def _non_verify(c) -> tuple[float, float, dict[str, float]] | None:
    """(tree_verify alone, the step's non-verify work, {users' builder: their non-verify time}) for one step case with
    its ops timed alone: the work is draft_topk + tree_build + tree_accept; the users' round does the same verify and
    accept, so its non-verify time is its round less the step's tree_verify (a host clock less a device time: the
    users' copies and waits stay in it). None without the ops' times."""
    alone = c.get("extra", {}).get("alone_us") or {}
    if "tree_verify" not in alone:
        return None
    verify = alone["tree_verify"]
    users = {n: c["comparators"][n]["time"]["median_us"] - verify for n in STEP_USERS
             if (c["comparators"].get(n) or {}).get("time")}  # fmt: skip
    return verify, sum(v for o, v in alone.items() if o != "tree_verify"), users


def _step_aims(ops) -> list[str]:
    """The step's aims counted over the table's shapes: its non-verify work >= 10x smaller than each users' round's,
    the replayed graph within 5 % of its kernels' sum, no host wait in a round."""
    parts = []
    for n in STEP_USERS:
        xs = [users[n] / work for _, work, users in filter(None, map(_non_verify, ops)) if n in users and work > 0]
        if xs:
            met = sum(x >= 10 for x in xs)
            parts.append(
                f"≥ 10× vs {n.removeprefix('users_round_')} at {met} of {len(xs)} ({fmt(min(xs))}–{fmt(max(xs))}×)"
            )
    over = [c["extra"]["graph_over_sum"] for c in ops if c.get("extra", {}).get("graph_over_sum") is not None]
    syncs = [c["extra"]["host_syncs_in_3_rounds"] for c in ops if "host_syncs_in_3_rounds" in c.get("extra", {})]
    if over:
        parts.append(f"the graph within 5 % of its kernels' sum at {sum(abs(x - 1) <= 0.05 for x in over)} of "
                     f"{len(over)} (device / sum {fmt(min(over))}–{fmt(max(over))})")  # fmt: skip
    if syncs:
        parts.append(f"no host wait in a round at {sum(x == 0 for x in syncs)} of {len(syncs)}")
    return [f"Aims met (non-verify work = draft_topk + tree_build + tree_accept alone; the users' = their round less "
            f"the step's tree_verify): {'; '.join(parts)}.", ""] if parts else []  # fmt: skip


TORCH_OPS = "torch-ops"  # perf/bench_torch_ops.py's records: the step's round as torch.ops.kdtree operators


def torch_ops_lines(cases) -> list[str]:
    """The step's round made of the PyTorch operators (torch.ops.kdtree.*, perf/bench_torch_ops.py) beside Step's own
    graph: captured in a CUDA graph (device time) and called eagerly (host time per round and per operator call)."""
    rows = sorted((c for c in cases if c["op"] == "step" and c.get("impl") == TORCH_OPS), key=_step_shape)
    if not rows:
        return []
    out = [
        "### The step as PyTorch operators",
        "",
        "The same round made of `torch.ops.kdtree.*` calls (the same kernels): in a CUDA graph, device time beside "
        "`kernels_cu.step.Step`'s graph (events, L2 flushed); eagerly, the round's host time beside Step's eager "
        "launches and each operator call's host time over its bare launch (shape checks, the prepared-call lookup, "
        "torch's dispatcher).",
        "",
        "| H | B | bs | operators in a graph µs | Step's graph µs | difference | eager round µs | Step eager µs | "
        "host µs over the bare launch per call |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        sh, ex = c["shape"], c.get("extra", {})
        step_us, ops_us = ex.get("step_graph_us"), c["time"]["median_us"]
        over = ", ".join(f"{k} {fmt(v)}" for k, v in ex.get("eager_overhead_us", {}).items()) or "—"
        out.append(
            f"| {sh['H']} | {sh['B']} | {sh['bs']} | {fmt(ops_us)} | {fmt(step_us)} | "
            f"{pct((ops_us - step_us) / step_us) if step_us else '—'} | {fmt(ex.get('eager_round_us'))} | "
            f"{fmt(ex.get('step_eager_round_us'))} | {over} |"
        )
    return [*out, ""]


TENSOR_PARALLEL = (1, 8)  # the attention heads a GPU holds: the model's heads / TP


def step_per_model_lines(steps) -> list[str]:
    """The figure a user plans with, from the step's measured parts (its ops launched alone) for each model of e2e
    at tensor parallelism 1 and 8: tree_verify runs once per layer, the tree work (draft_topk, tree_build,
    tree_accept) once per step, so the tree work's share of a step's attention time is work / (layers · verify +
    work); the users' round does the same verify and accept, so its non-verify time is its round less the step's
    tree_verify alone (a host clock less a device time: the users' copies and waits stay in it), and the step saves
    users' non-verify - step's non-verify per step (the verify is the same kernel in both)."""
    rows = []
    measured = sorted((c for c in steps if c.get("extra", {}).get("alone_us")),
                      key=lambda c: (c["shape"]["B"], c["shape"]["bs"]))  # fmt: skip
    for m in e2e.MODELS:
        for tp in TENSOR_PARALLEL:
            for c in (c for c in measured if c["shape"]["H"] == m.heads // tp):
                if parts := _non_verify(c):
                    rows.append((m, tp, c, *parts))
    if not rows:
        return []
    out = [
        "### What the step saves per model (measured parts)",
        "",
        "Per model and tensor parallelism (the heads one GPU holds), from the table above: tree_verify (once per "
        "layer) and the step's non-verify work (draft_topk + tree_build + tree_accept, launched alone, once per "
        "step); the tree work's share of a step's attention time (layers · tree_verify + non-verify); the users' "
        "non-verify time (their round, host clock, less the step's tree_verify) and what the step saves per step. "
        "The rest of a layer (MLP/MoE, communication) is not in these figures: the modelled section below adds it.",
        "",
        "| model | TP | H | B | bs | tree_verify µs | step non-verify µs | tree work share of attention | "
        + " | ".join(f"{n.removeprefix('users_round_')} non-verify µs | × | ms saved per step" for n in STEP_USERS)
        + " |",
        "|---|---|---|---|---|---|---|---|" + "---|---|---|" * len(STEP_USERS),
    ]
    for m, tp, c, verify, work, users in rows:
        sh = c["shape"]
        cells = []
        for n in STEP_USERS:
            u = users.get(n)
            cells.append("— | — | —" if u is None else f"{fmt(u)} | {fmt(u / work)} | {fmt((u - work) / 1000)}")
        out.append(
            f"| {m.name} ({m.layers} layers) | {tp} | {sh['H']} | {sh['B']} | {sh['bs']} | {fmt(verify)} | "
            f"{fmt(work)} | {pct(work / (m.layers * verify + work))} | " + " | ".join(cells) + " |"
        )
    heads = sorted({m.heads // tp for m in e2e.MODELS for tp in TENSOR_PARALLEL})
    if missing := [h for h in heads if h not in {r[2]["shape"]["H"] for r in rows}]:
        out.append(f"\nNot measured in these files: H = {', '.join(map(str, missing))} (their rows are absent).")
    return [*out, ""]


def _topk_key(c) -> tuple:
    sh = c["shape"]
    return (sh["dtype"], sh["V"], sh["L"], sh["K"], sh["bs"])


def _topk_aims(gpu) -> list[str]:
    """Issue 32's aims, per variant, over the shapes measured: bs 1 L 16 V 163,840 bf16 within 5 µs; from 1,024 rows
    within 1.5x of the read time; at least 3x torch.topk + logsumexp (10x from 1,024 rows); at least 1x flashinfer."""
    out = []
    for variant in sorted({c.get("variant") or "—" for c in gpu}):
        mine = [c for c in gpu if (c.get("variant") or "—") == variant]
        small = [c for c in mine if (c["shape"]["bs"], c["shape"]["L"], c["shape"]["V"], c["shape"]["dtype"])
                 == (1, 16, 163_840, "bf16")]  # fmt: skip
        big = [c for c in mine if c["shape"]["bs"] * c["shape"]["L"] >= 1024 and c["fraction"].get("read")]
        torch_x = [min(v for n, v in c["speedups"].items() if n.startswith("torch_")) for c in mine
                   if any(n.startswith("torch_") for n in c["speedups"])]  # fmt: skip
        fi = [c["speedups"]["flashinfer_top_k_lse"] for c in mine if "flashinfer_top_k_lse" in c["speedups"]]
        parts = []
        if small:
            times = ", ".join(f"K {c['shape']['K']} {fmt(c['time']['median_us'])} µs" for c in small)
            parts.append(f"bs 1 x L 16 at V 163,840 bf16: {times} (aim: 5 µs)")
        if big:
            rt = [1 / c["fraction"]["read"] for c in big]
            parts.append(f"from 1,024 rows: {fmt(min(rt))}–{fmt(max(rt))}x the read time (aim: 1.5x)")
        if torch_x:
            parts.append(f"× vs the faster torch front end: {fmt(min(torch_x))}–{fmt(max(torch_x))} (aim: 3, 10 from "
                         "1,024 rows)")  # fmt: skip
        parts.append(f"× vs flashinfer: {fmt(min(fi))}–{fmt(max(fi))} (aim: 1)" if fi else "flashinfer: not measured")
        out.append(f"- {variant} over {len(mine)} shapes: " + "; ".join(parts) + ".")
    return out


PEERS = ("flashmla", "flashinfer_mla", "flashinfer_mla_fa2", "flashmla_cascade", "flashinfer_mla_cascade")


def _cell(x: dict | None) -> str:
    """A comparator's median µs, or why it has none."""
    if x is None:
        return "—"
    if "time" in x:
        return fmt(x["time"]["median_us"])
    e = x["error"]
    if e.startswith("out of memory"):
        return "OOM"
    if e.startswith("wrong result"):
        return "wrong"
    return "n/a" if "not installed" in e or "cannot run" in e or "GPU" in e else "err"


# what each set's aim compares a variant with (issue 25's aims): chains with the faster public decode kernel
# (fa2 apart: portable's own yardstick), trees with the faster cascade built from them
PEER_SETS = {
    "chain": ("the faster of FlashMLA and FlashInfer MLA (fa3)", ("flashmla", "flashinfer_mla"), AIMS["chains"]),
    "fa2": ("FlashInfer MLA fa2", ("flashinfer_mla_fa2",), 1.0),
    "grid": ("the faster of the FlashMLA and FlashInfer MLA cascades",
             ("flashmla_cascade", "flashinfer_mla_cascade"), AIMS["trees"]),
}  # fmt: skip


def _shape_key(c) -> tuple:
    s = c["shape"]
    return (s.get("sweep", "grid"), s["H"], s["Q"], s["prefix"], s["bs"])


def share_comparators(gpu, key=_shape_key) -> list[dict]:
    """The comparators of a shape (`key` of a case: tree_verify's by default) run once, beside one variant, in the
    same run as the other variants at that shape: every variant's row gets their times and its own ratio to them
    (copies; the rows given are left as they are). Rows from different stage files never share."""
    by_shape = collections.defaultdict(dict)
    for c in gpu:
        for n, comp in c["comparators"].items():
            by_shape[(c.get("stage_file"), *key(c))].setdefault(n, comp)
    out = []
    for c in gpu:
        comps = {**by_shape[(c.get("stage_file"), *key(c))], **c["comparators"]}
        med = c["time"]["median_us"]
        sp = {n: x["time"]["median_us"] / med for n, x in comps.items() if "time" in x and med > 0}
        out.append({**c, "comparators": comps, "speedups": sp})
    return out


def peer_summary(gpu, peer_names) -> list[str]:
    """Per set (chain: the public decode kernels; fa2; grid: the cascades on DDTree trees) and variant: × vs
    the faster peer of the set, as a median and a range over the shapes, with the shapes that meet the aim
    (≥ 1 on chains, ≥ 1.3 against the cascades) counted."""
    out = []
    groups = collections.defaultdict(list)
    for c in gpu:
        sweep = c["shape"].get("sweep", "grid")
        for set_name, (_, names, _) in PEER_SETS.items():
            if (set_name == "grid") != (sweep == "grid") or not set(names) & set(peer_names):
                continue
            sp = [c["speedups"][n] for n in names if c["speedups"].get(n) is not None]
            if sp:
                groups[(set_name, sweep, c.get("variant") or "—")].append(min(sp))
    for (set_name, sweep, variant), v in sorted(groups.items()):
        label, _, aim = PEER_SETS[set_name]
        aim = AIMS["mixed"] if (set_name, sweep) == ("chain", "mixed") else aim
        sweep = "grid (DDTree trees)" if set_name == "grid" else sweep
        out.append(
            f"- {sweep}, {variant}: × vs {label} over {len(v)} shapes: median {fmt(statistics.median(v))}, "
            f"from {fmt(min(v))} to {fmt(max(v))}; at least {fmt(aim)} at {sum(x >= aim for x in v)} of {len(v)}."
        )
    return [*out, ""] if out else []


def _by_variant_and_shape(gpu) -> dict:
    """The rows by (run file, variant, set, H, Q, prefix, bs)."""
    return {(c.get("stage_file"), c.get("variant"), *_shape_key(c)): c for c in gpu}


def _planned_ratio(c, by_shape) -> float | None:
    """A planned row's time ÷ the invariant build's at its shape in the same run (None on every other row)."""
    invariant, planned = RACE_BUILDS
    i = by_shape.get((c.get("stage_file"), invariant, *_shape_key(c))) if c.get("variant") == planned else None
    return c["time"]["median_us"] / i["time"]["median_us"] if i and i["time"]["median_us"] > 0 else None


def planned_vs_invariant(gpu) -> list[str]:
    """Per set (chain, mixed, grid): the planned build's time ÷ the batch-invariant build's at the same shape in the
    same run (below 1: what batch invariance costs), with the issue's aim counted (the invariant build within
    INVARIANT_WITHIN of the planned one)."""
    by_shape = _by_variant_and_shape(gpu)
    groups = collections.defaultdict(list)
    for c in gpu:
        r = _planned_ratio(c, by_shape)
        if r is not None:
            groups[_shape_key(c)[0]].append(r)
    invariant, planned = RACE_BUILDS
    out = [
        f"- {'grid (DDTree trees)' if sweep == 'grid' else sweep}: {planned} ÷ {invariant} over {len(r)} shapes: "
        f"median {fmt(statistics.median(r))}, from {fmt(min(r))} to {fmt(max(r))}; {invariant} within "
        f"{INVARIANT_WITHIN}× of {planned} at {sum(1 / x <= INVARIANT_WITHIN for x in r)} of {len(r)}."
        for sweep, r in sorted(groups.items())
    ]
    return [*out, ""] if out else []


def tree_vs_chain(gpu) -> list[str]:
    """Per variant: its time on a DDTree tree / its time on a chain of the same H, Q, prefix and bs (the aim:
    within 10 %), where both were timed (possibly in different runs: the file of each is named)."""
    chains = {(c.get("variant"), *_shape_key(c)[1:]): c for c in gpu if c["shape"].get("sweep") == "chain"}
    pairs = collections.defaultdict(list)
    for c in gpu:
        if c["shape"].get("sweep", "grid") != "grid":
            continue
        ch = chains.get((c.get("variant"), *_shape_key(c)[1:]))
        if ch:
            pairs[c.get("variant")].append((_shape_key(c)[1:], c["time"]["median_us"] / ch["time"]["median_us"], ch))
    out = []
    for variant, v in sorted(pairs.items()):
        r = [x for _, x, _ in v]
        files = sorted({ch.get("stage_file") or "?" for _, _, ch in v})
        worst = max(v, key=lambda p: p[1])[0]
        out.append(
            f"- {variant}: tree time / chain time at the same H, Q, prefix, bs over {len(v)} shapes (chains from "
            f"{', '.join(files)}): median {fmt(statistics.median(r))}, from {fmt(min(r))} to {fmt(max(r))} "
            f"(worst H={worst[0]} Q={worst[1]} prefix={worst[2]} bs={worst[3]}); within 1.1 at "
            f"{sum(x <= 1.1 for x in r)} of {len(r)}."
        )
    return [*out, ""] if out else []


def tree_verify_section(cases, plots: dict) -> list[str]:
    rows = [c for c in cases if c["op"] == "tree_verify"]
    if not rows:
        return []
    key = lambda c: (
        c["shape"].get("sweep", ""),
        c["shape"]["H"],
        c["shape"]["Q"],
        c["shape"]["prefix"],
        c["shape"]["bs"],
    )
    rows.sort(key=key)
    gpu = share_comparators([c for c in rows if c["impl"] == "cuda"])
    lines = ["## tree_verify", ""]
    if gpu:
        names = _comparator_names(gpu)
        peer_names = [n for n in names if n in PEERS]
        torch_names = [n for n in names if n not in PEERS]
        lines += [
            "Useful TFLOP/s = 2·H·Σ_q(prefix + visible tree rows)·(576 + 512) / device time; GB/s counts each cache "
            "row once plus q and out; % read = of the read ceiling (a kernel that only streams memory in), % copy = "
            "of the copy ceiling. Comparators: torch on the same device inputs (their time includes gathering "
            "rows from the paged cache); the public MLA kernels (`set` chain: FlashMLA, FlashInfer MLA on the same "
            "chain-shaped tree) and the cascades built from them (on the tree grid), each checked against the "
            "float64 oracle at that shape; × vs X = X's time / the kernel's (above 1: the kernel is faster). "
            "A shape's comparators run once, beside one variant, in the same run as the others: every variant's "
            "row shows their times and its own ratio. "
            "`OOM` = would not fit or ran out of memory; `wrong` = failed its oracle check; `n/a` = not available "
            "here; `err` = failed (below).",
            "",
            "| set | H | Q | prefix | bs | variant | kernel µs | TFLOP/s | % bf16 | GB/s | % read | % copy | "
            "planned ÷ invariant | "
            + " | ".join(f"{n} µs" for n in torch_names) + " | × vs fastest torch | "
            + " | ".join(f"{n} µs | × vs {n}" for n in peer_names) + (" |" if peer_names else ""),
            "|" + "---|" * (13 + len(torch_names) + 1 + 2 * len(peer_names)),
        ]  # fmt: skip
        by_shape = _by_variant_and_shape(gpu)
        for c in gpu:
            s = c["shape"]
            cells = [_cell(c["comparators"].get(n)) for n in torch_names]
            torch_sp = [v for n, v in c["speedups"].items() if n in torch_names]
            best = min(torch_sp) if torch_sp else None
            peer_cells = [f"{_cell(c['comparators'].get(n))} | {fmt(c['speedups'].get(n))}" for n in peer_names]
            lines.append(
                f"| {s.get('sweep', 'grid')} | {s['H']} | {s['Q']} | {s['prefix']} | {s['bs']} | "
                f"{c.get('variant') or '—'} | "
                f"{fmt_time(c['time'])} | {fmt(c['tflops'])} | {pct(c['fraction']['bf16'])} | {fmt(c['gbs'])} | "
                f"{pct(c['fraction'].get('read'))} | {pct(c['fraction']['copy'])} | "
                f"{fmt(_planned_ratio(c, by_shape), 4)} | " + " | ".join(cells)
                + f" | {fmt(best)} |" + "".join(f" {p} |" for p in peer_cells)
            )  # fmt: skip
        lines += ["", *_errors(gpu, names), ""]
        lines += peer_summary(gpu, peer_names)
        lines += planned_vs_invariant(gpu)
        lines += tree_vs_chain(gpu)
        for k in ("tree_verify_peers", "tree_verify_prefix", "tree_verify_batch", "tree_verify_budget"):
            if k in plots:
                lines += [f"![{k}]({plots[k]})", ""]
    cpu = [c for c in rows if c["impl"] != "cuda"]
    if cpu:
        lines += ["| impl | H | Q | prefix | bs | median µs | TFLOP/s |", "|---|---|---|---|---|---|---|"]
        for c in cpu:
            s = c["shape"]
            lines.append(
                f"| {c['impl']} | {s['H']} | {s['Q']} | {s['prefix']} | {s['bs']} | {fmt_time(c['time'])} | "
                f"{fmt(c['tflops'])} |"
            )
        lines.append("")
    return lines


def sm120_section(cases) -> list[str]:
    """tree_verify's MODELLED sm_120 line beside the H200's measured times (harness/bench/sm120.py)."""
    rows = sm120.lines(cases)
    if not rows:
        return []
    key = lambda s: (s.get("sweep", ""), s["H"], s["Q"], s["prefix"], s["bs"])
    h200 = {key(c["shape"]): c for c in cases if c["op"] == "tree_verify" and c.get("variant") == "portable"}
    lines = [
        "## tree_verify on an RTX PRO 6000 Blackwell, sm_120 (MODELLED)",
        "",
        f"An sm_120 GPU runs `portable` with its 99 KB tiles; `{sm120.VARIANT}` is that build for sm_90, which the "
        "H200 ran through every conformance clause and timed here (measured). No sm_120 GPU ran: its column is a "
        "model, from published peaks:",
        "",
        *[f"- {a}" for a in sm120.assumptions()],
        "",
        f"| set | H | Q | prefix | bs | H200 {sm120.VARIANT} µs | H200 portable µs | sm_120 µs (MODELLED) | "
        "model bound by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: key(r.shape)):
        s, own = r.shape, h200.get(key(r.shape))
        lines.append(
            f"| {s.get('sweep', 'grid')} | {s['H']} | {s['Q']} | {s['prefix']} | {s['bs']} | {fmt(r.h200_us)} | "
            f"{fmt(own['time']['median_us']) if own else '—'} | {fmt(r.sm120_us)} | {r.bound} |"
        )
    return [*lines, ""]


def _measured_step_lines(cases, budget: int) -> list[str]:
    """What the step's benchmark measured of the tree work's share, beside the model (its B only): per case, each
    op's share of the step's kernels and the users' round over the step's round."""
    steps = [c for c in cases if c["op"] == "step" and c["shape"]["B"] == budget and c.get("extra", {}).get("share")]
    if not steps:
        return []
    out = [
        f"Measured, not modelled (the step's table above, B = {budget}): on one GPU, one layer's tree_verify, the "
        "tree work around it (draft_topk, tree_build, tree_accept) and the users' round in place of the step's. "
        "The model below stays for what one GPU does not hold (every layer, the MoE, the communication).",
        "",
        "| H | bs | step round µs | draft_topk | tree_build | tree_verify | tree_accept | tree work (not verify) | "
        "users' round / step round |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(steps, key=lambda c: (c["shape"]["H"], c["shape"]["bs"])):
        sh, share = c["shape"], c["extra"]["share"]
        users = ", ".join(f"{n.removeprefix('users_round_')} {fmt(v)}×" for n, v in sorted(c["speedups"].items()))
        work = sum(share.get(o, 0.0) for o in STEP_OPS if o != "tree_verify")
        out.append(
            f"| {sh['H']} | {sh['bs']} | {fmt(c['time']['median_us'])} | "
            + " | ".join(pct(share.get(o)) for o in STEP_OPS)
            + f" | {pct(work)} | {users or '—'} |"
        )
    return [*out, ""]


def e2e_section(run: dict, plots: dict, assumptions: e2e.Assumptions) -> list[str]:
    ceil = best_ceilings(run)
    lines = [
        "## End-to-end analysis (MODELLED)",
        "",
        "What each op costs in one decoding step, from the kernel times measured above and a *model* of the rest "
        "of the target's verify forward. It is a model: every assumption is listed, the numbers move with them, and "
        "only the per-op times marked measured come from this run.",
        "",
        "Assumptions:",
        "",
        *[f"- {x}" for x in assumptions.lines()],
        f"- ceilings: copy {fmt(ceil.get('copy_gbs') or e2e.H200_COPY_GBS, 4)} GB/s, bf16 "
        f"{fmt(ceil.get('bf16_tflops') or e2e.H200_BF16_TFLOPS, 4)} TFLOP/s"
        + ("" if ceil.get("copy_gbs") else " (not measured in this run: the H200 values seen before)"),
        "",
    ]
    lines += _measured_step_lines(run["cases"], assumptions.budget)
    for model in e2e.MODELS:
        res = e2e.analyse(run["cases"], model, assumptions, ceil)
        meta = res["meta"]
        names = sorted({n for r in res["rows"] for n in r["cpu"]})
        lines += [
            f"### {model.name} ({model.layers} layers, {model.heads} heads, {model.experts} routed experts top-"
            f"{model.top_k} + {model.shared} shared, {model.total_params / 1e12:g}T total / "
            f"{model.active_params / 1e9:g}B active)",
            "",
            f"Measured inputs used: tree_build at B = {meta['tree_build_B']}, tree_verify at Q = {meta['verify_Q']}, "
            f"prefix {meta['verify_prefix']} (scaled by FLOPs to Q = {assumptions.budget + 1}, prefix "
            f"{assumptions.prefix}).",
            "",
            "| c | bs/GPU | verify step ms (attention ms, source) | tree_verify share | tree_build kernel share | "
            + " | ".join(f"{n}: share, gain of kernel (graphs / eager)" for n in names)
            + " | tree_verify kernel vs best torch: gain |",
            "|---|---|---|---|---|" + "---|" * len(names) + "---|",
        ]  # fmt: skip
        for r in res["rows"]:
            cpu_cells = []
            for n in names:
                x = r["cpu"].get(n)
                if not x:
                    cpu_cells.append("—")
                    continue
                g = (
                    f"{pct(x['gain_graphs'])} / {pct(x['gain_eager'])}"
                    if x["gain_graphs"] is not None
                    else "no kernel time"
                )
                cpu_cells.append(f"{pct(x['share_of_step'])}, {g}")
            vg = r.get("verify_gain")
            vcell = f"{pct(vg['gain'])} ({vg['speedup']:.1f}×)" if vg else "—"
            build = pct(r["share"]["tree_build kernel"]) if r["build_us"] is not None else "—"
            lines.append(
                f"| {r['c']} | {r['bs_per_gpu']} | {r['verify_us'] / 1e3:.1f} ({r['attention_us'] / 1e3:.1f}, "
                f"{r['attention_source']}) | {pct(r['share']['tree_verify (attention)'])} | {build} | "
                + " | ".join(cpu_cells)
                + f" | {vcell} |"
            )
        lines += ["", *[f"- {x}" for x in e2e.conclusions(res)], ""]
        table = e2e.by_budget(run["cases"], model, assumptions, ceil)
        if table:
            lines += [
                f"CPU tree build by budget ({model.name}; every B the run measured): share of the step and the "
                "kernel's end-to-end gain (CUDA graphs) at the lowest and highest concurrency, and the first "
                "concurrency at which the CPU build, overlapped with the GPU, bounds throughput.",
                "",
                "| B | CPU builder | share (c lo → hi) | kernel gain (c lo → hi) | bounds from c (graphs / eager) |",
                "|---|---|---|---|---|",
            ]
            for t in table:
                lines.append(
                    f"| {t['B']} | {t['builder']} | {pct(t['share_lo'])} → {pct(t['share_hi'])} | "
                    f"{pct(t['gain_lo'])} → {pct(t['gain_hi'])} | {t['bound_graphs'] or 'none'} / "
                    f"{t['bound_eager'] or 'none'} |"
                )
            lines.append("")
    if "e2e_share" in plots:
        lines += [f"![e2e_share]({plots['e2e_share']})", ""]
    return lines


def render(run: dict, *, command: str, plots: dict | None = None, assumptions: e2e.Assumptions | None = None) -> str:
    plots = plots or {}
    assumptions = assumptions or e2e.Assumptions()
    lines = header(run, command) + ceilings_section(run)
    lines += tree_build_section(run["cases"], plots)
    lines += tree_accept_section(run["cases"])
    lines += draft_topk_section(run["cases"])
    lines += tree_verify_section(run["cases"], plots)
    lines += race_section(run.get("races", []))
    lines += step_section(run["cases"])
    lines += sm120_section(run["cases"])
    lines += e2e_section(run, plots, assumptions)
    lines += [
        "## Method",
        "",
        "Device times: CUDA events; warm-up first; the L2 flushed (a 128 MiB memset) before each launch, or inputs "
        "rotated or large enough to exceed it; kernels shorter than 200 µs replayed in a CUDA graph so host launch "
        "overhead is not counted; median and p10–p90 of repetitions capped by a time budget. CPU times: host clock. "
        "Each case's JSON record (`extra_info`) holds shape, bytes, FLOPs, rates, fractions of the ceilings, "
        "comparators and speedups. The regression gate (`tools/perf_gate.py`) compares device times of two runs.",
        "",
    ]
    return "\n".join(lines)

"""PNG plots of a benchmark run (matplotlib, the `report` extra): tree_build time and speedup against batch
size per budget with every CPU comparator; tree_verify TFLOP/s against prefix, batch size and budget with the
measured bf16 ceiling drawn, and its time beside the public MLA kernels' on chains; the modelled share of the
step per op against concurrency. A plot whose data the run lacks is not drawn."""

from __future__ import annotations

import collections
import pathlib

from . import e2e, sm120

DPI = 110


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(plt, n, *, width=5.2, height=3.8):
    cols = min(n, 2) if n <= 4 else 4
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.set_visible(False)
    return fig, flat[:n]


def _label(v) -> str:
    return f"{v // 1024}k" if v >= 1024 and v % 1024 == 0 else str(v)


def _xticks(ax, values):
    """Log-2 x axis with ticks at the measured values, labelled plainly (1, 4, 16 / 1k, 8k, 128k)."""
    ax.set_xscale("log", base=2)
    values = sorted(set(values))
    ax.set_xticks(values)
    ax.set_xticklabels([_label(v) for v in values])
    ax.minorticks_off()


def _save(fig, out: pathlib.Path, name: str, rect=(0, 0, 1, 1)) -> str:
    fig.tight_layout(rect=rect)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI)
    fig.clf()
    return path.name


def tree_build(cases, out: pathlib.Path, plt) -> dict:
    gpu = [c for c in cases if c["op"] == "tree_build" and c["impl"] == "cuda" and e2e.default_depth(c["shape"])]
    if not gpu:
        return {}
    by_B = collections.defaultdict(list)
    for c in gpu:
        by_B[c["shape"]["B"]].append(c)
    names = []
    for c in gpu:
        names += [n for n, x in c["comparators"].items() if "time" in x and n not in names]
    made = {}
    for kind in ("time", "speedup"):
        fig, axes = _grid(plt, len(by_B))
        for ax, B in zip(axes, sorted(by_B)):
            rows = sorted(by_B[B], key=lambda c: c["shape"]["bs"])
            bs = [c["shape"]["bs"] for c in rows]
            variants = sorted({c.get("variant", "") for c in rows})
            if kind == "time":
                for k, v in enumerate(variants):
                    mine = [c for c in rows if c.get("variant", "") == v]
                    label = f"CUDA {v}".strip()
                    x = [c["shape"]["bs"] for c in mine]
                    ax.plot(x, [c["time"]["median_us"] for c in mine], "o-", color=f"C{k}", lw=2.2,
                            label=f"{label} (L2 flushed)")  # fmt: skip
                    warm = [(c["shape"]["bs"], (c.get("extra") or {}).get("warm_graph")) for c in mine]
                    warm = [(b, w["median_us"]) for b, w in warm if w]
                    if warm:
                        ax.plot(*zip(*warm), "o--", color=f"C{k}", lw=1.0, label=f"{label} (warm graph)")
            # the comparators ran once per variant on the same inputs: plot them against the first variant
            rows = [c for c in rows if c.get("variant", "") == variants[0]]
            for n in names:
                if kind == "speedup" and n == "copies_only":
                    continue
                pts = [(c["shape"]["bs"], c["comparators"][n]["time"]["median_us"], c["speedups"].get(n))
                       for c in rows if "time" in c["comparators"].get(n, {})]  # fmt: skip
                if pts:
                    y = [p[1] if kind == "time" else p[2] for p in pts]
                    style = "s:" if "copies" in n else "s-"
                    ax.plot([p[0] for p in pts], y, style, color=f"C{3 + names.index(n)}", label=n)
            _xticks(ax, bs)
            ax.set_yscale("log")
            ax.set_xlabel("batch size (requests)")
            ax.set_ylabel("µs per call" if kind == "time" else f"speedup of {variants[0]} (×)")
            if kind == "speedup":
                ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_title(f"tree_build, B = {B}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        made[f"tree_build_{kind}"] = _save(fig, out, f"tree_build_{kind}")
        plt.close(fig)
    return made


def _ceiling(ax, bf16):
    if bf16:
        ax.axhline(bf16, color="black", ls="--", lw=1, label=f"bf16 matmul ceiling {bf16:.0f} TFLOP/s")
        ax.set_ylim(0, bf16 * 1.1)
    else:
        ax.set_ylim(bottom=0)


def _roof(c, bf16, copy):
    """The attainable TFLOP/s of a case: min(bf16 rate, copy rate × its FLOPs per byte)."""
    if not (bf16 and copy and c["bytes"]):
        return None
    return min(bf16, copy * 1e9 * c["flops"] / c["bytes"] / 1e12)


def _series(ax, pts, label, roofs):
    (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    if roofs and all(r is not None for r in roofs):
        ax.plot([p[0] for p in pts], roofs, ":", color=line.get_color(), lw=1, alpha=0.7)


def tree_verify(cases, out: pathlib.Path, plt, bf16, copy=None) -> dict:
    grid = [c for c in cases if c["op"] == "tree_verify" and c["impl"] == "cuda" and "sweep" not in c["shape"]]
    sweep = [c for c in cases if c["op"] == "tree_verify" and c["impl"] == "cuda"
             and c["shape"].get("sweep") == "budget"]  # fmt: skip
    made = {}
    if grid:
        Hs = sorted({c["shape"]["H"] for c in grid})
        bss = sorted({c["shape"]["bs"] for c in grid})
        fig, axes = _grid(plt, len(Hs) * len(bss), width=4.2, height=3.4)
        for i, (H, bs) in enumerate((H, bs) for H in Hs for bs in bss):
            ax = axes[i]
            for Q in sorted({c["shape"]["Q"] for c in grid}):
                sel = sorted((c for c in grid if c["shape"]["H"] == H and c["shape"]["bs"] == bs
                              and c["shape"]["Q"] == Q), key=lambda c: c["shape"]["prefix"])  # fmt: skip
                if sel:
                    _series(ax, [(c["shape"]["prefix"], c["tflops"]) for c in sel], f"Q = {Q}",
                            [_roof(c, bf16, copy) for c in sel])  # fmt: skip
            _ceiling(ax, bf16)
            _xticks(ax, [c["shape"]["prefix"] for c in grid])
            ax.set_title(f"tree_verify H = {H}, bs = {bs}")
            ax.set_xlabel("prefix (tokens)")
            ax.set_ylabel("useful TFLOP/s")
            ax.grid(True, alpha=0.3)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
        fig.suptitle("tree_verify useful TFLOP/s against prefix (dotted: min(bf16 ceiling, copy rate × FLOP/byte))")
        made["tree_verify_prefix"] = _save(fig, out, "tree_verify_prefix", rect=(0, 0.05, 1, 1))
        plt.close(fig)
        prefixes = sorted({c["shape"]["prefix"] for c in grid})
        P = 8192 if 8192 in prefixes else prefixes[len(prefixes) // 2]
        fig, axes = _grid(plt, len(Hs))
        for ax, H in zip(axes, Hs):
            for Q in sorted({c["shape"]["Q"] for c in grid}):
                sel = sorted((c for c in grid if c["shape"]["H"] == H and c["shape"]["prefix"] == P
                              and c["shape"]["Q"] == Q), key=lambda c: c["shape"]["bs"])  # fmt: skip
                if sel:
                    _series(ax, [(c["shape"]["bs"], c["tflops"]) for c in sel], f"Q = {Q}",
                            [_roof(c, bf16, copy) for c in sel])  # fmt: skip
            _ceiling(ax, bf16)
            _xticks(ax, [c["shape"]["bs"] for c in grid])
            ax.set_title(f"tree_verify H = {H}, prefix {_label(P)}")
            ax.set_xlabel("batch size (requests)")
            ax.set_ylabel("useful TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="lower right")
        made["tree_verify_batch"] = _save(fig, out, "tree_verify_batch")
        plt.close(fig)
    if sweep:
        Hs = sorted({c["shape"]["H"] for c in sweep})
        fig, axes = _grid(plt, len(Hs))
        for ax, H in zip(axes, Hs):
            rows = sorted((c for c in sweep if c["shape"]["H"] == H), key=lambda c: c["shape"]["Q"])
            ax.plot([c["shape"]["Q"] - 1 for c in rows], [c["tflops"] for c in rows], "o-", lw=2.2, label="CUDA kernel")
            for n in sorted({n for c in rows for n in c["comparators"]}):
                pts = [(c["shape"]["Q"] - 1, c["flops"] / (c["comparators"][n]["time"]["median_us"] * 1e6))
                       for c in rows if "time" in c["comparators"].get(n, {})]  # fmt: skip
                if pts:
                    ax.plot(*zip(*pts), "s:", label=f"{n} (torch)")
            _ceiling(ax, bf16)
            s = rows[0]["shape"]
            _xticks(ax, [c["shape"]["Q"] - 1 for c in rows])
            ax.set_title(f"tree_verify H = {H}, prefix {s['prefix']}, bs = {s['bs']}")
            ax.set_xlabel("tree budget B (Q = 1 + B)")
            ax.set_ylabel("useful TFLOP/s")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7, loc="center right")
        made["tree_verify_budget"] = _save(fig, out, "tree_verify_budget")
        plt.close(fig)
    return made


PEER_STYLE = {"flashmla": "o", "flashinfer_mla": "s", "flashinfer_mla_fa2": "^"}


def tree_verify_peers(cases, out: pathlib.Path, plt) -> dict:
    """On chains: each peer's time / the kernel's per shape (above 1 the kernel is faster), one panel per H and
    variant, shapes ordered by Q, prefix and batch."""
    verify = [c for c in cases if c["op"] == "tree_verify" and c["impl"] == "cuda"]
    chain = [c for c in verify if c["shape"].get("sweep") == "chain"]
    panels = sorted({(c["shape"]["H"], c.get("variant")) for c in chain})
    if not panels:
        return {}
    fig, axes = _grid(plt, len(panels), width=7.5)
    for ax, (H, variant) in zip(axes, panels):
        rows = sorted((c for c in chain if c["shape"]["H"] == H and c.get("variant") == variant),
                      key=lambda c: (c["shape"]["Q"], c["shape"]["prefix"], c["shape"]["bs"]))  # fmt: skip
        xs = range(len(rows))
        for n, marker in PEER_STYLE.items():
            pts = [(x, c["speedups"][n]) for x, c in zip(xs, rows) if c["speedups"].get(n) is not None]
            if pts:
                ax.plot(*zip(*pts), marker, ls=":", label=n)
        ax.axhline(1.0, color="k", lw=1)
        ax.set_yscale("log", base=2)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"Q{c['shape']['Q']} {_label(c['shape']['prefix'])} bs{c['shape']['bs']}" for c in rows],
                           rotation=90, fontsize=6)  # fmt: skip
        ax.set_title(f"tree_verify {variant} on chains, H = {H}")
        ax.set_ylabel("peer time / kernel time")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    made = {"tree_verify_peers": _save(fig, out, "tree_verify_peers")}
    plt.close(fig)
    return made


def e2e_share(run_cases, out: pathlib.Path, plt, ceilings, assumptions) -> dict:
    results = [e2e.analyse(run_cases, m, assumptions, ceilings) for m in e2e.MODELS]
    fig, axes = _grid(plt, len(results))
    for ax, res in zip(axes, results):
        rows = res["rows"]
        cs = [r["c"] for r in rows]
        ax.plot(cs, [100 * r["share"]["tree_verify (attention)"] for r in rows], "o-", label="tree_verify attention")
        ax.plot(cs, [100 * r["share"]["rest of the verify forward"] for r in rows], "o-", label="rest of the forward")
        if rows[0]["build_us"] is not None:
            ax.plot(cs, [100 * r["share"]["tree_build kernel"] for r in rows], "o-", label="tree_build kernel")
        if rows[0]["accept_us"] is not None:
            ax.plot(cs, [100 * r["share"]["tree_accept kernel"] for r in rows], "o-", label="tree_accept kernel")
        for n in sorted({n for r in rows for n in r["cpu"]}):
            pts = [(r["c"], 100 * r["cpu"][n]["share_of_step"]) for r in rows if n in r["cpu"]]
            ax.plot(*zip(*pts), "s--", label=f"{n} (instead of the kernel)")
        _xticks(ax, cs)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("% of one decoding step (modelled)")
        ax.set_title(f"{res['model'].name}: share of the step (MODELLED)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    name = _save(fig, out, "e2e_share")
    plt.close(fig)
    return {"e2e_share": name}


def draw(run: dict, out: pathlib.Path, *, ceilings: dict, assumptions) -> dict:
    """Every plot the run has data for, as PNGs in `out`; returns {plot key: file name}."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    cases = [c for c in run["cases"] if not sm120.is_twin(c)]  # the H200's own variants (sm_120's: a table)
    made.update(tree_build(cases, out, plt))
    made.update(tree_verify(cases, out, plt, ceilings.get("bf16_tflops"), ceilings.get("copy_gbs")))
    made.update(tree_verify_peers(cases, out, plt))
    made.update(e2e_share(cases, out, plt, ceilings, assumptions))
    return made

"""Render a pytest-benchmark JSON (pytest perf --benchmark-json=...) as the Markdown tables of the report."""

from __future__ import annotations

import json
import pathlib
import sys


def main(path: str) -> str:
    data = json.loads(pathlib.Path(path).read_text())
    m = data.get("machine_info", {})
    lines = [
        f"# Performance ({data.get('datetime', '?')})",
        "",
        f"GPU: {m.get('gpu', {}).get('name', '?')} ({m.get('gpu', {}).get('arch', '?')}), driver "
        f"{m.get('gpu', {}).get('driver', '?')}; CPU: {m.get('cpu', {}).get('brand_raw', m.get('processor', '?'))}; "
        f"revision {m.get('git_revision') or data.get('commit_info', {}).get('id', '?')[:12]}",
        "",
    ]
    tb = [b for b in data["benchmarks"] if b["name"].startswith("test_tree_build")]
    if tb:
        lines += [
            "## tree_build (L = 15, K_in = B): kernel vs Python heapq",
            "",
            "| bs | B | kernel median µs (p10–p90) | heapq CPU µs | speedup | GB/s |",
            "|---|---|---|---|---|---|",
        ]
        for b in sorted(tb, key=lambda b: (b["extra_info"]["B"], b["extra_info"]["bs"])):
            e = b["extra_info"]
            d = e["device_us"]
            lines.append(
                f"| {e['bs']} | {e['B']} | {d['median_us']:.2f} ({d['p10_us']:.2f}–{d['p90_us']:.2f}) | "
                f"{e['cpu_heapq_us_median']:.0f} | {e['speedup_vs_heapq']:.0f}× | {e['achieved_gbs']:.1f} |"
            )
        cb = tb[0]["extra_info"].get("copy_bandwidth_gbs")
        lines += ["", f"Measured device-to-device copy rate: {cb:.0f} GB/s." if cb else "", ""]
    ta = [b for b in data["benchmarks"] if b["name"].startswith("test_tree_accept")]
    if ta:
        lines += [
            "## tree_accept + commit (B = 64, bf16 cache)",
            "",
            "| bs | kernel median µs (p10–p90) | mean accept_len | GB/s |",
            "|---|---|---|---|",
        ]
        for b in sorted(ta, key=lambda b: b["extra_info"]["bs"]):
            e = b["extra_info"]
            d = e["device_us"]
            lines.append(
                f"| {e['bs']} | {d['median_us']:.2f} ({d['p10_us']:.2f}–{d['p90_us']:.2f}) | "
                f"{e['mean_accept_len']:.1f} | {e['achieved_gbs']:.1f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main(sys.argv[1]))

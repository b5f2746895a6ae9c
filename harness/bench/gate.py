"""The performance regression gate: compare two benchmark JSON files case by case on the right time.

The right time: a GPU case's device time lives in `extra_info["time"]` (pytest-benchmark's own `stats` time
launch + sync from Python there, mostly host overhead); a CPU case's time is pytest-benchmark's own stats
(`time.where == "host"`, or a case without our record), the quantity pytest-benchmark's compare reads too.
By default only device times are gated: CPU times move with the runner's load (±30 % seen on the H200 host).

The threshold: a case regresses when new median > base median · (1 + t), with
t = max(floor, spread_factor · (rel_spread_base + rel_spread_new) / 2), rel_spread = (p90 − p10) / median of
each run. The floor comes from reruns of the same code: `calibrate(a, b)` = max(min_floor, 2 · the largest
|median_b / median_a − 1| over their common cases): a later rerun fails only if it moves more than twice the
worst run-to-run change the calibration saw, and a planted slowdown has to exceed that to be caught.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from . import record

MIN_FLOOR = 0.02
DEFAULT_FLOOR = 0.05  # without a calibration: H200 kernel medians repeated within 1 % (reports/h200-2026-12-02)
SPREAD_FACTOR = 2.0


@dataclasses.dataclass(frozen=True)
class Time:
    median_us: float
    rel_spread: float
    where: str


@dataclasses.dataclass(frozen=True)
class Row:
    case: str
    base: Time | None
    new: Time | None
    change: float | None  # new / base − 1
    threshold: float | None
    verdict: str  # ok | regression | improvement | missing | new


def load(path) -> dict:
    return json.loads(pathlib.Path(path).read_text())


def times(data: dict, *, include_host: bool = False) -> dict[str, Time]:
    """case fullname -> its gated time (ceilings are not gated: they describe the machine, not the code)."""
    out = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        if info.get("schema") == record.SCHEMA:
            if info.get("op") == "ceiling":
                continue
            t = info["time"]
            tm = Time(t["median_us"], t.get("rel_spread", 0.0), t.get("where", "device"))
        else:
            s = b.get("stats") or {}
            if not s.get("median"):
                continue
            med = s["median"] * 1e6
            tm = Time(med, (s.get("iqr", 0.0) * 1e6) / med if med else 0.0, "host")
        if tm.where == "device" or include_host:
            out[b["fullname"]] = tm
    return out


def calibrate(a: dict, b: dict, *, min_floor: float = MIN_FLOOR, include_host: bool = False) -> dict:
    """The threshold floor from two runs of the same code: 2 × the largest relative change between them."""
    ta, tb = times(a, include_host=include_host), times(b, include_host=include_host)
    common = sorted(set(ta) & set(tb))
    if not common:
        raise ValueError("calibration runs share no case")
    changes = {k: tb[k].median_us / ta[k].median_us - 1 for k in common}
    worst = max(changes, key=lambda k: abs(changes[k]))
    return {
        "floor": max(min_floor, 2 * abs(changes[worst])),
        "worst_case": worst,
        "worst_change": changes[worst],
        "cases": len(common),
    }


def compare(base: dict, new: dict, *, floor: float = DEFAULT_FLOOR, include_host: bool = False) -> list[Row]:
    tb, tn = times(base, include_host=include_host), times(new, include_host=include_host)
    rows = []
    for k in sorted(set(tb) | set(tn)):
        b, n = tb.get(k), tn.get(k)
        if b is None or n is None:
            rows.append(Row(k, b, n, None, None, "new" if b is None else "missing"))
            continue
        t = max(floor, SPREAD_FACTOR * (b.rel_spread + n.rel_spread) / 2)
        change = n.median_us / b.median_us - 1
        verdict = "regression" if change > t else "improvement" if change < -t else "ok"
        rows.append(Row(k, b, n, change, t, verdict))
    return rows


def device_of(data: dict) -> str:
    gpu = (data.get("machine_info") or {}).get("gpu") or {}
    return f"{gpu.get('name') or 'no GPU'} ({gpu.get('arch') or '-'})"


def render(rows: list[Row], *, floor: float, base_name: str, new_name: str) -> str:
    reg = [r for r in rows if r.verdict == "regression"]
    lines = [
        f"perf gate: {new_name} against {base_name}; threshold max({floor:.1%}, {SPREAD_FACTOR:g} x mean p10-p90 "
        f"spread) per case",
        f"{'case':<70} {'base us':>10} {'new us':>10} {'change':>8} {'allowed':>8}  verdict",
    ]
    for r in sorted(rows, key=lambda r: -(r.change if r.change is not None else -9)):
        if r.change is None:
            lines.append(f"{r.case:<70} {'':>10} {'':>10} {'':>8} {'':>8}  {r.verdict}")
            continue
        lines.append(
            f"{r.case:<70} {r.base.median_us:>10.2f} {r.new.median_us:>10.2f} {r.change:>+8.1%} "
            f"{r.threshold:>8.1%}  {r.verdict.upper() if r.verdict == 'regression' else r.verdict}"
        )
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("ok", "improvement", "regression", "missing", "new")}
    lines.append(
        "perf gate: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + (" -> FAIL" if reg else " -> pass")
    )
    return "\n".join(lines)

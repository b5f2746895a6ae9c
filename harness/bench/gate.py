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

The fallback rates: a tree_build select variant's case records, per input family, the share of requests whose
selection fell back to the heap replay (harness/bench/record.py's `fallback`). The tree is exact either way, so a
selection that stopped working shows only there; and a rate is a count on fixed inputs, not a measurement with
noise. So it is gated exactly and apart from the time threshold: any rise over the base fails (a fall is reported,
not failed), whatever the times did. A family whose launch selects nothing (rate null) has no rate to gate.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from . import record

MIN_FLOOR = 0.02
# without a calibration: H200 kernel medians repeated within 1 % (run h200-2026-12-02, removed from the tree:
# `git show d10a513:reports/h200-2026-12-02/README.md`)
DEFAULT_FLOOR = 0.05
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


@dataclasses.dataclass(frozen=True)
class Rate:
    replayed: int
    requests: int

    @property
    def rate(self) -> float:
        return self.replayed / self.requests

    def __str__(self) -> str:
        return f"{self.replayed}/{self.requests} ({self.rate:.1%})"


@dataclasses.dataclass(frozen=True)
class RateRow:
    case: str
    family: str
    base: Rate | None
    new: Rate | None
    verdict: str  # equal | rise | fall | missing | new


def fallback_rates(data: dict) -> dict[tuple[str, str], Rate]:
    """(case fullname, input family) -> its fallback rate, for every case record that has one."""
    out = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        if info.get("schema") != record.SCHEMA:
            continue
        for family, e in record.fallback_rates(info).items():
            out[b["fullname"], family] = Rate(int(e["replayed"]), int(e["requests"]))
    return out


def compare_fallbacks(base: dict, new: dict) -> list[RateRow]:
    """Every fallback rate of either run: rise (fails the gate), fall, equal, or present on one side only. The
    rates are compared exactly, as fractions of counts (cross-multiplied: no float rounding)."""
    rb, rn = fallback_rates(base), fallback_rates(new)
    rows = []
    for case, family in sorted(set(rb) | set(rn)):
        b, n = rb.get((case, family)), rn.get((case, family))
        if b is None or n is None:
            rows.append(RateRow(case, family, b, n, "new" if b is None else "missing"))
            continue
        lhs, rhs = n.replayed * b.requests, b.replayed * n.requests  # new rate vs base rate, both times the requests
        rows.append(RateRow(case, family, b, n, "rise" if lhs > rhs else "fall" if lhs < rhs else "equal"))
    return rows


def failed(rows: list[Row] | None, rate_rows: list[RateRow] | None) -> bool:
    """Whether a comparison fails the gate: a time regression, or any fallback rate that rose."""
    return any(r.verdict == "regression" for r in rows or ()) or any(r.verdict == "rise" for r in rate_rows or ())


def device_of(data: dict) -> str:
    gpu = (data.get("machine_info") or {}).get("gpu") or {}
    return f"{gpu.get('name') or 'no GPU'} ({gpu.get('arch') or '-'})"


def render(
    rows: list[Row] | None,
    *,
    floor: float,
    base_name: str,
    new_name: str,
    rate_rows: list[RateRow] | None = None,
) -> str:
    """The comparison as text: the time table (rows None: times not gated), the fallback rates that are not equal
    (each named with its case, family and both rates), and a last line with the counts and pass / FAIL."""
    lines = []
    if rows is None:
        lines.append(f"perf gate: {new_name} against {base_name}; fallback rates only (times not gated)")
    else:
        lines += [
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
    shown = [r for r in rate_rows or () if r.verdict != "equal"]
    if rate_rows:
        lines.append(
            f"fallback rates (replayed / requests of the select variants' reporting builds; exact: any rise fails): "
            f"{len(rate_rows) - len(shown)} equal" + (", the others:" if shown else "")
        )
    order = {"rise": 0, "missing": 1, "new": 2, "fall": 3}
    for r in sorted(shown, key=lambda r: (order[r.verdict], r.case, r.family)):
        verdict = "FALLBACK RATE ROSE" if r.verdict == "rise" else r.verdict
        lines.append(f"{r.case:<70} {r.family:<12} base {r.base or '-'!s:<18} new {r.new or '-'!s:<18} {verdict}")

    def counts(rs, verdicts):
        return ", ".join(f"{n} {v}" for v in verdicts if (n := sum(1 for r in rs if r.verdict == v)))

    parts = []
    if rows is not None:
        parts.append(counts(rows, ("ok", "improvement", "regression", "missing", "new")) or "no time")
    if rate_rows:
        parts.append("fallback rates: " + counts(rate_rows, ("equal", "rise", "fall", "missing", "new")))
    verdict = " -> FAIL" if failed(rows, rate_rows) else " -> pass"
    return "\n".join([*lines, "perf gate: " + "; ".join(parts) + verdict])

"""Skips for people: the conformance report's skipped rows grouped by reason (one line per reason instead of a
row per clause repeating the same driver error), the terminal's skip counts by reason, and one sentence
saying which implementations this run could not check at all, and why."""

from __future__ import annotations

import collections


def reason_of(report) -> str | None:
    """The skip message of a pytest report (None when it is not a skip with a message)."""
    if report.outcome != "skipped" or not isinstance(report.longrepr, tuple):
        return None
    return str(report.longrepr[2]).removeprefix("Skipped: ")


def _ids(values, limit=12) -> str:
    values = sorted(set(values))
    shown = ", ".join(values[:limit])
    return shown + (f", … (+{len(values) - limit})" if len(values) > limit else "")


def group_rows(rows: list[dict]) -> list[dict]:
    """Skipped report rows grouped by their reason(s): reason, row count, impls, devices, clauses."""
    groups: dict[str, dict] = {}
    for r in rows:
        if r["status"] != "skip":
            continue
        reason = "; ".join(r["skip_reasons"]) or "(no reason given)"
        g = groups.setdefault(reason, {"reason": reason, "rows": 0, "impls": set(), "devices": set(), "clauses": []})
        g["rows"] += 1
        g["impls"].add(r["impl"])
        g["devices"].add(r["device"])
        g["clauses"].append(r["clause"])
    out = []
    for g in sorted(groups.values(), key=lambda g: (-g["rows"], g["reason"])):
        out.append(
            {**g, "impls": sorted(g["impls"]), "devices": sorted(g["devices"]), "clauses": sorted(set(g["clauses"]))}
        )
    return out


def short(reason: str, width: int = 90) -> str:
    """A long reason without its parenthesised detail (the full text is in the grouped table)."""
    if len(reason) <= width:
        return reason
    cut = reason.find(" (", 20)
    return reason[:cut] if cut > 0 else reason[: width - 1] + "…"


def not_checked(rows: list[dict]) -> str | None:
    """One sentence naming the implementations none of whose rows ran here, with the reason, or None."""
    by_impl = collections.defaultdict(list)
    for r in rows:
        by_impl[r["impl"]].append(r)
    reasons = collections.defaultdict(list)  # reason -> impls entirely skipped for it
    for impl, rs in sorted(by_impl.items()):
        if impl != "-" and rs and all(r["status"] == "skip" for r in rs):
            why = "; ".join(sorted({short(x) for r in rs for x in r["skip_reasons"]})) or "(no reason given)"
            reasons[why].append(impl)
    if not reasons:
        return None
    parts = [f"{', '.join(impls)} ({why})" for why, impls in sorted(reasons.items(), key=lambda kv: kv[1])]
    return "Not checked in this run: " + "; ".join(parts) + "."


def markdown(rows: list[dict]) -> list[str]:
    groups = group_rows(rows)
    if not groups:
        return []
    lines = [
        "",
        f"## Skipped: {sum(g['rows'] for g in groups)} rows, by reason",
        "",
        "| reason | rows | impl | device | clauses |",
        "|---|---|---|---|---|",
    ]
    for g in groups:
        lines.append(
            f"| {g['reason']} | {g['rows']} | {', '.join(g['impls'])} | {', '.join(g['devices'])} | "
            f"{_ids(g['clauses'])} |"
        )
    return lines


def terminal_lines(counts: collections.Counter, sentence: str | None, limit: int = 10) -> list[str]:
    """Skipped tests by reason (most frequent first), then the not-checked sentence."""
    out = []
    if counts:
        out.append(f"skipped tests by reason ({sum(counts.values())}):")
        for reason, n in counts.most_common(limit):
            out.append(f"  {n:5d}  {reason}")
        if len(counts) > limit:
            out.append(f"  ({len(counts) - limit} more reasons in the report)")
    if sentence:
        out.append(sentence)
    return out

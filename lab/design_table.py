"""The designs' side-by-side table shared by the kernel development scripts (lab/tree_build_dev.py,
lab/draft_topk_dev.py): one row per input, one column per design, an error in a design's cell instead of its time
(a design that fails is reported, not hidden), printed as JSON lines while it runs and as a markdown table at the
end, and written to a JSON file."""

from __future__ import annotations

import json


def cell(run, *args) -> tuple[float | str, object]:
    """A design's cell and what its run returned beside the time: `run(*args)` gives (µs, anything); the cell is
    the time (2 decimals), or the error it raised (with None beside it)."""
    try:
        us, extra = run(*args)
    except Exception as e:
        return f"error: {type(e).__name__}: {str(e)[:200]}", None
    return round(us, 2), extra


def report(rows: list[dict], keys: dict[str, str], names: list[str], json_path: str | None) -> None:
    """The markdown table of `rows` ({key column: header} first, then the designs `names`), and the JSON file."""
    print("\n| " + " | ".join([*keys.values(), *names]) + " |")
    print("|" + "---|" * (len(keys) + len(names)))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in [*keys, *names]) + " |")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)

"""The record of one benchmark case, in pytest-benchmark's `extra_info` (the JSON's per-case payload).

pytest-benchmark's own `stats` hold what its timer saw: host wall time of the timed callable. For a CPU
builder that is the quantity; for a GPU case it is launch + sync from Python, so the device time lives
here, under `time`, next to the shape, bytes, FLOPs, rates, fractions of the measured ceilings, the
comparators run on the same inputs in the same run, and the speedups over them.

A case of a tree_build select variant (select_verify, select_warp, select_race and their _99k twins) also carries
`fallback`: per input family, how many requests of its reporting build (kernels_cu/tree_build_ops.py) could not
take the selection and replayed the heap instead, out of how many. The tree is exact either way, so but for this
count a selection that stopped working shows only in the time, and not always there; the regression gate treats the
rate as exact (any rise fails; harness/bench/gate.py):

    "fallback": {
      "drafter":     {"requests": 64, "checks_failed": 0, "overflowed": 0, "replayed": 0, "rate": 0.0},
      "adversarial": {"requests": 64, "checks_failed": 0, "overflowed": 64, "replayed": 64, "rate": 1.0}
    }

rate = replayed / requests, replayed = checks_failed (n_nodes -1) + overflowed (n_nodes -2). Where the launch runs
no selection at all (select_race handing the batch to lane_cached's build, no room for candidates) the entry is
{"requests": n, "rate": null, "no_selection": why}: a rate of 0 there would say nothing. The families are
harness/bench/fallbacks.py's (FAMILIES); a case without selection has no `fallback` key.
"""

from __future__ import annotations

import pathlib

SCHEMA = "kdtr-bench/1"
REQUIRED = ("schema", "op", "impl", "shape", "time", "bytes", "flops", "gbs", "tflops", "ceilings", "fraction",
            "comparators", "speedups")  # fmt: skip
TIME_KEYS = ("median_us", "p10_us", "p90_us", "rel_spread", "n", "where", "method")


def comparator(
    time: dict | None = None, *, error: str | None = None, note: str = "", check: dict | None = None
) -> dict:
    """One comparator's entry: its time summary (harness.timing.summary), or the error that stopped it
    (out of memory, not installed, not built, compile failure, a wrong result...), and the check of its output
    against the oracle at this shape where one was made (harness/bench/peers.py)."""
    if (time is None) == (error is None):
        raise ValueError("a comparator has either a time or an error")
    out = {"time": time} if time is not None else {"error": error}
    if note:
        out["note"] = note
    if check is not None:
        out["check"] = dict(check)
    return out


def fallback(requests: int, *, checks_failed: int = 0, overflowed: int = 0, no_selection: str | None = None) -> dict:
    """One input family's entry under `fallback` (see the module's documentation): the counts of a reporting build's
    launch (kernels_cu.tree_build_ops.fallbacks() returns these keywords), or why that launch selects nothing."""
    if requests <= 0:
        raise ValueError("a fallback rate needs requests")
    if no_selection is not None:
        if checks_failed or overflowed:
            raise ValueError("a launch without a selection cannot fall back")
        return {"requests": requests, "rate": None, "no_selection": no_selection}
    replayed = checks_failed + overflowed
    if min(checks_failed, overflowed) < 0 or replayed > requests:
        raise ValueError(f"{checks_failed} + {overflowed} fallbacks out of {requests} requests")
    return {"requests": requests, "checks_failed": checks_failed, "overflowed": overflowed, "replayed": replayed,
            "rate": replayed / requests}  # fmt: skip


def fallback_rates(info: dict) -> dict[str, dict]:
    """family -> entry of a case record's `fallback`, for the families with a rate (not null); {} for a case
    without selection."""
    return {k: e for k, e in (info.get("fallback") or {}).items() if e.get("rate") is not None}


def build(
    *,
    op: str,
    impl: str,
    shape: dict,
    time: dict,
    bytes_moved: int | None = None,
    flops: int | None = None,
    ceilings: dict | None = None,
    comparators: dict | None = None,
    extra: dict | None = None,
    fallback: dict | None = None,
) -> dict:
    """The case's extra_info. Rates use the median; fractions divide by the ceilings given (None where a
    ceiling or a rate is missing); speedup = comparator median / this case's median. fallback: {family:
    fallback(...)} of a select variant's case."""
    med_s = time["median_us"] * 1e-6
    gbs = bytes_moved / med_s / 1e9 if bytes_moved and med_s > 0 else None
    tflops = flops / med_s / 1e12 if flops and med_s > 0 else None
    ceilings = dict(ceilings or {})
    copy, read, bf16 = ceilings.get("copy_gbs"), ceilings.get("read_gbs"), ceilings.get("bf16_tflops")
    comparators = dict(comparators or {})
    speedups = {
        name: c["time"]["median_us"] / time["median_us"]
        for name, c in comparators.items()
        if "time" in c and time["median_us"] > 0
    }
    return {
        "schema": SCHEMA,
        "op": op,
        "impl": impl,
        "shape": dict(shape),
        "time": dict(time),
        "bytes": bytes_moved,
        "flops": flops,
        "gbs": gbs,
        "tflops": tflops,
        "ceilings": ceilings,
        "fraction": {
            "copy": gbs / copy if gbs and copy else None,
            "read": gbs / read if gbs and read else None,
            "bf16": tflops / bf16 if tflops and bf16 else None,
        },
        "comparators": comparators,
        "speedups": speedups,
        **({"extra": dict(extra)} if extra else {}),
        **({"fallback": {k: dict(v) for k, v in fallback.items()}} if fallback else {}),
    }


def put(benchmark, **kw) -> dict:
    """build() into the benchmark's extra_info; returns the record."""
    info = build(**kw)
    benchmark.extra_info.update(info)
    return info


def problems(info: dict) -> list[str]:
    """What is wrong with a case record (empty when it follows the schema)."""
    out = [f"missing key {k!r}" for k in REQUIRED if k not in info]
    if out:
        return out
    if info["schema"] != SCHEMA:
        out.append(f"schema {info['schema']!r}, expected {SCHEMA!r}")
    out += [f"time lacks {k!r}" for k in TIME_KEYS if k not in info["time"]]
    if info["time"].get("where") not in ("device", "host"):
        out.append(f"time.where is {info['time'].get('where')!r}")
    if not isinstance(info["shape"], dict) or not info["shape"]:
        out.append("shape is empty")
    for name, c in info["comparators"].items():
        if ("time" in c) == ("error" in c):
            out.append(f"comparator {name!r} needs exactly one of time / error")
    for name in info["speedups"]:
        if "time" not in info["comparators"].get(name, {}):
            out.append(f"speedup over {name!r} without its time")
    out += _fallback_problems(info.get("fallback"))
    return out


def _fallback_problems(fb) -> list[str]:
    if fb is None:
        return []
    if not isinstance(fb, dict) or not fb:
        return ["fallback is not a non-empty dict of input families"]
    out = []
    for family, e in fb.items():
        n = e.get("requests") if isinstance(e, dict) else None
        if not isinstance(n, int) or n <= 0:
            out.append(f"fallback {family!r}: requests {n!r}")
            continue
        if e.get("rate") is None:
            if not e.get("no_selection"):
                out.append(f"fallback {family!r}: no rate and no no_selection reason")
            continue
        counts = [e.get(k) for k in ("checks_failed", "overflowed", "replayed")]
        if not all(isinstance(c, int) and c >= 0 for c in counts):
            out.append(f"fallback {family!r}: counts {counts}")
        elif counts[0] + counts[1] != counts[2] or counts[2] > n or e["rate"] != counts[2] / n:
            out.append(f"fallback {family!r}: {counts[2]} replayed of {n} is not rate {e['rate']!r}")
    return out


def portable_command(args: list[str], out_file: object) -> str:
    """The pytest command line a run records, without this machine's paths: the folder of its --benchmark-json file
    (and everything under it: a --report-dir beside it) is written OUT, so a committed JSON names what anyone would
    type."""
    line = " ".join(["pytest", *args])
    if not isinstance(out_file, (str, pathlib.Path)):  # pytest-benchmark may hand over the file it opened
        out_file = getattr(out_file, "name", None)
    if isinstance(out_file, (str, pathlib.Path)):
        folder = str(pathlib.Path(out_file).absolute().parent)  # as typed: resolve() would follow links
        if folder != "/":
            line = line.replace(folder + "/", "OUT/").replace(folder, "OUT")
    return line

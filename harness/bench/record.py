"""The record of one benchmark case, in pytest-benchmark's `extra_info` (the JSON's per-case payload).

pytest-benchmark's own `stats` hold what its timer saw: host wall time of the timed callable. For a CPU
builder that is the quantity; for a GPU case it is launch + sync from Python, so the device time lives
here, under `time`, next to the shape, bytes, FLOPs, rates, fractions of the measured ceilings, the
comparators run on the same inputs in the same run, and the speedups over them.
"""

from __future__ import annotations

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
) -> dict:
    """The case's extra_info. Rates use the median; fractions divide by the ceilings given (None where a
    ceiling or a rate is missing); speedup = comparator median / this case's median."""
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
    return out

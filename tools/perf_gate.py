"""The performance regression gate (harness/bench/gate.py): device times and fallback rates of two benchmark JSON
files.

    python -m tools.perf_gate calibrate RUN_A RUN_B -o gate.json   # threshold floor from two reruns
    python -m tools.perf_gate compare BASE NEW [--calibration gate.json | --floor 0.05] [--include-host]
    python -m tools.perf_gate compare BASE NEW --fallback-only     # the select variants' fallback rates alone

compare exits 0 when no case regressed, 1 on a regression (a time over its threshold, or any fallback rate that
rose: those are exact, whatever the threshold), 2 when the files cannot be compared (another device, nothing in
common) or a case or rate is missing and --strict is given.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from harness.bench import gate


def _load(path):
    try:
        return gate.load(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"perf gate: cannot read {path}: {e}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    cal = sub.add_parser("calibrate", help="threshold floor from two runs of the same code")
    cal.add_argument("a")
    cal.add_argument("b")
    cal.add_argument("-o", "--output", help="write the calibration JSON here")
    cal.add_argument("--include-host", action="store_true", help="also CPU (host-timed) cases")
    cmp_ = sub.add_parser("compare", help="fail on a regression of NEW against BASE")
    cmp_.add_argument("base")
    cmp_.add_argument("new")
    g = cmp_.add_mutually_exclusive_group()
    g.add_argument("--calibration", help="a `calibrate` output (its floor)")
    g.add_argument("--floor", type=float, help=f"threshold floor (default {gate.DEFAULT_FLOOR})")
    cmp_.add_argument("--include-host", action="store_true", help="also gate CPU (host-timed) cases")
    cmp_.add_argument("--strict", action="store_true", help="a case or a fallback rate missing from NEW is an error")
    cmp_.add_argument(
        "--fallback-only",
        action="store_true",
        help="gate the fallback rates only (the times of a run whose point is its rates are the gate stage's)",
    )
    cmp_.add_argument("--allow-device-change", action="store_true", help="compare runs from different GPUs")
    args = ap.parse_args(argv)

    if args.cmd == "calibrate":
        a, b = _load(args.a), _load(args.b)
        try:
            c = gate.calibrate(a, b, include_host=args.include_host)
        except ValueError as e:
            print(f"perf gate: {e}", file=sys.stderr)
            return 2
        c["files"] = [pathlib.Path(args.a).name, pathlib.Path(args.b).name]
        c["device"] = gate.device_of(a)
        print(f"perf gate: calibration over {c['cases']} cases: worst rerun change {c['worst_change']:+.2%} "
              f"({c['worst_case']}) -> floor {c['floor']:.2%}")  # fmt: skip
        if args.output:
            pathlib.Path(args.output).write_text(json.dumps(c, indent=1) + "\n")
        return 0

    base, new = _load(args.base), _load(args.new)
    if gate.device_of(base) != gate.device_of(new) and not args.allow_device_change:
        print(f"perf gate: cannot compare {gate.device_of(new)} with a baseline from {gate.device_of(base)} "
              "(--allow-device-change to force)", file=sys.stderr)  # fmt: skip
        return 2
    floor = gate.DEFAULT_FLOOR
    if args.calibration:
        floor = json.loads(pathlib.Path(args.calibration).read_text())["floor"]
    elif args.floor is not None:
        floor = args.floor
    rows = None if args.fallback_only else gate.compare(base, new, floor=floor, include_host=args.include_host)
    rate_rows = gate.compare_fallbacks(base, new)
    common_rates = any(r.base is not None and r.new is not None for r in rate_rows)
    if args.fallback_only and not common_rates:
        print("perf gate: the two files share no fallback rate", file=sys.stderr)
        return 2
    if rows is not None and not any(r.change is not None for r in rows) and not common_rates:
        print("perf gate: the two files share no gated case", file=sys.stderr)
        return 2
    print(gate.render(rows, floor=floor, base_name=pathlib.Path(args.base).name, new_name=pathlib.Path(args.new).name,
                      rate_rows=rate_rows))  # fmt: skip
    if gate.failed(rows, rate_rows):
        return 1
    if args.strict and any(r.verdict == "missing" for r in [*(rows or ()), *rate_rows]):
        print("perf gate: cases or fallback rates missing from the new run (--strict)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as e:
        if isinstance(e.code, str):  # a message: print it and exit 2 (1 is reserved for a regression)
            print(e.code, file=sys.stderr)
            sys.exit(2)
        raise

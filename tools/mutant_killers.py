"""Record which test killed each mutant, from the conformance reports of mutant runs, so that the next judging of
that mutant runs that test first (harness/judging.py: KILLERS).

    python -m tools.mutant_killers REPORT.json [REPORT.json ...] [--out harness/mutant_killers.json]

REPORT.json: a `conformance.json` of a mutants run (`tools/gpu_suite.sh OUT mutants` keeps it as OUT/mutants.json;
a pytest run of meta/test_kernel_mutants.py or meta/test_mutants.py writes it into its --report-dir). The reports
are read in the order given, a later one's rows over an earlier one's; a mutant that survived or was not judged
loses its entry (its killer is unknown). Entries of mutants the reports do not mention are kept.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from harness import judging


def merge(killers: dict[str, str], report: dict) -> dict[str, str]:
    """`killers` updated by one report's mutant rows (a new dict)."""
    out = dict(killers)
    for label, row in (report.get("mutants") or {}).items():
        if row.get("killed") and row.get("by"):
            out[label] = row["by"]
        elif not row.get("killed"):
            out.pop(label, None)
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", type=pathlib.Path, help="conformance.json files of mutant runs")
    ap.add_argument("--out", type=pathlib.Path, default=judging.KILLERS, help="the killers file (%(default)s)")
    args = ap.parse_args(argv)
    killers = json.loads(args.out.read_text()) if args.out.is_file() else {}
    before = dict(killers)
    for path in args.reports:
        killers = merge(killers, json.loads(path.read_text()))
    args.out.write_text(json.dumps(killers, indent=1) + "\n")
    changed = sum(before.get(k) != v for k, v in killers.items()) + sum(k not in killers for k in before)
    print(f"{args.out}: {len(killers)} mutants with a recorded killer ({changed} changed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

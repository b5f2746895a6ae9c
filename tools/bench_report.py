"""Benchmark JSON -> docs/BENCHMARKS.md and PNG plots (one command; README "Benchmarks").

    python -m tools.bench_report perf-build.json perf-verify_h64.json ... [--out docs]

Each file is one `pytest perf --benchmark-json FILE` run (a perf stage); they are merged. The Markdown goes to
OUT/BENCHMARKS.md, the plots to OUT/benchmarks/*.png (linked from it). Needs matplotlib (`pip install
-e '.[report]'`; `make setup` installs it); --no-plots writes the Markdown alone.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from harness.bench import e2e, plots, report

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "json",
        nargs="+",
        help="pytest-benchmark JSON files (one per perf stage), and "
        "`python -m lab.tree_verify_race --json` files (the sm90a builds beside the peers)",
    )
    ap.add_argument("--out", default=str(ROOT / "docs"), help="folder for BENCHMARKS.md and benchmarks/ (docs/)")
    ap.add_argument("--no-plots", action="store_true", help="write the Markdown only")
    ap.add_argument("--gpus", type=int, default=e2e.Assumptions.gpus, help="GPUs of the modelled deployment")
    args = ap.parse_args(argv)
    run = report.load(args.json)
    if not run["cases"] and not run["races"]:
        print(f"bench_report: no kdtr benchmark cases in {', '.join(args.json)}", file=sys.stderr)
        return 2
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    assumptions = e2e.Assumptions(gpus=args.gpus)
    made = {}
    if not args.no_plots:
        made = plots.draw(run, out / "benchmarks", ceilings=report.best_ceilings(run), assumptions=assumptions)
        made = {k: f"benchmarks/{v}" for k, v in made.items()}
    command = "python -m tools.bench_report " + " ".join(pathlib.Path(p).name for p in args.json)
    text = report.render(run, command=command, plots=made, assumptions=assumptions)
    (out / "BENCHMARKS.md").write_text(text)
    print(
        f"bench_report: {out / 'BENCHMARKS.md'} ({len(run['cases'])} cases, {len(made)} plots in {out / 'benchmarks'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

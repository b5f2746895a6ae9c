"""The short table of an sm_120 certification run on an sm_90 GPU (tools/sm120_certify.sh OUT): for each build at
sm_120's budget (the *_99k twins, kernels_cu/specs.py) its conformance rows, the kernel mutants of its source, the
compute-sanitizer runs and its device times beside the variant it mirrors.

  python3 -m tools.sm120_summary OUT   # reads OUT/conformance.json, OUT/mutants{,_tb}/conformance.json,
                                       # OUT/summary.txt (sanitizer lines), OUT/perf-sm120.json
Exit status 1 when a row failed, a mutant survived or a sanitizer run did not end with rc=0.
"""

from __future__ import annotations

import json
import pathlib
import re
import statistics
import sys

from harness.bench import sm120
from kernels_cu import specs


def _json(path: pathlib.Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def conformance_rows(out: pathlib.Path) -> dict[str, dict[str, int]]:
    """{variant: {pass, fail, skip, xfail}} over the clause rows of the run's report."""
    data = _json(out / "conformance.json") or {"rows": []}
    rows: dict[str, dict[str, int]] = {}
    for r in data["rows"]:
        counts = rows.setdefault(r["variant"], {"pass": 0, "fail": 0, "skip": 0, "xfail": 0})
        counts[r["status"]] += 1
    return rows


def mutants(out: pathlib.Path) -> dict[str, bool]:
    """{mutant: killed} of the check stage's tree_verify mutants and the mutants_tb stage's."""
    found = {}
    for sub in ("mutants", "mutants_tb"):
        data = _json(out / sub / "conformance.json") or {"mutants": {}}
        found.update({name: bool(m["killed"]) for name, m in data["mutants"].items()})
    return found


def sanitizer(out: pathlib.Path) -> dict[str, str]:
    """{run name: 'rc=N'} of the sanitizer lines in OUT/summary.txt."""
    text = (out / "summary.txt").read_text() if (out / "summary.txt").is_file() else ""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(sanitizer_\S+): (rc=\d+)", text, re.M)}


def times(out: pathlib.Path) -> dict[tuple, dict[str, float]]:
    """{(op, shape...): {variant: median µs}} of OUT/perf-sm120.json."""
    data = _json(out / "perf-sm120.json") or {"benchmarks": []}
    res: dict[tuple, dict[str, float]] = {}
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        impl, _, variant = str(info.get("impl", "")).partition(":")
        if impl != "cuda" or "time" not in info:
            continue
        key = (info["op"], *sorted(info["shape"].items()))
        res.setdefault(key, {})[variant] = info["time"]["median_us"]
    return res


def main(out: pathlib.Path) -> int:
    twins = [s for s in specs.SPECS if sm120.is_twin({"variant": s.variant})]
    rows, killed, san, t = conformance_rows(out), mutants(out), sanitizer(out), times(out)
    bad = 0
    print("| build at sm_120's budget | clause rows pass / fail / skip | mutants of its source killed | "
          "sanitizer runs rc=0 | median time / its base's (shapes) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for s in twins:
        base = s.variant.removesuffix(sm120.TWIN_SUFFIX)
        r = rows.get(s.variant, {"pass": 0, "fail": 0, "skip": 0})
        mine = {n: k for n, k in killed.items() if n.startswith("k_tv_" if s.slug == "tree_verify" else "k_tb_")
                and not n.startswith("k_tv90")}  # fmt: skip
        runs = {n: rc for n, rc in san.items() if s.variant in n or (s.slug in n and sm120.TWIN_SUFFIX in n)}
        ratios = [v[s.variant] / v[base] for k, v in t.items() if k[0] == s.slug and s.variant in v and base in v]
        ratio = f"{statistics.median(ratios):.2f}x ({len(ratios)})" if ratios else "—"
        ok_runs = sum(rc == "rc=0" for rc in runs.values())
        print(f"| {s.name} | {r['pass']} / {r['fail']} / {r['skip']} | {sum(mine.values())} / {len(mine)} | "
              f"{ok_runs} / {len(runs)} | {ratio} |")  # fmt: skip
        # a failure, a survivor, a failed run, and evidence missing (no row passed, no mutant or sanitizer run)
        bad += r["fail"] + (len(mine) - sum(mine.values())) + (len(runs) - ok_runs)
        bad += (r["pass"] == 0) + (not mine) + (not runs)
    survived = sorted(n for n, k in killed.items() if not k)
    if survived:
        print(f"\nsurvived: {', '.join(survived)}")
    print(f"\n{'ok' if not bad else 'NOT CERTIFIED'}: {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(pathlib.Path(sys.argv[1])))

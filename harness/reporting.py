"""pytest plugin: the conformance report (reports/conformance.json and .md).

Rows are clause x implementation x device/arch with the worst outcome (fail > pass > xfail > not claimed >
skip) and counts. "not claimed" is an external implementation's test whose inputs lie outside what it
declares (harness/claims.py): neither a pass nor a skip that hides; each implementation's summary lists the
clauses it is certified for, fails, and does not claim. Each test's clause IDs, implementation and device
travel in `user_properties`, which pytest-xdist ships from workers to the controller, so a distributed run
gives one merged report; only the controller (or a run without xdist) writes files. Tests add extra facts the same way:
`("kernel_resources", {...})` for ptxas registers/smem/spills, `("mutants", {...})` for kill counts.
"""

from __future__ import annotations

import collections
import datetime
import json
import pathlib
import re

import pytest

import contract

from . import claims, device, impls, profiles, skip_summary, spec, verdict

ROOT = pathlib.Path(__file__).resolve().parent.parent
# "not_reached": a clause of a failed test that failed on another clause before any check of this one ran
RANK = {"failed": 5, "passed": 4, "xfailed": 3, "not_reached": 2, "not_claimed": 1, "skipped": 0}
QUICK_NOTE = (
    "Quick profile: reduced budgets (10 hypothesis examples a property, 5 for the heavy ones, 10 s fuzz runs, the "
    "long cases on GPU implementations only); the full ones: `make conformance PROFILE=ci` (harness/profiles.py)."
)
STATUS = {
    "passed": "pass",
    "failed": "fail",
    "xfailed": "xfail",
    "not_reached": "not reached",
    "not_claimed": "not claimed",
    "skipped": "skip",
}
FAILURES_KEPT = 3  # failing tests named per row


def pytest_addoption(parser):
    parser.addoption(
        "--report-dir",
        default=str(ROOT / "reports"),
        help="folder for conformance.json and conformance.md (default: reports/)",
    )


class _Collector:
    def __init__(self, config):
        self.config = config
        self.rows: dict[tuple[str, str, str], dict] = {}
        self.resources: dict[str, dict] = {}
        self.mutants: dict[str, dict] = {}
        self.served: collections.Counter = collections.Counter()  # "requested -> served (inputs)": calls
        self.fits: dict[str, dict] = {}  # KB.1.7: each compiled entry against its arch's limits
        self.arch_runs: dict[str, dict] = {}  # per arch: the variants that run there, tree_verify's tile
        self.tests = {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "not_claimed": 0}
        self.notes: list[str] = []  # failures that could not be pinned on one clause (harness bugs to fix)
        self.workers: dict[str, str | None] = {}  # xdist worker -> CUDA_VISIBLE_DEVICES it ran with
        self.skips: collections.Counter = collections.Counter()  # every skipped test's reason (spec'd or not)
        self.data: dict | None = None

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        props = dict(p for p in report.user_properties if isinstance(p, tuple) and len(p) == 2)
        for key, value in report.user_properties:
            if key == "kernel_resources":
                self.resources[f"{value['kernel']}:{value.get('variant', '-')}@{value['arch']}"] = value
            elif key == "mutants":
                self.mutants.update(value)
            elif key == "worker_gpu":
                self.workers[value[0]] = value[1]
            elif key == "served_by":
                self.served.update(value)
            elif key == "kernel_fit":
                self.fits[f"{value['kernel']}:{value['variant']}@{value['arch']}"] = value
            elif key == "arch_runs":
                self.arch_runs[value["arch"]] = value
        outcome = _outcome(report)
        if outcome is None:
            return
        reason = skip_summary.reason_of(report) if outcome == "skipped" else None
        if claims.is_not_claimed(reason):
            outcome = "not_claimed"
        elif outcome == "skipped":
            self.skips[reason or "(no reason given)"] += 1
        self.tests[outcome] += 1
        per_clause = props.get("clause_outcomes") or {}
        failure = props.get("failure")
        if failure and failure.get("note"):
            self.notes.append(f"{failure['test']}: {failure['note']}")
        for sid in dict.fromkeys([*props.get("spec_ids", ()), *per_clause]):
            mine = per_clause.get(sid, outcome) if outcome in ("failed", "passed") else outcome
            if mine == "unchecked":  # a checked_only test that never checked this clause answers nothing for it
                continue
            key = (sid, props.get("impl", "-"), props.get("device", "cpu"))
            row = self.rows.setdefault(
                key, {**dict.fromkeys(RANK, 0), "skip_reasons": [], "not_claimed_reasons": [], "failures": []}
            )
            row[mine] += 1
            if mine == "failed" and failure and len(row["failures"]) < FAILURES_KEPT:
                row["failures"].append({k: failure[k] for k in ("test", "clauses", "message", "case")})
            why = reason
            if mine == "not_reached" and failure:
                why = f"{failure['test']} failed on {', '.join(failure['clauses'])} first"
            kept = {"skipped": "skip_reasons", "not_claimed": "not_claimed_reasons", "not_reached": "skip_reasons"}
            if kept.get(mine) and why:
                why = why.removeprefix(claims.NOT_CLAIMED)
                if why not in row[kept[mine]] and len(row[kept[mine]]) < 3:
                    row[kept[mine]].append(why)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter):
        """Skips grouped by reason, and what this run could not check at all (one line)."""
        if hasattr(self.config, "workerinput"):
            return
        sentence = self.data["summary"]["not_checked"] if self.data else None
        lines = skip_summary.terminal_lines(self.skips, sentence)
        if self.tests["not_claimed"]:
            lines.append(f"not claimed (outside what an implementation declares): {self.tests['not_claimed']} tests")
        if lines:
            terminalreporter.section("skips", sep="-")
            for line in lines:
                terminalreporter.write_line(line)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: its reports reach the controller, which writes the files
        if not self.rows and not self.resources and not self.mutants:
            return
        out = pathlib.Path(self.config.getoption("--report-dir"))
        out.mkdir(parents=True, exist_ok=True)
        data = self.data = self.build()
        (out / "conformance.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        (out / "conformance.md").write_text(render_markdown(data))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            s = data["summary"]
            if tr._tw.width_of_current_line:  # the progress line ([100%]) is not ended yet at this point
                tr.write_line("")
            tr.write_line(
                f"conformance report: {out / 'conformance.md'}  clauses pass={s['pass']} fail={s['fail']} "
                f"not-claimed={s['not claimed']} skip={s['skip']} (rows: clause x impl x device)"
            )
            if data["environment"]["hypothesis_profile"] == profiles.QUICK:
                tr.write_line(QUICK_NOTE)

    def build(self) -> dict:
        p = device.probe()
        reg = spec.registry()
        rows = []
        for (sid, impl, dev), r in sorted(self.rows.items()):
            status = max((k for k in RANK if r[k]), key=RANK.get, default="skipped")
            c = reg.get(sid)
            kind, variant = impls.report_columns(impl)
            rows.append(
                {
                    "clause": sid,
                    "title": c.title if c else "?",
                    "accuracy": c.accuracy if c else "?",
                    "impl": kind,
                    "variant": variant or "-",
                    "device": dev,
                    "status": STATUS[status],
                    **{k: r[k] for k in RANK},
                    "skip_reasons": r["skip_reasons"],
                    "not_claimed_reasons": r["not_claimed_reasons"],
                    "failures": r["failures"],
                }
            )
        covered = {r["clause"] for r in rows}
        summary = {
            s: sum(1 for r in rows if r["status"] == s)
            for s in ("pass", "fail", "skip", "xfail", "not claimed", "not reached")
        }
        summary["tests"] = self.tests
        summary["clauses_without_result"] = sorted(set(reg) - covered)
        summary["not_checked"] = skip_summary.not_checked(rows)
        summary["skip_groups"] = skip_summary.group_rows(rows)
        summary["by_impl"] = by_impl(rows, self.config.getoption("--impl", default=None))
        summary["unpinned_failures"] = self.notes
        return {
            "environment": {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "gpu": p.name or None,
                "gpu_probe": p.reason,
                "compute_capability": p.arch or None,
                "driver_api": p.driver or None,
                "driver": device.driver_version_string() or None,
                "nvrtc": device.nvrtc_version(),
                "packages": device.package_versions(),
                "git_revision": device.git_revision(str(ROOT)),
                "hypothesis_profile": profiles.current(),
                "impl_selected": self.config.getoption("--impl", default=None),
                "xdist_workers": len([w for w in self.workers if w != "main"]),
                "worker_gpus": {w: g for w, g in sorted(self.workers.items())},
            },
            "summary": summary,
            "rows": rows,
            "kernel_resources": [self.resources[k] for k in sorted(self.resources)],
            "mutants": self.mutants,
            "served_by": dict(sorted(self.served.items())),
            "kernel_fit": [self.fits[k] for k in sorted(self.fits)],
            "arch_runs": [self.arch_runs[k] for k in sorted(self.arch_runs)],
        }


def _impl_key(impl: str, variant: str | None) -> str:
    return impl if variant in ("-", None) else f"{impl} {variant}"


def by_impl(rows: list[dict], selected) -> dict:
    """Per implementation (and variant): the clauses certified (pass), failed, not claimed and skipped, and
    for an external one what it declares."""
    out: dict[str, dict] = {}
    for r in rows:
        if r["impl"] == "-":  # tests of no implementation (the fixtures' freshness, say)
            continue
        key = _impl_key(r["impl"], r.get("variant", "-"))
        e = out.setdefault(key, {"pass": [], "fail": [], "not claimed": [], "skip": [], "xfail": []})
        status = "skip" if r["status"] == "not reached" else r["status"]  # no check of it ran: as good as skipped
        if r["clause"] not in e[status]:
            e[status].append(r["clause"])
    for name in dict.fromkeys(selected or ()):
        try:
            impl = impls.get(name)
        except impls.Unavailable:
            continue
        if impl.declaration is None:
            continue
        key = _impl_key(*impls.report_columns(name))
        e = out.setdefault(key, {"pass": [], "fail": [], "not claimed": [], "skip": [], "xfail": []})
        e["declares"] = {op: caps.describe() for op, caps in impl.declaration.items()}
        e["version"] = impl.version
        e["ops_not_provided"] = [op for op in contract.OPS if op not in impl.declaration]
    # a clause failing in one row and passing in another (two devices) counts as failing
    for e in out.values():
        for worse, better in (("fail", "pass"), ("fail", "not claimed"), ("pass", "not claimed"), ("pass", "skip"),
                              ("not claimed", "skip")):  # fmt: skip
            e[better] = [c for c in e[better] if c not in e[worse]]
        for k in ("pass", "fail", "not claimed", "skip", "xfail"):
            e[k] = sorted(e[k], key=spec.sort_key)
    return dict(sorted(out.items()))


def _outcome(report) -> str | None:
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.outcome == "skipped" else "failed"  # strict xpass counts as fail
        return {"passed": "passed", "failed": "failed", "skipped": "skipped"}[report.outcome]
    if report.when == "teardown" and report.outcome == "failed":
        return "failed"
    return None


def render_markdown(data: dict) -> str:
    env = data["environment"]
    lines = ["# Conformance report", "", "| | |", "|---|---|"]
    for k in (
        "date",
        "gpu",
        "compute_capability",
        "driver",
        "driver_api",
        "nvrtc",
        "git_revision",
        "hypothesis_profile",
        "impl_selected",
        "xdist_workers",
        "worker_gpus",
        "gpu_probe",
    ):
        lines.append(f"| {k} | {env.get(k)} |")
    lines.append(f"| packages | {', '.join(f'{k} {v}' for k, v in env['packages'].items())} |")
    if env.get("hypothesis_profile") == profiles.QUICK:
        lines += ["", f"**{QUICK_NOTE}**"]
    s = data["summary"]
    lines += [
        "",
        f"**Rows:** {s['pass']} pass, {s['fail']} fail, {s.get('not claimed', 0)} not claimed, {s['skip']} skip, "
        f"{s['xfail']} xfail. **Tests:** {s['tests']}.",
        "",
    ]
    lines += impl_summary_markdown(s.get("by_impl") or {})
    if s.get("not_checked"):
        lines += [f"**{s['not_checked']}**", ""]
    if s["clauses_without_result"]:
        lines += [f"Clauses with no result in this run: {', '.join(s['clauses_without_result'])}", ""]
    lines += [
        "Rows that ran (skipped rows are grouped by reason below the table):",
        "",
        "| clause | title | accuracy | impl | variant | device | status | pass/fail/skip | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rows"]:
        if r["status"] == "skip":
            continue
        note = f"{r['skipped']} test(s) skipped: {'; '.join(r['skip_reasons'])}"[:160] if r["skipped"] else ""
        if r.get("not_claimed"):
            nc = f"{r['not_claimed']} test(s) not claimed: {'; '.join(r.get('not_claimed_reasons', []))}"[:200]
            note = f"{note}; {nc}" if note else nc
        if r.get("not_reached"):
            nr = f"not reached in {r['not_reached']} failed test(s): {'; '.join(r['skip_reasons'])}"[:200]
            note = f"{note}; {nr}" if note else nr
        if r.get("failures"):
            fl = "; ".join(f"`{short_test(f['test'])}`: {first_line(f['message'])}" for f in r["failures"])
            note = f"{fl}; {note}" if note else fl
        lines.append(
            f"| {r['clause']} | {r['title']} | {r['accuracy']} | {r['impl']} | {r.get('variant', '-')} | "
            f"{r['device']} | "
            f"**{r['status']}** | {r['passed']}/{r['failed']}/{r['skipped']} | {note} |"
        )
    lines += failures_markdown(data["rows"], s.get("unpinned_failures") or [])
    lines += skip_summary.markdown(data["rows"])
    if data["kernel_resources"]:
        lines += [
            "",
            "## Kernel resources (ptxas -v)",
            "",
            "| kernel | variant | arch | registers | smem bytes | stack bytes | spill stores | spill loads |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for k in data["kernel_resources"]:
            lines.append(
                f"| {k['kernel']} | {k.get('variant', '-')} | {k['arch']} | {k['registers']} | {k['smem']} | "
                f"{k['stack']} | "
                f"{k['spill_stores']} | {k['spill_loads']} |"
            )
    if data.get("kernel_fit"):
        lines += [
            "",
            "## Kernels against their arch's limits (KB.1.7, read from the cubins)",
            "",
            "| kernel | variant | arch | registers | threads | static smem | most dynamic smem | block limit | fits |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for k in data["kernel_fit"]:
            lines.append(
                f"| {k['kernel']} | {k['variant']} | {k['arch']} | {k['registers']} | {k['threads']} | "
                f"{k['static_smem']} | {k['dynamic_smem']} | {k['block_limit']} | {'yes' if k['fits'] else '**no**'} |"
            )
    if data.get("arch_runs"):
        lines += ["", "## What each arch runs (compile-only)", ""]
        lines += [f"- **{a['arch']}**: {a['text']}" for a in data["arch_runs"]]
    if data["mutants"]:
        lines += mutants_markdown(data["mutants"])
    if data.get("served_by"):
        lines += [
            "",
            "## Which kernel spec served the calls",
            "",
            "| requested -> served (inputs) | calls |",
            "|---|---|",
        ]
        lines += [f"| {k} | {n} |" for k, n in data["served_by"].items()]
    return "\n".join(lines) + "\n"


def short_test(nodeid: str) -> str:
    """A test id without its folder (the file and the parameters are what tell tests apart)."""
    return nodeid.rsplit("/", 1)[-1]


def first_line(message: str, width: int = 140) -> str:
    """The first informative line of a failure message, for a table cell."""
    lines = [x.strip() for x in message.splitlines() if x.strip()]
    text = " / ".join(lines[:3])
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def failures_markdown(rows: list[dict], unpinned: list[str]) -> list[str]:
    """Each failing row's tests in full: the test id to rerun, the message's head and the case to paste."""
    failing = [r for r in rows if r["status"] == "fail" and r.get("failures")]
    if not failing and not unpinned:
        return []
    lines = ["", "## Failures", ""]
    for r in failing:
        lines.append(f"### {r['clause']} {r['title']} — {_impl_key(r['impl'], r.get('variant', '-'))}, {r['device']}")
        lines.append("")
        for f in r["failures"]:
            lines += [f"- `{f['test']}`", "", "  ```"]
            lines += [f"  {x}" for x in f["message"].splitlines()[:12]]
            if f.get("case"):
                lines += ["  --- case", *(f"  {x}" for x in f["case"].splitlines()[:40])]
            lines += ["  ```", ""]
    if unpinned:
        lines += ["Failures not pinned on one clause (each blamed on every clause of its test):", ""]
        lines += [f"- {n}" for n in unpinned] + [""]
    return lines


def mutants_markdown(mutants: dict) -> list[str]:
    """The report's mutant table: each mutant with the test that killed it, or why it was not killed, and how long
    its judging ran."""
    killed = sum(1 for v in mutants.values() if v["killed"])
    broken = sum(1 for v in mutants.values() if v.get("error"))
    lines = [
        "",
        f"## Mutants: {killed} / {len(mutants)} killed" + (f", {broken} not judged" if broken else ""),
        "",
        "| mutant | killed by | judged in (s) |",
        "|---|---|---|",
    ]
    for name, v in sorted(mutants.items()):
        took = f" {v['seconds']} |" if v.get("seconds") is not None else " |"  # rows of older reports have none
        if v["killed"]:
            lines.append(f"| {name} | {v['by']} |" + took)
        else:  # a run that broke judged nothing: it is neither a kill nor a survival
            verdict = f"**not judged**: {v['error']}" if v.get("error") else "**survived**"
            lines.append(f"| {name} | {verdict} |" + took)
    return lines


def impl_summary_markdown(by: dict) -> list[str]:
    """The per-implementation summary: what each implementation is certified for, fails, does not claim."""
    if not by:
        return []
    lines = [
        "## Per implementation",
        "",
        "| impl | certified (pass) | fail | not claimed | skipped | declares |",
        "|---|---|---|---|---|---|",
    ]
    for name, e in by.items():
        declares = "; ".join(f"{op}: {d}" for op, d in (e.get("declares") or {}).items()) or "—"
        if e.get("version"):
            declares = f"version {e['version']}; {declares}"
        absent = e.get("ops_not_provided") or []
        nc = ", ".join(e["not claimed"] + ([f"{'/'.join(absent)} (not provided)"] if absent else []))
        cells = [", ".join(e["pass"]) or "—", ", ".join(e["fail"]) or "—", nc or "—", ", ".join(e["skip"]) or "—"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {declares} |")
    return [*lines, ""]


def pytest_configure(config):
    config.pluginmanager.register(_Collector(config), "kdtr-conformance-report")


def pytest_runtest_setup(item):
    verdict.reset()  # the passed checks are counted per test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's verdict clause by clause (harness/verdict.py), and the failure the report names: the
    test id, the message's head, the case to paste. Computed here, where the exception is at hand; it reaches
    the report (and the xdist controller) in the report's user_properties."""
    report = yield
    if call.when != "call" or hasattr(report, "wasxfail"):
        return report
    props = dict(p for p in item.user_properties if isinstance(p, tuple) and len(p) == 2)
    ids = list(props.get("spec_ids", [i for m in item.iter_markers("spec") for i in m.args]))
    if report.passed and verdict.is_checked_only():
        report.user_properties.append(("clause_outcomes", verdict.passed_outcomes(ids, verdict.reached(), True)))
    if not report.failed or call.excinfo is None:
        return report
    exc = call.excinfo.value
    per_clause, note = verdict.outcomes(ids, exc, verdict.reached(), verdict.is_checked_only())
    failed = [c for c, o in per_clause.items() if o == "failed"]
    report.user_properties.append(("clause_outcomes", per_clause))
    culprit = _culprit(exc, set(failed))
    report.user_properties.append(
        (
            "failure",
            {
                "test": item.nodeid,
                "clauses": failed,
                "message": _message(culprit),
                "case": _case(exc, culprit),
                "note": note,
            },
        )
    )
    return report


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _culprit(exc: BaseException, failed: set[str]) -> BaseException:
    """The exception to show: the first (of a hypothesis group of distinct failures) naming a failed clause."""
    leaves = _leaves(exc)
    return next((e for e in leaves if getattr(e, verdict.ATTR, None) in failed), leaves[0])


def _message(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if not isinstance(exc, AssertionError):
        text = f"{type(exc).__name__}: {text}"
    return "\n".join(text.splitlines()[:12])[:2000]


def _case(exc: BaseException, culprit: BaseException) -> str:
    """What reproduces the failure: hypothesis's falsifying example and its @reproduce_failure (or @seed)
    line, from the exception's notes; empty for a parametrized test, whose id is its case."""
    notes = [n for e in (culprit, exc) for n in getattr(e, "__notes__", ())]
    keep = []
    for n in notes:
        if n.startswith(("Falsifying", "Failing")):  # hypothesis's wordings: example, explicit example, test case
            keep.append(n)
        for m in re.finditer(r"@(?:reproduce_failure|seed)\([^)]*\)", n):
            keep.append(m.group(0))
    return "\n".join(dict.fromkeys(keep))[:6000]

"""Skips for people (harness/skip_summary.py): one line per reason in the report, counts by reason in the
terminal, one sentence for what a run could not check."""

import collections
import types

from harness import skip_summary

DRIVER = 'GPU unavailable: no CUDA driver (DynamicLibNotFoundError: "cuda" is an NVIDIA driver library ...)'


def _row(clause, impl, status, reasons=(), device="cpu"):
    return {"clause": clause, "impl": impl, "device": device, "status": status, "skip_reasons": list(reasons),
            "passed": int(status == "pass"), "failed": 0, "skipped": int(status == "skip"), "xfailed": 0}  # fmt: skip


ROWS = [
    _row("TB.1.1", "reference", "pass"),
    _row("TB.1.1", "cuda", "skip", [DRIVER], "gpu (absent)"),
    _row("TB.1.2", "cuda", "skip", [DRIVER], "gpu (absent)"),
    _row("TB.1.2", "engine-cuda", "skip", [DRIVER], "gpu (absent)"),
    _row("TB.1.1", "engine-cpu", "skip", ["engine-cpu: not built"]),
    _row("KDTR.4.1", "cpp", "skip", ["kdtr-fuzz is not built"]),
    _row("KDTR.4.1", "python", "pass"),
    _row("KDTR.3.1", "cpp", "pass"),
]


def test_skipped_rows_group_by_reason():
    groups = skip_summary.group_rows(ROWS)
    assert [(g["reason"], g["rows"]) for g in groups] == [
        (DRIVER, 3),
        ("engine-cpu: not built", 1),
        ("kdtr-fuzz is not built", 1),
    ]
    assert groups[0]["impls"] == ["cuda", "engine-cuda"] and groups[0]["clauses"] == ["TB.1.1", "TB.1.2"]
    md = skip_summary.markdown(ROWS)
    assert md[1] == "## Skipped: 5 rows, by reason"
    assert sum(1 for line in md if DRIVER in line) == 1, "one line per reason, not one per clause"


def test_not_checked_names_whole_implementations_once():
    s = skip_summary.not_checked(ROWS)
    assert s == (
        "Not checked in this run: cuda, engine-cuda (GPU unavailable: no CUDA driver); "
        "engine-cpu (engine-cpu: not built)."
    )
    assert "cpp" not in s, "cpp ran some rows: a partial skip is not 'not checked'"
    assert skip_summary.not_checked([_row("X", "reference", "pass")]) is None


def test_terminal_lines_count_by_reason():
    counts = collections.Counter({DRIVER: 40, "b": 2})
    lines = skip_summary.terminal_lines(counts, "Not checked in this run: x (y).")
    assert lines[0] == "skipped tests by reason (42):" and lines[1].split()[0] == "40"
    assert lines[-1].startswith("Not checked")


def test_reason_of_a_skip_report():
    rep = types.SimpleNamespace(outcome="skipped", longrepr=("f.py", 3, "Skipped: no GPU"))
    assert skip_summary.reason_of(rep) == "no GPU"
    assert skip_summary.reason_of(types.SimpleNamespace(outcome="passed", longrepr=None)) is None

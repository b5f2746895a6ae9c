"""One assertion, one clause (harness/verdict.py) and the report's side of it (harness/reporting.py): a failed
check names its clause, a test's other clauses pass or are not reached, a failure naming no clause falls on every
clause of its test, and a failing row names the test, the message and the case to paste."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from harness import reporting, verdict
from harness.compare import assert_bit_exact

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _raised(fn) -> BaseException:
    try:
        fn()
    except BaseException as e:  # whatever the check raised is what is inspected
        return e
    raise AssertionError("nothing was raised")


def test_checks_name_their_clause():
    e = _raised(lambda: verdict.expect(False, "TB.2.6", "parent after child"))
    assert isinstance(e, AssertionError) and getattr(e, verdict.ATTR) == "TB.2.6" and str(e).startswith("[TB.2.6]")
    e = _raised(lambda: assert_bit_exact(np.zeros(3, np.int32), np.ones(3, np.int32), what="x", spec_id="TB.3.2"))
    assert getattr(e, verdict.ATTR) == "TB.3.2"
    e = _raised(lambda: assert_bit_exact(np.zeros(3, np.int32), np.zeros(4, np.int32), what="x", spec_id="TB.3.3"))
    assert getattr(e, verdict.ATTR) == "TB.3.3", "a shape that differs fails the clause too"

    def inner_wins():
        with verdict.clause("TA.1.1"):
            verdict.expect(False, "TA.2.1", "walk")

    assert getattr(_raised(inner_wins), verdict.ATTR) == "TA.2.1"

    def crash():
        with verdict.clause("TV.1.2"):
            raise TypeError("the implementation crashed")

    assert getattr(_raised(crash), verdict.ATTR) == "TV.1.2"


def test_a_failed_test_blames_the_failed_check_alone():
    verdict.reset()
    verdict.passed("TB.2.1")
    e = _raised(lambda: verdict.expect(False, "TB.2.2", "order"))
    out, note = verdict.outcomes(["TB.2.1", "TB.2.2", "TB.2.3"], e, verdict.reached())
    assert out == {"TB.2.1": "passed", "TB.2.2": "failed", "TB.2.3": "not_reached"} and note is None
    out, _ = verdict.outcomes(["TB.2.1", "TB.2.2", "TB.2.3"], e, verdict.reached(), checked_only_=True)
    assert out["TB.2.3"] == "unchecked"


def test_a_failure_naming_no_clause_falls_on_every_clause_and_is_noted():
    out, note = verdict.outcomes(["TB.2.1", "TB.2.2"], ValueError("crash"), set())
    assert out == {"TB.2.1": "failed", "TB.2.2": "failed"} and "naming no clause" in note
    assert verdict.outcomes(["TB.2.1"], ValueError("crash"), set()) == ({"TB.2.1": "failed"}, None)
    stray = _raised(lambda: verdict.expect(False, "DT.2.4", "lse"))
    out, note = verdict.outcomes(["DT.2.1"], stray, set())
    assert out == {"DT.2.1": "not_reached", "DT.2.4": "failed"} and "DT.2.4, not among the test's spec marks" in note


def test_hypothesis_groups_of_distinct_failures_name_each_clause():
    a = _raised(lambda: verdict.expect(False, "TB.2.2", "order"))
    b = _raised(lambda: verdict.expect(False, "TB.2.3", "set"))
    group = ExceptionGroup("two distinct failures", [a, b])
    assert verdict.failed_clauses(group) == ({"TB.2.2", "TB.2.3"}, False)
    assert verdict.failed_clauses(ExceptionGroup("mixed", [a, KeyError("x")]))[1] is True


def test_failure_record_keeps_the_case_and_the_head_of_the_message():
    e = _raised(lambda: verdict.expect(False, "TB.2.2", "request 0: node 13 pops after node 12\nsecond line"))
    e.add_note("Failing test case: test_x(\n    impl='x',\n    case=Case(op='tree_build', args={}),\n)")
    e.add_note("You can reproduce this example by temporarily adding @reproduce_failure('6.1', b'AXic') as a decorator")
    assert reporting._case(e, e).splitlines() == [
        "Failing test case: test_x(",
        "    impl='x',",
        "    case=Case(op='tree_build', args={}),",
        ")",
        "@reproduce_failure('6.1', b'AXic')",
    ]
    assert reporting._message(e).startswith("[TB.2.2] request 0: node 13")
    assert reporting._message(TypeError("bad")) == "TypeError: bad"
    assert reporting.first_line("[TB.2.2] a | b\nc") == "[TB.2.2] a \\| b / c"


PROBE = """
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from harness.verdict import expect

@pytest.mark.spec("TB.2.1", "TB.2.2", "TB.2.3")
@settings(database=None, derandomize=True, max_examples=50)
@given(n=st.integers(0, 100))
def test_probe(n):
    expect(True, "TB.2.1", "scores")
    expect(n < 50, "TB.2.2", f"order broken at {n}")
    expect(True, "TB.2.3", "set")
"""


def test_a_real_run_reports_each_clause_and_names_the_case(tmp_path):
    """A hypothesis test of three clauses whose second check fails: TB.2.2 fails, naming the test, the message
    and the shrunk case (n=50); TB.2.1 passes; TB.2.3's check was reached on the passing examples: pass."""
    probe = ROOT / "meta" / f"test_zz_verdict_probe_{os.getpid()}.py"  # not under conformance/: collected there
    probe.write_text(PROBE)
    try:
        env = {**os.environ, "HYPOTHESIS_PROFILE": "quick"}
        env.pop("PYTEST_XDIST_WORKER", None)
        subprocess.run([sys.executable, "-m", "pytest", str(probe), "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "--report-dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    finally:
        probe.unlink()
    data = json.loads((tmp_path / "conformance.json").read_text())
    status = {r["clause"]: r["status"] for r in data["rows"]}
    assert status == {"TB.2.1": "pass", "TB.2.2": "fail", "TB.2.3": "pass"}, status
    (row,) = [r for r in data["rows"] if r["clause"] == "TB.2.2"]
    (f,) = row["failures"]
    assert f["test"].endswith("::test_probe") and "order broken at 50" in f["message"]
    assert "n=50" in f["case"] and "@reproduce_failure(" in f["case"], f["case"]
    md = (tmp_path / "conformance.md").read_text()
    assert "## Failures" in md and "order broken at 50" in md


@pytest.mark.parametrize(
    "a,b,want",
    [
        (np.array([1, 2, 300]), np.array([1, 2, 3]), "300"),
        (np.array([1.0, 2.0], np.float32), np.array([1.0, 3.0], np.float32), "40000000"),
    ],
    ids=["ints-in-decimal", "floats-in-hex"],
)
def test_mismatch_window_shows_ints_in_decimal_and_float_bits_in_hex(a, b, want):
    text = str(_raised(lambda: assert_bit_exact(a, b, what="x")))
    window = text.split("flat[", 1)[1]
    assert want in window, text

"""A mutant's judging run is read as killed, survived or not judged (harness/judging.py)."""

from harness import judging, reporting


def test_a_failing_test_is_the_killer():
    out = "....F\nFAILED conformance/test_tree_build.py::test_x[impl=cuda:heap_smem] - AssertionError\n1 failed"
    row = judging.verdict(1, out)
    assert row == {"killed": True, "by": "conformance/test_tree_build.py::test_x[impl=cuda:heap_smem]", "error": None}


def test_all_passing_is_a_survival():
    row = judging.verdict(0, "....\n4 passed in 1.0s\n")
    assert row == {"killed": False, "by": None, "error": None}
    assert judging.describe("k_x", row) == "mutant k_x survived"


def test_a_collection_error_judges_nothing():
    out = "ERROR conformance/test_zz_probe.py\n!!! stopping after 1 failures !!!\n1 error in 4.29s\n"
    row = judging.verdict(1, out)
    assert not row["killed"] and row["error"] == "conformance/test_zz_probe.py"
    assert "not judged" in judging.describe("k_x", row)


def test_no_tests_or_a_crash_judges_nothing():
    assert judging.verdict(5, "no tests ran in 0.1s\n")["error"] == "pytest exited with 5"
    assert judging.verdict(-11, "")["error"] == "pytest exited with -11"


def test_the_report_tells_not_judged_from_survived():
    rows = {
        "k_a": judging.verdict(1, "FAILED conformance/test_a.py::t\n"),
        "k_b": judging.verdict(0, "1 passed\n"),
        "k_c": judging.verdict(1, "ERROR conformance/test_zz_probe.py\n"),
    }
    text = "\n".join(reporting.mutants_markdown(rows))
    assert "## Mutants: 1 / 3 killed, 1 not judged" in text
    assert "| k_a | conformance/test_a.py::t | |" in text and "| k_b | **survived** | |" in text
    assert "| k_c | **not judged**: conformance/test_zz_probe.py | |" in text


def test_the_report_gives_each_judging_its_time():
    row = {**judging.verdict(1, "FAILED conformance/test_a.py::t\n"), "seconds": 41.5}
    assert "| k_a | conformance/test_a.py::t | 41.5 |" in reporting.mutants_markdown({"k_a": row})

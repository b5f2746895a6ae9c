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


def test_the_last_killer_is_collected_first():
    """--judge-first moves the named tests to the front and keeps the others in their order; without it the order
    is left alone."""
    import types

    items = [types.SimpleNamespace(nodeid=n) for n in ("a::x", "b::y", "c::z")]
    config = lambda first: types.SimpleNamespace(getoption=lambda name: first)
    judging.pytest_collection_modifyitems(config(["c::z"]), items)
    assert [i.nodeid for i in items] == ["c::z", "a::x", "b::y"]
    judging.pytest_collection_modifyitems(config([]), items)
    assert [i.nodeid for i in items] == ["c::z", "a::x", "b::y"]


def test_every_recorded_killer_names_a_mutant_and_a_test_that_exists():
    """harness/mutant_killers.json (tools/mutant_killers.py) holds only known mutants (a kernel mutant's twin
    judging as NAME@99k), each with a test function defined in the file its node id names: a stale entry would
    only cost time (the judging then runs in its usual order), but it must not hide a renamed test."""
    import ast
    import json
    import pathlib

    from harness import kernel_mutants, mutants, step_mutants

    root = pathlib.Path(__file__).resolve().parent.parent
    killers = json.loads(judging.KILLERS.read_text())
    assert len(killers) >= 100, "the recorded killers went missing"
    known = {*kernel_mutants.MUTANTS, *mutants.MUTANTS, *step_mutants.MUTANTS}
    for label, nodeid in killers.items():
        name, _, twin = label.partition("@")
        assert name in known and twin in ("", "99k"), label
        path, _, test = nodeid.partition("::")
        source = root / path
        assert source.is_file(), (label, nodeid)
        functions = {f.name for f in ast.walk(ast.parse(source.read_text())) if isinstance(f, ast.FunctionDef)}
        assert test.split("[")[0] in functions, (label, nodeid)


def test_killers_are_merged_from_reports(tmp_path):
    """A later report's killer replaces an earlier one; a mutant that survived or was not judged loses its entry;
    mutants a report does not mention keep theirs."""
    import json

    from tools import mutant_killers

    out = tmp_path / "killers.json"
    out.write_text(json.dumps({"k_a": "t.py::old", "k_b": "t.py::b", "k_c": "t.py::c"}))
    rows = {"k_a": {"killed": True, "by": "t.py::new"}, "k_b": {"killed": False, "by": None},
            "k_d@99k": {"killed": True, "by": "t.py::d"}}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps({"mutants": rows}))
    assert mutant_killers.main([str(tmp_path / "r.json"), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == {"k_a": "t.py::new", "k_c": "t.py::c", "k_d@99k": "t.py::d"}

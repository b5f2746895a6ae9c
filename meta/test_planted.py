"""One planted bug per clause family, each failing exactly its own clauses (harness/verdict.py): an outsider's
numpy implementation of the four ops (examples/kdtree_outsider, written from docs/ADAPTERS.md alone) passes every
clause it claims, and six copies of it, each with one bug a kernel author might plant, fail the clauses that bug
breaks and no other, every failing row naming the failing test and its case. Each runs as a user runs it:
`pytest conformance --impl kdtree_outsider:NAME`, only the tests of the ops it provides, the quick profile."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTSIDER = ROOT / "examples" / "kdtree_outsider"

# planted bug -> (clauses it must fail, clauses it may fail besides). The second set holds what the bug breaks
# too, where the quick profile's draws may or may not reach it (a tie straddling the budget moves the tree's set,
# not only its order; a golden fixture holds the case), never a clause of another part of the op.
EXPECTED = {
    "TB_DEEP_TIES": ({"TB.2.2"}, {"TB.2.3", "TB.4.3"}),
    "TA_ONE_SHORT": ({"TA.2.1", "TA.2.4"}, {"TA.2.3", "TA.4.2"}),
    "DT_LSE_TOP1024": ({"DT.2.4"}, {"DT.4.3"}),
    "DT_NEG_ZERO_FIRST": ({"DT.2.2"}, {"DT.4.3"}),
    "TV_MASK_BIT31": ({"TV.2.1", "TV.2.2"}, {"TV.2.3", "TV.2.4", "TV.2.5", "TV.2.7", "TV.2.9", "TV.3.4"}),
    "DT_BF16_VIA_FP16": ({"DT.3.5", "DT.3.6"}, {"DT.2.1", "DT.2.3", "DT.2.4", "DT.3.4", "DT.4.3"}),
}


def _certify(tmp_path, name: str) -> tuple[subprocess.CompletedProcess, dict, float]:
    env = {**os.environ, "HYPOTHESIS_PROFILE": "quick"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(OUTSIDER), env.get("PYTHONPATH")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    cmd = [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:cacheprovider", "-n", "0",
           f"--impl=kdtree_outsider:{name}", "--report-dir", str(tmp_path)]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    took = time.monotonic() - start
    report = tmp_path / "conformance.json"
    assert report.is_file(), f"no report ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(report.read_text()), took


def test_the_outsiders_right_implementation_passes_every_clause_it_claims(tmp_path):
    """Written from docs/ADAPTERS.md alone (its own numpy code, CONTRACT.validate_host first): certified for every
    clause of the four ops but the project's own CUDA wrappers' paths, on the first run, boundaries included."""
    proc, data, _ = _certify(tmp_path, "RIGHT")
    by = data["summary"]["by_impl"]["outsider"]
    assert proc.returncode == 0 and by["fail"] == [], proc.stdout[-3000:]
    assert {"TB.1.1", "TB.2.2", "TV.1.1", "TV.2.1", "TA.1.1", "TA.2.1", "DT.1.1", "DT.2.4"} <= set(by["pass"])
    assert set(by["not claimed"]) == {"TB.4.4", "TB.4.5", "TA.4.3", "TA.4.4", "TA.4.5", "TV.3.6", "TV.3.7",
                                      "DT.4.4", "DT.4.5"}  # fmt: skip
    assert not {r["impl"] for r in data["rows"]} - {"outsider"}, "a harness test ran for an external implementation"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_planted_bug_fails_exactly_its_own_clauses(tmp_path, name):
    """The report blames the bug on its clauses alone, names the failing tests and their cases, and lists the ops
    the implementation does not provide as not claimed."""
    proc, data, took = _certify(tmp_path, name)
    assert proc.returncode == 1, proc.stdout[-3000:]
    (impl, by), *others = data["summary"]["by_impl"].items()
    assert not others, f"rows of other implementations: {[k for k, _ in others]}"
    required, allowed = EXPECTED[name]
    failed = set(by["fail"])
    assert required <= failed, f"{name} must fail {sorted(required - failed)} (fails {sorted(failed)})"
    assert failed <= required | allowed, f"{name} is blamed on {sorted(failed - required - allowed)} too"
    assert data["summary"]["unpinned_failures"] == [], "a failure that names no clause, or a clause not marked"
    assert len(by["ops_not_provided"]) == 3
    for row in (r for r in data["rows"] if r["status"] == "fail"):
        assert row["failures"], f"{row['clause']}: the failing row names no test"
        for f in row["failures"]:
            assert f["test"].startswith("conformance/") and f"[impl=kdtree_outsider:{name}" in f["test"], f
            assert f["message"].strip() and f["clauses"], f
            if f["case"]:  # a hypothesis test's failing example, the implementation printed by its name
                assert "(\n    impl='kdtree_outsider:" in f["case"] and "Impl(" not in f["case"], f["case"][:500]
    print(f"{name}: certified {impl} in {took:.0f} s; fails {sorted(failed)}")

"""Meta tests of the clause registry: parsing, coverage (every clause tested or planned), strictness."""

import importlib
import pathlib
import re
import subprocess
import sys
import uuid

import pytest

from harness import spec

ROOT = pathlib.Path(__file__).resolve().parent.parent
_MARK = re.compile(r"""spec\(((?:\s*(?:"[A-Z]+(?:\.\d+)+"|\*\w+\.[A-Z_]+)\s*,?)+)\)""")


def _ids_in_tests() -> set[str]:
    """The clauses the tests' spec marks name: string literals, and `*module.NAME` (a harness module's tuple of
    the clauses one of its checks may fail, e.g. *tree_results.CLAUSES)."""
    ids = set()
    for p in (ROOT / "conformance").glob("test_*.py"):
        for m in _MARK.finditer(p.read_text()):
            ids.update(re.findall(r'"([^"]+)"', m.group(1)))
            for module, name in re.findall(r"\*(\w+)\.([A-Z_]+)", m.group(1)):
                ids.update(getattr(importlib.import_module(f"harness.{module}"), name))
    return ids


@pytest.mark.parametrize("clause_id", sorted(spec.registry()))
def test_every_clause_has_a_test_or_is_planned(clause_id):
    c = spec.registry()[clause_id]
    tested = clause_id in _ids_in_tests()
    if c.status == "planned":
        assert not tested, f"{clause_id} is marked planned but has tests: drop the Status line"
    else:
        assert tested, f"{clause_id} ({c.source}) has no conformance test and is not Status: planned"


def test_parse_accuracy_classes():
    text = (
        "### TB.1.1 A\nAccuracy: exact\n### TB.1.2 B\nAccuracy: ulp(2)\n"
        "### TB.1.3 C\nAccuracy: rel(1e-3, atol=1e-6)\nStatus: planned\n"
    )
    a, b, c = spec.parse(text, "x.md")
    assert a.tolerance() == {} and b.tolerance() == {"max_ulp": 2}
    assert c.tolerance() == {"rtol": 1e-3, "atol": 1e-6} and c.status == "planned"


@pytest.mark.parametrize(
    "text,err",
    [
        ("### TB.1.1 A\nno accuracy\n", "no Accuracy"),
        ("### TB.1.1 A\nAccuracy: roughly\n", "bad Accuracy"),
        ("### TB.1.1 A\nAccuracy: exact\nStatus: someday\n", "unknown Status"),
    ],
)
def test_parse_rejects_malformed_clauses(text, err):
    with pytest.raises(spec.SpecError, match=err):
        spec.parse(text, "x.md")


@pytest.mark.parametrize(
    "body,msg",
    [
        ('import pytest\n@pytest.mark.spec("NOPE.1.1")\ndef test_x(): pass\n', "unknown spec clause 'NOPE.1.1'"),
        ("def test_x(): pass\n", "conformance test without @pytest.mark.spec"),
    ],
)
def test_collection_rejects_unknown_or_missing_clause(body, msg):
    # unique (tests run in parallel) and outside python_files (test_*.py), so that no other test's collection of
    # conformance/ picks it up while it exists: pytest collects a file named on its command line whatever its name
    probe = ROOT / "conformance" / f"meta_probe_{uuid.uuid4().hex[:12]}.py"
    probe.write_text(body)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", str(probe)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        probe.unlink()
    assert out.returncode == 4, out.stdout + out.stderr
    assert msg in out.stdout + out.stderr

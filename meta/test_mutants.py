"""Every mutant of the references and of the contracts' checks (harness/mutants.py) must be caught by the
conformance suite.

Each mutant runs its op's conformance tests plus the golden fixtures and the op's boundary cases against
the reference in a subprocess with the `ci` hypothesis profile (derandomized, so the verdict is reproducible); the first
failing test is recorded as the killer, and the report prints the kill count.
"""

import pytest

from harness import judging
from harness.mutants import MUTANTS


def test_at_least_twenty_mutants():
    assert len(MUTANTS) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_killed(name, request, tmp_path):
    op, description, _ = MUTANTS[name]
    args = [
        # the golden fixtures first: bit-exact for the reference, so they kill most mutants in seconds; then
        # the op's boundary cases (the edges of its checks: seconds), then its conformance tests (minutes)
        "conformance/test_fixtures.py",
        "conformance/test_boundaries.py",
        f"conformance/test_{op}.py",
        "-k",
        f"not test_boundary or -{op}.",
        "--impl",
        "reference",
        "-p",
        "harness.mutants",
        "--mutant",
        name,
        "-x",
        "-q",
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "--report-dir",
        str(tmp_path),
        "-o",
        "addopts=--strict-markers --import-mode=importlib --benchmark-disable",
    ]
    judging.judge(request, name, args, description, env={"PYTHONHASHSEED": "0"})

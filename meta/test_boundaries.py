"""The boundary generator (harness/boundaries.py) against the contracts it reads: every kind of value check
has an edge generator, every `fail` a contract can raise is reached by a generated case, and a check added
to a copy of a contract gets its cases without anything written for it: they pass on an implementation that
makes the check and fail on one that does not."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import traceback

import numpy as np
import pytest

import contract
from contract import InputError
from contract.checks import fail, first_bad
from contract.op import BOUND_KINDS, Bound
from harness import boundaries, impls
from harness.boundaries import step as step_cases
from reference import tree_build as ref_build

ROOT = pathlib.Path(__file__).resolve().parent.parent
# fail() calls no generated case reaches, with why
UNREACHED = {("tree_build.py", "_check_shapes"): "validate_shapes() only: the deferred (on-device) checks' guard"}


def test_every_kind_of_value_check_has_an_edge_generator():
    assert set(boundaries.EDGES) == set(BOUND_KINDS)
    for c in contract.OPS.values():
        ids = {x.id for x in boundaries.cases(c)}
        for b in c.bounds:  # each described check has a case at its edge and one past it (or says why not)
            assert any(i.startswith(f"{c.slug}.{b.name}.") for i in ids), b.name


def _fail_sites() -> dict[tuple[str, int], str]:
    """(file, line) of every fail(...) call in contract/, with the function it is in."""
    sites = {}
    for f in sorted((ROOT / "contract").glob("*.py")):
        tree = ast.parse(f.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Call) and "fail" in (
                        getattr(node.func, "id", None),
                        node.func.__dict__.get("attr"),
                    ):
                        sites[(f.name, node.lineno)] = fn.name
    return sites


def _site(e: InputError) -> tuple[str, int]:
    """Where in the contract the error was raised: the caller of fail()."""
    frames = traceback.extract_tb(e.__traceback__)
    i = max(k for k, fr in enumerate(frames) if fr.name == "fail")
    return pathlib.Path(frames[i - 1].filename).name, frames[i - 1].lineno


def test_every_fail_of_the_contracts_is_reached_by_a_generated_case():
    """A check the contracts make with no generated case past its edge would be untested at its edge: every
    fail() call in contract/ must be where some refused case is refused (validated as the reference does), or, for
    the step's own checks that are no op's validate_host(), where one of their written cases is
    (harness/boundaries/step.py)."""
    reached = set()
    for call, _ in step_cases.REFUSED.values():
        with pytest.raises(InputError) as e:
            call()
        reached.add(_site(e.value))
    for case in boundaries.all_cases():
        if case.refused_by is None:
            continue
        try:
            args = case.make()
        except boundaries.TooLarge:
            continue
        with pytest.raises(InputError) as e:
            contract.OPS[case.op].validate_host(**args)
        reached.add(_site(e.value))
    sites = _fail_sites()
    missing = [
        f"{f}:{line} in {fn}"
        for (f, line), fn in sites.items()
        if (f, line) not in reached and (f, fn) not in UNREACHED
    ]
    assert not missing, f"fail() calls no generated case reaches: {missing}"
    assert len(sites) > 30


# --- a copy of a contract with two checks added -----------------------------------------------------------
def _with_new_checks():
    """tree_build with K_in at most 512 and root tokens at least 100 (written only in the contract)."""
    c = contract.TREE_BUILD

    def check_values(a, dims):
        c.check_values(a, dims)
        roots = a["root_tokens"]
        if (roots < 100).any():
            fail("root_tokens", f"below 100 at {first_bad(roots < 100)}")

    return dataclasses.replace(
        c,
        symbols=tuple(dataclasses.replace(s, hi=512) if s.name == "K_in" else s for s in c.symbols),
        check_values=check_values,
        bounds=(*c.bounds, Bound("root_tokens.at_least_100", "root_tokens", "at_least", "TB.1.2", value=100)),
    )


def test_a_check_added_to_a_contract_gets_its_cases():
    copy = _with_new_checks()

    def tree_build(*args, **kwargs):  # an implementation that makes the copy's checks
        copy.validate_host(*args, **kwargs)
        return ref_build.tree_build(*args, **kwargs)

    checked = impls.Impl("copy", "reference", None, {"tree_build": lambda: tree_build})
    reference = impls.get("reference")
    old = {x.id: x for x in boundaries.cases(contract.TREE_BUILD)}
    new = {x.id: x for x in boundaries.cases(copy)}
    added = [x for i, x in new.items() if i not in old or (x.words, x.refused_by) != (old[i].words, old[i].refused_by)]
    assert {x.id for x in added} >= {
        "tree_build.root_tokens.at_least_100.at",
        "tree_build.root_tokens.at_least_100.past",
        "tree_build.K_in.hi_plus_1",
    }, sorted(x.id for x in added)
    for case in added + [new["tree_build.K_in.hi"]]:
        boundaries.check(checked, case)  # the implementation with the checks passes each case
        if case.refused_by is not None:  # and the reference, which lacks them, fails those past an edge
            with pytest.raises(AssertionError, match=f"{case.id}: (accepted|refused naming another)"):
                boundaries.check(reference, case)
        else:
            boundaries.check(reference, case)
    assert np.array_equal(new["tree_build.root_tokens.at_least_100.at"].make()["root_tokens"][:1], [100])

"""Boundary cases generated from the contracts: every check an op's contract makes, at its edge: the value
exactly at the limit (accepted, the result checked against the oracle) and one step past it (refused, the
error naming the argument).

Nothing here is written per check. The cases come from the contract's own description (contract/op.py):
each symbol's range, each int, real and flag argument, each array's dtypes, rank and shape (and the dtype
arrays share), the argument groups, and the value checks `check_values` makes as its `bounds` describe them
(one Bound each, of a kind in contract.op.BOUND_KINDS). A check added to a contract therefore gets its cases
without anyone writing them (meta/test_boundaries.py shows it on a copy of a contract, and that every
`fail` of the contract is reached by a generated case). What is written once per op is how to make a
valid case for given parameters (the builders: a tree, a paged cache), and once per kind of value check
how to put a case on its edge (EDGES) and how its error reads.

`cases(contract)` gives the cases of one op, `all_cases()` of every op; `check(impl, case)` runs one on an
implementation (conformance/test_boundaries.py): the engine gets op files straight, without the Python
checks, wherever a file can carry the case, so its own checks are the ones tested.
"""

from __future__ import annotations

from collections.abc import Callable

import contract
from contract.op import OpContract

from .builders import BUILDERS
from .core import RESULT_CLAUSES, Boundary, Cases, TooLarge
from .edges import EDGES
from .generic import add_generic
from .run import check, cost

__all__ = ["BUILDERS", "EDGES", "RESULT_CLAUSES", "Boundary", "TooLarge", "all_cases", "cases", "check", "cost"]


def cases(c: OpContract, build: Callable[[dict], dict] | None = None) -> list[Boundary]:
    """Every boundary case of one op's contract (its builder from BUILDERS unless given)."""
    g = Cases(c, build or BUILDERS[c.slug])
    add_generic(g)
    for b in c.bounds:
        EDGES[b.kind](g, b)
    ids = [x.id for x in g.out]
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    return g.out


def all_cases() -> list[Boundary]:
    return [x for c in contract.OPS.values() for x in cases(c)]

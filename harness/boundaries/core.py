"""The boundary cases' data (Boundary), the collector the generators add to (Cases), and the edits they make
to a valid case's arguments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import ml_dtypes
import numpy as np

from contract.op import OpContract

from .. import topk, tree_results

# Every dtype an array could arrive in (a KDTR file can carry each): each one an argument does not take is
# refused by name.
CANDIDATE_DTYPES = tuple(
    np.dtype(d)
    for d in (
        np.bool_,
        np.int8,
        np.uint8,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.float64,
        np.complex64,
    )
)
# An op file larger than this is not written for the engine (the case is skipped there with the size).
ENGINE_FILE_LIMIT = 256 << 20
# The clauses an op's accepted results are checked under (besides the check's own clause, which the case fails
# when it is refused or crashes): each result check names its own (harness/verdict.py), and a case answers only
# for the clauses it checked (a float32 case says nothing of the bf16 clauses).
RESULT_CLAUSES = {
    "tree_build": tree_results.CLAUSES,
    "tree_verify": ("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.7", "TV.2.9"),
    "tree_accept": ("TA.2.1", "TA.2.2", "TA.2.3", "TA.3.1", "TA.3.2", "TA.3.3"),
    "draft_topk": topk.ORACLE_CLAUSES,
}
# The clause of the generic checks (types, dtypes, shapes, ranges) of each op.
SHAPE_CLAUSE = {"tree_build": "TB.1.1", "tree_verify": "TV.1.1", "tree_accept": "TA.1.1", "draft_topk": "DT.1.1"}
RANGE_CLAUSE = {"tree_build": "TB.1.2", "tree_verify": "TV.1.1", "tree_accept": "TA.1.1", "draft_topk": "DT.1.1"}


class TooLarge(Exception):
    """The case cannot be made on this machine (or any): the message says how large it would be."""


@dataclasses.dataclass(frozen=True)
class Boundary:
    """One generated case: `id` is op.check.edge; `make()` returns fresh arguments by the contract's names;
    `refused_by` is the argument the error must name (None: accepted, and the result is checked), `words` a
    pattern the error must contain (the check's own wording, so that another check refusing the same
    argument does not pass for it). `in_file`: an op file can carry the arguments (the engine then reads
    them without the Python checks). `heavy_bytes`: memory beyond the usual that running it takes."""

    id: str
    op: str
    clause: str
    make: Callable[[], dict]
    refused_by: str | None = None
    words: str = ""
    in_file: bool = True
    heavy_bytes: int = 0

    def __repr__(self):
        return f"Boundary({self.id})"


class Cases:
    """Collects one op's cases; `base` is its builder's default case."""

    def __init__(self, c: OpContract, build: Callable[[dict], dict]):
        self.c, self.build, self.out = c, build, []

    def add(self, check: str, edge: str, make, *, clause: str, refused_by=None, words="", **kw) -> None:
        self.out.append(Boundary(f"{self.c.slug}.{check}.{edge}", self.c.slug, clause, make, refused_by, words, **kw))

    def accepted(self, check: str, edge: str, params: dict, clause: str, edit=None, **kw) -> None:
        def make(params=params, edit=edit):
            args = self.build(dict(params))
            return edit(args) or args if edit else args

        self.add(check, edge, make, clause=clause, **kw)

    def refused(self, check: str, edge: str, arg: str, words: str, clause: str, edit, params=None, **kw) -> None:
        """A case made from the builder's (params) case by edit(args), refused naming `arg`."""

        def make(params=params or {}, edit=edit):
            args = self.build(dict(params))
            return edit(args) or args

        self.add(check, edge, make, clause=clause, refused_by=arg, words=words, **kw)


def set_arg(name, value):
    def edit(args):
        args[name] = value
        return args

    return edit


def at_index(name, index, value):
    """Edit: args[name][index] = value, on a writeable copy."""

    def edit(args):
        a = np.array(args[name])
        a[index] = value
        args[name] = a
        return args

    return edit


def replace(name: str, fn):
    """Edit: args[name] = fn(the array given)."""

    def edit(args):
        args[name] = fn(np.asarray(args[name]))
        return args

    return edit


def cast(name, dtype):
    def edit(args):
        with np.errstate(all="ignore"):
            args[name] = np.asarray(args[name]).astype(dtype)
        return args

    return edit

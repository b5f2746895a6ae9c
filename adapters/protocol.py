"""The adapter protocol: how an implementation that lives outside this repository (a kernel package, a
public library such as FlashMLA, a user's own code) is put under test.

An `Implementation` names itself and its version, says how it takes arrays (numpy on the host, or torch
tensors on the GPU), says why it cannot run on this machine when it cannot (`available`), and gives per op
an `Op`: a callable with the contract's signature (`contract.OPS[op].signature()`: same names, order,
kinds and defaults) and the `Capabilities` it declares for that op. The harness draws the op's inputs
inside the declaration where its strategies can, and reports every test whose inputs lie outside it as
*not claimed*; a declared capability that the implementation then fails is a failure.

Example (docs/ADAPTERS.md has the whole walk-through):

    from adapters import Capabilities, Implementation, Op

    def my_tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        ...

    IMPLEMENTATION = Implementation(
        name="my-kernels", version="1.2.0", arrays="device",
        ops={"tree_verify": Op(my_tree_verify, Capabilities(dtypes=("bfloat16",), dims={"page_size": {64}},
                                                            trees="chains"))},
    )

This module imports the contract only (the harness imports it, never the other way round).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Container, Mapping

import contract

ARRAYS = ("host", "device")  # host: numpy in, numpy out; device: torch CUDA tensors in, torch tensors out
TREES = ("any", "chains")  # tree_verify: any tree mask, or only chains (query i sees tree rows 0..i)
PROMISES = ("deterministic", "batch_invariant")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def _int_args(op: str) -> set[str]:
    """The integer arguments, and the flags (a declaration takes {False} for tree_build's with_full_mask)."""
    return {a.name for a in contract.OPS[op].args if a.kind in ("int", "flag")}


def dimension_names(op: str) -> list[str]:
    """What a declaration may bound for `op`: the contract's shape symbols, its integer arguments and its flags."""
    return [s.name for s in contract.OPS[op].symbols] + sorted(_int_args(op))


def input_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes the contract lets the op's inputs take, where it allows more than one (what a declaration
    may narrow)."""
    out: list[str] = []
    for a in contract.OPS[op].args:
        if a.kind == "array" and len(a.dtypes) > 1:
            out += [d for d in a.dtypes if d not in out]
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What one op of an implementation takes. Everything left at its default is "all the contract allows".

    - `dtypes`: input dtype names among those the contract allows (tree_verify: "float32", "bfloat16");
      None = all of them.
    - `dims`: per contract symbol, integer argument or flag (`dimension_names(op)`: tree_verify's bs, Q, H,
      page_size...; tree_build's budget, with_full_mask...), a container of the values taken: `range(1, 129)`,
      `{64}`, `{False}`.
    - `trees`: tree_verify only: "any" tree mask, or "chains" (every request a chain of the same length Q,
      so query i sees the prefix and tree rows 0..i: what a causal decode kernel computes).
    - `deterministic`, `batch_invariant`: the implementation promises bit-identical reruns, and a request's
      bits that do not depend on the rest of the batch. A promise not made leaves its clauses not claimed.
    """

    dtypes: tuple[str, ...] | None = None
    dims: Mapping[str, Container[int]] = dataclasses.field(default_factory=dict)
    trees: str = "any"
    deterministic: bool = True
    batch_invariant: bool = True

    def promises(self, what: str) -> bool:
        if what not in PROMISES:
            raise ValueError(f"unknown promise {what!r} (have: {', '.join(PROMISES)})")
        return bool(getattr(self, what))

    def describe(self) -> str:
        """One line: what is declared beyond "everything the contract allows"."""
        parts = []
        if self.dtypes is not None:
            parts.append("dtypes " + "/".join(self.dtypes))
        for k, v in self.dims.items():
            parts.append(f"{k} in {show_values(v)}")
        if self.trees != "any":
            parts.append(f"trees: {self.trees} only")
        parts += [f"no {p.replace('_', '-')} promise" for p in PROMISES if not getattr(self, p)]
        return "; ".join(parts) or "everything the contract allows"

    def check(self, op: str) -> None:
        """ValueError naming what is wrong with this declaration for `op`."""
        allowed = input_dtypes(op)
        if self.dtypes is not None and not self.dtypes:
            raise ValueError(f"{op}: dtypes=() takes nothing; None takes every dtype the contract allows")
        for d in self.dtypes or ():
            if d not in allowed:
                raise ValueError(f"{op}: dtype {d!r} is not one the contract allows ({', '.join(allowed)})")
        names = dimension_names(op)
        for k, v in self.dims.items():
            if k not in names:
                raise ValueError(f"{op}: dims names {k!r}, not a symbol or integer argument ({', '.join(names)})")
            if not isinstance(v, Container) or isinstance(v, (str, bytes)):
                raise ValueError(f"{op}: dims[{k!r}] must be a container of ints (a range or a set), got {v!r}")
        if self.trees not in TREES:
            raise ValueError(f"{op}: trees {self.trees!r}, expected one of {', '.join(TREES)}")
        if self.trees != "any" and op != "tree_verify":
            raise ValueError(f"{op}: trees={self.trees!r} is a tree_verify capability")


def show_values(v) -> str:
    """A container of ints as people write it: 1..128, {16, 64}."""
    if isinstance(v, range) and v.step == 1:
        return f"{v.start}..{v.stop - 1}"
    if isinstance(v, (set, frozenset, tuple, list)):
        return "{" + ", ".join(str(x) for x in sorted(v)) + "}"
    return repr(v)


@dataclasses.dataclass(frozen=True)
class Op:
    """One op of an implementation: `fn` has the contract's signature and returns the contract's result
    type (contract.Verified for tree_verify: (out, lse), lse in natural log); `caps` is what it takes."""

    fn: Callable
    caps: Capabilities = dataclasses.field(default_factory=Capabilities)


@dataclasses.dataclass(frozen=True)
class Implementation:
    """An implementation under test from outside the repository. `available()` returns why it cannot run
    here (a missing package, no GPU), or None; it is called once, before any test."""

    name: str
    version: str
    ops: Mapping[str, Op]
    arrays: str = "host"
    available: Callable[[], str | None] = lambda: None
    description: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"implementation name {self.name!r}: letters, digits and _.+- only")
        if self.arrays not in ARRAYS:
            raise ValueError(f"{self.name}: arrays {self.arrays!r}, expected one of {', '.join(ARRAYS)}")
        if not self.ops:
            raise ValueError(f"{self.name}: no ops")
        for op, entry in self.ops.items():
            if op not in contract.OPS:
                raise ValueError(f"{self.name}: unknown op {op!r} (have: {', '.join(contract.OPS)})")
            if not isinstance(entry, Op):
                raise TypeError(f"{self.name}: ops[{op!r}] must be an adapters.Op, got {type(entry).__name__}")
            contract.OPS[op].check_signature(entry.fn)
            entry.caps.check(op)

    def caps(self, op: str) -> Capabilities:
        return self.ops[op].caps

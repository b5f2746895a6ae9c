"""The cases every contract gets from its arguments and symbols alone: array-likes, ranks, shapes, dtypes (every
ordered pair where arrays share one), symbol ranges, int/real/flag arguments at their edges, groups."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np

import contract
from contract import ArrayInfo

from .builders import shaped
from .core import CANDIDATE_DTYPES, RANGE_CLAUSE, SHAPE_CLAUSE, Cases, cast, replace, set_arg


class _FakeCudaArray:
    """Says it is a CUDA array (as numba's are) but is neither cupy nor torch: refused by name everywhere."""

    def __init__(self, a):
        self._a = a

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._a.shape, "typestr": self._a.dtype.str, "data": (0, False), "version": 3}


class _ArrayLike:
    """An object numpy can make an array of (__array__) that is no array itself."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a


# name -> (how to make the array-like from a valid array, whether it applies to that array)
ARRAY_LIKES: dict[str, tuple[Callable[[np.ndarray], Any], Callable[[np.ndarray], bool]]] = {
    "list": (lambda a: a.tolist(), lambda a: True),
    "tuple": (lambda a: tuple(a.tolist()), lambda a: True),
    "masked_array": (lambda a: np.ma.masked_array(a), lambda a: True),
    "matrix": (lambda a: a.view(np.matrix), lambda a: a.ndim == 2),
    "recarray_view": (lambda a: a.view(np.recarray), lambda a: True),
    "ArrayInfo": (lambda a: ArrayInfo(a.shape, a.dtype), lambda a: True),
    "__array__": (_ArrayLike, lambda a: True),
    "memoryview": (lambda a: memoryview(np.ascontiguousarray(a)), lambda a: a.dtype != contract.BF16),
    "foreign_cuda_array": (_FakeCudaArray, lambda a: True),
}


def _arrays(g: Cases) -> None:
    """Per array argument: array-likes, rank, dtypes (every ordered pair where arrays share one), fixed dims
    and agreement with the symbols earlier arrays bound."""
    c, base = g.c, g.build({})
    clause = SHAPE_CLAUSE.get(c.slug, "")
    bound: set[str] = set(c.derived)
    binder: dict[str, str] = {}  # dtype symbol -> the array that binds it
    for a in c.args:
        if a.kind != "array" or a.name not in base:
            continue
        arr = np.asarray(base[a.name])
        for like, (make_like, applies) in ARRAY_LIKES.items():
            if applies(arr):
                edit = replace(a.name, make_like)
                g.refused(a.name, f"array_like.{like}", a.name, "expected a|numpy", clause, edit, in_file=False)
        for edge, reshape in (("rank_minus_1", lambda x: np.array(x[..., 0])), ("rank_plus_1", lambda x: x[..., None])):
            g.refused(a.name, edge, a.name, "dims, expected", clause, replace(a.name, reshape))
        for axis, s in enumerate(a.shape):
            if isinstance(s, int) or s in bound:  # a fixed size, or one an earlier array bound
                for step in (-1, 1) if isinstance(s, int) else (1,):
                    edge = f"shape.axis{axis}_{'minus' if step < 0 else 'plus'}_1"
                    edit = replace(a.name, lambda x, ax=axis, st=step: _resized(x, ax, st))
                    g.refused(a.name, edge, a.name, "shape .*, expected", clause, edit)
        bound.update(s for s in a.shape if isinstance(s, str))
        _dtypes(g, a, binder, clause)


def _resized(x: np.ndarray, axis: int, step: int) -> np.ndarray:
    shape = list(x.shape)
    shape[axis] += step
    return np.zeros(shape, x.dtype)


def _dtypes(g: Cases, a, binder: dict, clause: str) -> None:
    allowed = [contract.BF16 if d == "bfloat16" else np.dtype(d) for d in a.dtypes]
    if a.dtype_symbol and a.dtype_symbol in binder:  # a later array of a shared dtype: every ordered pair
        first = binder[a.dtype_symbol]
        for d0 in allowed:
            for d1 in CANDIDATE_DTYPES:
                if d1 != d0:
                    g.refused(
                        a.name,
                        f"dtype.{first}_{d0}.{a.name}_{d1}",
                        a.name,
                        f"dtype {d1}, expected {d0}$",
                        clause,
                        cast(a.name, d1),
                        params={"dtype": d0},
                    )
        return
    if a.dtype_symbol:
        binder[a.dtype_symbol] = a.name
    if len(allowed) > 1:
        for d in allowed:
            g.accepted(a.name, f"dtype.{d}", {"dtype": d}, clause)
    for d in CANDIDATE_DTYPES:
        if d not in allowed:
            g.refused(a.name, f"dtype.{d}", a.name, f"dtype {d}, expected", clause, cast(a.name, d))


def _symbols(g: Cases) -> None:
    """Each symbol's range: lo and hi accepted, lo - 1 and hi + 1 refused naming the array that binds it."""
    c = g.c
    clause = RANGE_CLAUSE.get(c.slug, "")
    for s in c.symbols:
        if s.name in c.derived:
            continue
        binder = next(a.name for a in c.args if a.kind == "array" and s.name in a.shape)
        for edge, v in (("lo", s.lo), ("hi", s.hi)):
            g.accepted(s.name, edge, {s.name: v}, clause)
        # (a dimension cannot be negative: a symbol whose range starts at 0 has no case below it)
        for edge, v in (("lo_minus_1", s.lo - 1), ("hi_plus_1", s.hi + 1))[s.lo == 0 :]:
            g.add(
                s.name,
                edge,
                lambda v=v, n=s.name: shaped(c, {n: v}),
                clause=clause,
                refused_by=binder,
                words=rf"{re.escape(s.name)}={v} is outside {s.lo}\.\.{s.hi}",
            )


# the real kind (positive_float32): float32 rounds [2^-150, 2^-149) ... ties to even, so 2^-150 is 0 and the
# next double up is the smallest subnormal; FLT_MAX + half an ulp rounds to inf, the double below it to FLT_MAX
_TINY = 2.0**-150
_HUGE = float(np.finfo(np.float32).max) + 2.0**103
REAL_EDGES = {
    "smallest": (float(np.nextafter(_TINY, 1.0)), None),
    "largest": (float(np.nextafter(_HUGE, 0.0)), None),
    "int_1": (1, None),
    "rounds_to_0": (_TINY, "rounds to 0"),
    "overflows": (_HUGE, "overflows float32"),
    "zero": (0.0, "must be > 0"),
    "negative": (-1.0, "must be > 0"),
    "inf": (float("inf"), "is not finite"),
    "nan": (float("nan"), "is not finite"),
}


def _scalars(g: Cases) -> None:
    """int arguments at lo/hi (accepted) and one past (refused); real and flag arguments at their edges; the
    types none of them take (in Python calls only: an op file has no bool budget)."""
    c = g.c
    clause = RANGE_CLAUSE.get(c.slug, "")
    for a in c.args:
        if a.kind == "int":
            for edge, v in (("lo", a.lo), ("hi", a.hi)):
                g.accepted(a.name, edge, {a.name: v}, clause)
            g.accepted(
                a.name, "numpy_int64", {}, clause, edit=lambda args, n=a.name: set_arg(n, np.int64(args[n]))(args)
            )
            for edge, v in (("lo_minus_1", a.lo - 1), ("hi_plus_1", a.hi + 1)):
                g.refused(a.name, edge, a.name, rf"{v} is outside {a.lo}\.\.{a.hi}", clause, set_arg(a.name, v))
            for edge, v in (("bool", True), ("float", 2.0)):
                g.refused(a.name, edge, a.name, "expected an integer", clause, set_arg(a.name, v), in_file=False)
        elif a.kind == "real":
            for edge, (v, words) in REAL_EDGES.items():
                if words is None:
                    g.accepted(a.name, edge, {a.name: v}, clause)
                else:
                    g.refused(a.name, edge, a.name, words, clause, set_arg(a.name, v))
            for edge, v in (("bool", True), ("str", "0.1")):
                g.refused(a.name, edge, a.name, "expected a real number", clause, set_arg(a.name, v), in_file=False)
        elif a.kind == "flag":
            for edge, v in (("true", True), ("false", False), ("numpy_bool", np.True_)):
                g.accepted(a.name, edge, {a.name: bool(v)}, clause, edit=set_arg(a.name, v))
            for edge, v in (("int_1", 1), ("none", None)):
                g.refused(a.name, edge, a.name, "expected True or False", clause, set_arg(a.name, v), in_file=False)


def _groups(g: Cases) -> None:
    """Arguments given all together or not at all: none and all accepted, every part refused."""
    c = g.c
    groups: dict[str, list[str]] = {}
    for a in c.args:
        if a.group:
            groups.setdefault(a.group, []).append(a.name)
    for group, names in groups.items():
        g.accepted(group, "none", {group: False}, SHAPE_CLAUSE.get(c.slug, ""))
        for k in range(1, len(names)):
            for part in _subsets(names, k):
                g.refused(
                    group,
                    "only_" + "_".join(part),
                    names[0],
                    "needs .* together",
                    SHAPE_CLAUSE.get(c.slug, ""),
                    lambda args, drop=[n for n in names if n not in part]: _drop(args, drop),
                )


def _subsets(names, k):
    return [list(s) for s in itertools.combinations(names, k)]


def _drop(args, names):
    for n in names:
        args.pop(n, None)
    return args


def add_generic(g: Cases) -> None:
    """Every case the contract's arguments and symbols give."""
    _arrays(g)
    _symbols(g)
    _scalars(g)
    _groups(g)

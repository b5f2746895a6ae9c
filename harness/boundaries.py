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

import dataclasses
import mmap
import os
import re
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import contract
from contract import ArrayInfo, InputError, limits
from contract.op import REQUIRED, Bound, OpContract
from contract.trees import parents_from_links

from . import strategies as hh

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
# The clause each op's accepted results are checked under (besides the check's own clause).
RESULT_CLAUSES = {"tree_build": ("TB.2.1",), "tree_verify": ("TV.2.7",), "tree_accept": ("TA.2.1", "TA.3.1")}
# The clause of the generic checks (types, dtypes, shapes, ranges) of each op.
SHAPE_CLAUSE = {"tree_build": "TB.1.1", "tree_verify": "TV.1.1", "tree_accept": "TA.1.1"}
RANGE_CLAUSE = {"tree_build": "TB.1.2", "tree_verify": "TV.1.1", "tree_accept": "TA.1.1"}


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


# ------------------------------------------------------------------------------------------- builders
# Each builder makes a valid case of its op for the parameters given (symbols by name, int and flag arguments
# by name, "dtype", "prefix_lens" as a list, each argument group's name (False: left out), and a few of its
# own), choosing whatever else keeps the case valid and its oracle cheap. Unknown parameters are an error: a
# generator asking for what a builder cannot do must not get a silently different case.
def _take(p: dict, known: set[str]) -> dict:
    unknown = set(p) - known
    if unknown:
        raise TypeError(f"builder has no parameter {sorted(unknown)}")
    return p


def builder(*params: str):
    """Marks a builder with the parameters it takes (`fn.params`), and checks each call against them."""

    def wrap(fn):
        def build(p: dict) -> dict:
            _take(p, set(params))
            return fn(p)

        build.params = frozenset(params)  # type: ignore[attr-defined]
        build.__doc__, build.__name__ = fn.__doc__, fn.__name__
        return build

    return wrap


@builder("bs", "L", "K_in", "budget", "prefix_lens", "with_full_mask", "seed")
def build_tree_build(p: dict) -> dict:
    """tree_build: strictly decreasing log-prob rows (no ties), distinct even ids >= 10, roots 500 + b."""
    bs, B = p.get("bs", 2), p.get("budget", 6)
    # the brute-force oracle enumerates sum_d min(B, K_in)^d candidates: keep that small at every edge
    if "L" in p and "K_in" not in p:
        L, K = p["L"], 1 if p["L"] > 8 else 2
    elif "K_in" in p and "L" not in p:
        L, K = 1, p["K_in"]
    else:
        L, K = p.get("L", 2 if B > 84 else 3), p.get("K_in", 32 if B > 84 else 4)
    rng = np.random.default_rng(p.get("seed", 0))
    steps = rng.uniform(0.05, 1.0, (bs, L, K)).astype(np.float32)
    lp = (-(0.25 + np.cumsum(steps, axis=-1, dtype=np.float64))).astype(np.float32)
    ids = (10 + 2 * np.argsort(rng.random((bs, L, K)), axis=-1)).astype(np.int32)
    args = {
        "top_logp": lp,
        "top_ids": ids,
        "root_tokens": (500 + np.arange(bs)).astype(np.int32),
        "budget": B,
        "prefix_lens": np.asarray(p.get("prefix_lens", [5] * bs), np.int32),
    }
    if "with_full_mask" in p:
        args["with_full_mask"] = p["with_full_mask"]
    return args


def tree_parents(n: int, shape: str, cap: int | None = None) -> np.ndarray:
    """Parents of an n-node tree: "heap" (i -> (i-1)//2), "chain", "star", or "capped" (a chain down to depth
    `cap`, the other nodes children of the root; with cap 0 they are pads, parent -1)."""
    i = np.arange(n)
    if shape == "heap":
        par = (i - 1) // 2
    elif shape == "chain":
        par = i - 1
    elif shape == "star":
        par = np.zeros(n, np.int64)
    else:
        par = np.where(i <= cap, i - 1, 0 if cap else -1)
    par[0] = -1
    return par.astype(np.int32)


def paged_layout(prefix, rows: int, page_size: int, num_pages=None, max_pages=None, spare: int = 2):
    """A block table for requests with `prefix` committed rows and `rows` tree rows each: the pages holding
    tree rows are distinct across all requests (the commit's rows never alias), the pages holding prefix rows
    only share one page (allowed), and `spare` pages at the end are used by nobody. With fewer `num_pages`
    every page index is taken modulo num_pages. Entries past a request's need hold FlashMLA's dead index.
    Returns (block_table, num_pages, need per request)."""
    need = [(int(pr) + rows + page_size - 1) // page_size for pr in prefix]
    first_tree = [int(pr) // page_size for pr in prefix]
    tree_pages = sum(n - f for n, f in zip(need, first_tree, strict=True))
    n_pages = num_pages if num_pages is not None else 1 + tree_pages + spare
    width = max_pages if max_pages is not None else max(need) + 2
    bt = np.full((len(prefix), width), 2_147_480_000, np.int64)
    nxt = 1  # page 0 holds every prefix-only page
    for b, (n, f) in enumerate(zip(need, first_tree, strict=True)):
        for j in range(min(n, width)):
            if j < f:
                bt[b, j] = 0
            else:
                bt[b, j] = nxt
                nxt += 1
    used = bt[:, :] < 2_147_480_000
    bt[used] %= max(n_pages, 1)
    return bt.astype(np.int32), n_pages, need


def _cache(rng, num_pages: int, page_size: int, dtype) -> np.ndarray:
    if num_pages * page_size * 576 * 4 > 1 << 30:
        raise TooLarge(f"a cache of {num_pages} pages of {page_size} rows is over 1 GiB")
    return (rng.standard_normal((num_pages, page_size, 576)) * 0.5).astype(np.float32).astype(dtype)


@builder("bs", "Q", "H", "page_size", "num_pages", "max_pages", "prefix_lens", "dtype", "tree", "softmax_scale")
def build_tree_verify(p: dict) -> dict:
    """tree_verify: one tree shape for every request, a paged cache whose rows no request reads are
    NaN-poisoned (they must not matter), q from a seeded normal."""
    bs, Q, H = p.get("bs", 1), p.get("Q", 3), p.get("H", 2)
    prefix = list(p.get("prefix_lens", [5] * bs))
    ps = p.get("page_size", 1024 if max(prefix) > 1 << 16 else 4)  # long prefixes: few block-table entries
    if p.get("max_pages") == 1 or p.get("num_pages") == 1:  # one page holds everything a request reads
        prefix, ps = [0] * bs, p.get("page_size", max(ps, Q))
    dtype = np.dtype(p.get("dtype", np.float32))
    rng = np.random.default_rng(3)
    bt, n_pages, _ = paged_layout(prefix, Q, ps, p.get("num_pages"), p.get("max_pages"))
    kv = _cache(rng, n_pages, ps, dtype)
    used = np.zeros((n_pages, ps), bool)
    for b in range(bs):
        pos = np.arange(prefix[b] + Q)
        used[bt[b, pos // ps], pos % ps] = True
    hh.poison(kv, ~used)
    par = np.tile(tree_parents(Q, p.get("tree", "heap")), (bs, 1))
    from reference.tree_build import layouts  # the reference's layout of a parent array

    depths = np.stack([hh.depths_of(r) for r in par])
    vis = layouts(par, depths, np.full(bs, Q, np.int32), np.asarray(prefix, np.int32))[0]
    scale = p.get("softmax_scale", 0.130861)
    q = rng.standard_normal((bs, Q, H, 576)).astype(np.float32)
    if float(scale) > 1e30:  # 0 · scale stays 0: the largest scale, without logits that overflow float32
        q[:] = 0
    return {
        "q": q.astype(dtype),
        "kv_cache": kv,
        "block_table": bt,
        "prefix_lens": np.asarray(prefix, np.int32),
        "visibility": vis,
        "softmax_scale": scale,
    }


@builder("bs", "D", "max_depth", "commit", "page_size", "num_pages", "max_pages", "prefix_lens", "dtype", "tree")
def build_tree_accept(p: dict) -> dict:
    """tree_accept: each request a chain down to depth max_depth (default 3) with the other nodes on the root
    (or a "chain" or "star" tree), the targets walking the chain (request 1 leaves it at once), and the
    commit on a paged cache whose tree pages are distinct (commit=False: no commit arguments)."""
    bs = p.get("bs", 2)
    cap = p.get("max_depth", 3)
    D = p.get("D", max(5, cap + 1))
    par = tree_parents(D, p.get("tree", "capped"), min(cap, D - 1))
    real = 1 + int((par[1:] >= 0).sum())  # the nodes in the tree; the rest are pads (capped at depth 0)
    depth = int(hh.depths_of(par[:real]).max())
    max_depth = p.get("max_depth", max(3, depth))
    tokens = np.tile((100 + np.arange(D)).astype(np.int32), (bs, 1))
    target = np.full((bs, D), 3, np.int32)
    for u in range(depth):
        target[:, u] = tokens[0, u + 1]
    if bs > 1 and depth < D - 1:
        target[1, 0] = tokens[1, depth + 1]  # a root's child off the chain
    fc, ns = hh.links_of(par[:real], D)
    args = {
        "tokens": tokens,
        "first_child": np.tile(fc, (bs, 1)),
        "next_sibling": np.tile(ns, (bs, 1)),
        "target_tokens": target,
        "max_depth": max_depth,
    }
    if not p.get("commit", True):
        return args
    prefix = list(p.get("prefix_lens", [1] * bs))
    ps = p.get("page_size", 4)
    if p.get("max_pages") == 1 or p.get("num_pages") == 1:  # one page holds a request's rows
        bs_args = {k: v[:1] for k, v in args.items() if isinstance(v, np.ndarray)}
        args.update(bs_args)
        prefix, ps = [0], p.get("page_size", max(ps, D))
    bt, n_pages, _ = paged_layout(prefix, D, ps, p.get("num_pages"), p.get("max_pages"))
    rng = np.random.default_rng(11)
    args["kv_cache"] = _cache(rng, n_pages, ps, np.dtype(p.get("dtype", np.float32)))
    args["block_table"] = bt
    args["prefix_lens"] = np.asarray(prefix, np.int32)
    return args


BUILDERS: dict[str, Callable[[dict], dict]] = {
    "tree_build": build_tree_build,
    "tree_verify": build_tree_verify,
    "tree_accept": build_tree_accept,
}
# the dims of a shape-only case (arrays of zeros that fail a structural check before any value is read)
DEFAULT_DIMS = {
    "bs": 2,
    "L": 3,
    "K_in": 4,
    "Q": 3,
    "H": 2,
    "D": 5,
    "num_pages": 4,
    "page_size": 4,
    "max_pages": 3,
}


def _zeros(shape, dtype) -> np.ndarray:
    """A plain ndarray of zeros of any shape without its memory (a broadcast view: read-only, values 0)."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def shaped(c: OpContract, dims: dict) -> dict:
    """A shape-only case: every argument given (groups complete), arrays of zeros shaped by `dims` (defaults
    for the rest), ints, reals and flags at an ordinary value."""
    d = {**DEFAULT_DIMS, **dims}
    for sym, fn in c.derived.items():
        d.setdefault(sym, fn(d))
    out = {}
    for a in c.args:
        if a.kind == "array":
            shape = [d[s] if isinstance(s, str) else s for s in a.shape]
            out[a.name] = _zeros(shape, contract.BF16 if a.dtypes[0] == "bfloat16" else a.dtypes[0])
        elif a.kind == "int":
            out[a.name] = min(max(3, a.lo), a.hi)
        elif a.kind == "real":
            out[a.name] = 0.125
        elif a.default is REQUIRED:
            out[a.name] = False
    return out


def reserved_zeros(shape, dtype) -> np.ndarray:
    """A writeable C-contiguous plain ndarray of zeros of any size, backed by address space the kernel only
    pages in when touched (mmap MAP_NORESERVE): for caches larger than the machine that a check must refuse
    by their shape. TooLarge where the system refuses the mapping."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    try:
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)  # 0x4000: MAP_NORESERVE
    except OSError as e:
        raise TooLarge(f"cannot reserve {n / 2**40:.1f} TiB of address space for a shape-only array: {e}") from e
    return np.frombuffer(m, dtype).reshape(shape)


# ------------------------------------------------------------------------------------------- generation
class _Gen:
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


def _set(name, value):
    def edit(args):
        args[name] = value
        return args

    return edit


def _at(name, index, value):
    """Edit: args[name][index] = value, on a writeable copy."""

    def edit(args):
        a = np.array(args[name])
        a[index] = value
        args[name] = a
        return args

    return edit


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


def _replace(name: str, fn):
    """Edit: args[name] = fn(the array given)."""

    def edit(args):
        args[name] = fn(np.asarray(args[name]))
        return args

    return edit


def _arrays(g: _Gen) -> None:
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
                edit = _replace(a.name, make_like)
                g.refused(a.name, f"array_like.{like}", a.name, "expected a|numpy", clause, edit, in_file=False)
        for edge, reshape in (("rank_minus_1", lambda x: np.array(x[..., 0])), ("rank_plus_1", lambda x: x[..., None])):
            g.refused(a.name, edge, a.name, "dims, expected", clause, _replace(a.name, reshape))
        for axis, s in enumerate(a.shape):
            if isinstance(s, int) or s in bound:  # a fixed size, or one an earlier array bound
                for step in (-1, 1) if isinstance(s, int) else (1,):
                    edge = f"shape.axis{axis}_{'minus' if step < 0 else 'plus'}_1"
                    edit = _replace(a.name, lambda x, ax=axis, st=step: _resized(x, ax, st))
                    g.refused(a.name, edge, a.name, "shape .*, expected", clause, edit)
        bound.update(s for s in a.shape if isinstance(s, str))
        _dtypes(g, a, binder, clause)


def _resized(x: np.ndarray, axis: int, step: int) -> np.ndarray:
    shape = list(x.shape)
    shape[axis] += step
    return np.zeros(shape, x.dtype)


def _dtypes(g: _Gen, a, binder: dict, clause: str) -> None:
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
                        _cast(a.name, d1),
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
            g.refused(a.name, f"dtype.{d}", a.name, f"dtype {d}, expected", clause, _cast(a.name, d))


def _cast(name, dtype):
    def edit(args):
        with np.errstate(all="ignore"):
            args[name] = np.asarray(args[name]).astype(dtype)
        return args

    return edit


def _symbols(g: _Gen) -> None:
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


def _scalars(g: _Gen) -> None:
    """int arguments at lo/hi (accepted) and one past (refused); real and flag arguments at their edges; the
    types none of them take (in Python calls only: an op file has no bool budget)."""
    c = g.c
    clause = RANGE_CLAUSE.get(c.slug, "")
    for a in c.args:
        if a.kind == "int":
            for edge, v in (("lo", a.lo), ("hi", a.hi)):
                g.accepted(a.name, edge, {a.name: v}, clause)
            g.accepted(a.name, "numpy_int64", {}, clause, edit=lambda args, n=a.name: _set(n, np.int64(args[n]))(args))
            for edge, v in (("lo_minus_1", a.lo - 1), ("hi_plus_1", a.hi + 1)):
                g.refused(a.name, edge, a.name, rf"{v} is outside {a.lo}\.\.{a.hi}", clause, _set(a.name, v))
            for edge, v in (("bool", True), ("float", 2.0)):
                g.refused(a.name, edge, a.name, "expected an integer", clause, _set(a.name, v), in_file=False)
        elif a.kind == "real":
            for edge, (v, words) in REAL_EDGES.items():
                if words is None:
                    g.accepted(a.name, edge, {a.name: v}, clause)
                else:
                    g.refused(a.name, edge, a.name, words, clause, _set(a.name, v))
            for edge, v in (("bool", True), ("str", "0.1")):
                g.refused(a.name, edge, a.name, "expected a real number", clause, _set(a.name, v), in_file=False)
        elif a.kind == "flag":
            for edge, v in (("true", True), ("false", False), ("numpy_bool", np.True_)):
                g.accepted(a.name, edge, {a.name: bool(v)}, clause, edit=_set(a.name, v))
            for edge, v in (("int_1", 1), ("none", None)):
                g.refused(a.name, edge, a.name, "expected True or False", clause, _set(a.name, v), in_file=False)


def _groups(g: _Gen) -> None:
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
    import itertools

    return [list(s) for s in itertools.combinations(names, k)]


def _drop(args, names):
    for n in names:
        args.pop(n, None)
    return args


# ------------------------------------------------------------------------------------------- value checks
def _first(rank: int) -> tuple:
    return (0,) * rank


def _row(rank: int, k: int) -> tuple:
    """Index of element k of the first row along the last axis."""
    return (0,) * (rank - 1) + (k,)


def _rank(g: _Gen, b: Bound) -> int:
    return len(g.c.arg(b.arg).shape)


def _base_dims(g: _Gen) -> tuple[dict, dict]:
    """The builder's default case and the dims the contract binds for it (the default case must be valid)."""
    base = g.build({})
    return base, g.c.validate_host(
        **{k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in base.items()}
    ).dims


def _edge_no_nan(g: _Gen, b: Bound) -> None:
    i = _row(_rank(g, b), -1)  # the last of a row: -inf there keeps the row non-increasing
    g.accepted(b.name, "minus_inf", {}, b.clause, edit=_at(b.arg, i, -np.inf))
    g.refused(b.name, "nan", b.arg, "NaN", b.clause, _at(b.arg, i, np.nan))


def _edge_at_most(g: _Gen, b: Bound) -> None:
    base, _ = _base_dims(g)
    dt = np.asarray(base[b.arg]).dtype
    i = _first(_rank(g, b))  # the first of a row is its largest
    g.accepted(b.name, "at", {}, b.clause, edit=_at(b.arg, i, b.value))
    if np.issubdtype(dt, np.integer):
        if b.value < np.iinfo(dt).max:  # else the dtype keeps the limit: nothing past it can be passed
            g.refused(b.name, "past", b.arg, rf"> {b.value}", b.clause, _at(b.arg, i, b.value + 1))
    else:
        past = np.nextafter(dt.type(b.value), dt.type(np.inf))
        g.refused(b.name, "past", b.arg, rf"> {b.value:g}", b.clause, _at(b.arg, i, past))


def _owned(g: _Gen, b: Bound) -> bool:
    """Whether the builder derives other arguments from this one (prefix_lens: the pages): then edges go
    through the builder's parameter instead of editing the argument."""
    return b.arg in g.build.params


def _edge_at_least(g: _Gen, b: Bound) -> None:
    base, _ = _base_dims(g)
    i = _first(_rank(g, b))
    words = "negative" if b.value == 0 else rf"(below|less than|<) {b.value}"
    if _owned(g, b):
        at = np.asarray(base[b.arg]).copy()
        at[i] = b.value
        g.accepted(b.name, "at", {b.arg: at.tolist()}, b.clause)
    else:
        g.accepted(b.name, "at", {}, b.clause, edit=_at(b.arg, i, b.value))
    g.refused(b.name, "past", b.arg, words, b.clause, _at(b.arg, i, b.value - 1))


def _edge_non_increasing(g: _Gen, b: Bound) -> None:
    r = _rank(g, b)

    def tie(args):
        a = np.array(args[b.arg])
        a[_row(r, 1)] = a[_row(r, 0)]
        args[b.arg] = a

    def up(args):
        a = np.array(args[b.arg])
        a[_row(r, 1)] = np.nextafter(a[_row(r, 0)], a.dtype.type(np.inf))
        args[b.arg] = a

    g.accepted(b.name, "tie", {}, b.clause, edit=tie)
    g.refused(b.name, "one_ulp_up", b.arg, "non-increasing", b.clause, up)


def _edge_distinct(g: _Gen, b: Bound) -> None:
    r = _rank(g, b)

    def neighbour(delta):
        def edit(args):
            a = np.array(args[b.arg])
            a[_row(r, 1)] = a[_row(r, 0)] + delta
            args[b.arg] = a

        return edit

    g.accepted(b.name, "differ_by_1", {}, b.clause, edit=neighbour(1))
    g.refused(b.name, "equal", b.arg, "duplicate", b.clause, neighbour(0))


def _edge_context(g: _Gen, b: Bound) -> None:
    base, dims = _base_dims(g)
    prefix = np.asarray(base[b.arg]).tolist()
    for edge, extra in (("at", 0), ("past", 1)):
        p = {b.arg: [limits.MAX_CONTEXT - dims[b.rows] + extra] + prefix[1:]}
        if extra:
            g.refused(b.name, edge, b.arg, "exceeds the context limit", b.clause, lambda a: a, params=p)
        else:
            g.accepted(b.name, edge, p, b.clause)


def _edge_full_mask_bytes(g: _Gen, b: Bound) -> None:
    """D·(Σ prefix + bs·D) bytes: 8 requests of the largest tree, prefixes summing to the largest total that
    fits (one more row per request would not), and one row more."""
    bs, B = 8, limits.MAX_BUDGET
    D = 1 + B
    total = limits.MAX_FULL_MASK_BYTES // D - bs * D  # Σ prefix at the limit
    each = limits.MAX_CONTEXT - D
    prefix = [each] * (bs - 1) + [total - each * (bs - 1)]
    assert 0 <= prefix[-1] <= each and D * (total + 1 + bs * D) > limits.MAX_FULL_MASK_BYTES
    p = {"bs": bs, "budget": B, b.arg: True}
    g.accepted(b.name, "at", {**p, "prefix_lens": prefix}, b.clause)
    g.refused(
        b.name,
        "past",
        b.arg,
        "FULL_MASK layout would take",
        b.clause,
        lambda a: a,
        params={**p, "prefix_lens": prefix[:-1] + [prefix[-1] + 1]},
    )


def _edge_cache_rows(g: _Gen, b: Bound) -> None:
    """num_pages · page_size = MAX_CACHE_ROWS (2^31 - 1, a prime: page_size 1) cannot be held anywhere; one
    row past it (2^21 pages of 1024 rows) is refused by shape, with a cache of reserved address space."""
    rows = limits.MAX_CACHE_ROWS

    def too_large():
        raise TooLarge(f"a cache of {rows} rows takes {rows * 576 * 2 / 1e12:.1f} TB in bf16: no machine holds it")

    g.add(b.name, "at", too_large, clause=b.clause)

    def past(args):
        args[b.arg] = reserved_zeros((2**21, 1024, 576), np.asarray(args[b.arg]).dtype)
        return args

    g.refused(b.name, "past", b.arg, rf"rows exceed {rows}", b.clause, past, in_file=False)


def _needs(args, rows: int) -> list[int]:
    ps = np.asarray(args["kv_cache"]).shape[1]
    return [(int(p) + rows + ps - 1) // ps for p in np.asarray(args["prefix_lens"])]


def _edge_pages_needed(g: _Gen, b: Bound) -> None:
    _, dims = _base_dims(g)

    def width(less):
        def edit(args):
            args[b.arg] = np.array(args[b.arg][:, : max(_needs(args, dims[b.rows])) - less])

        return edit

    g.accepted(b.name, "width_at_need", {}, b.clause, edit=width(0))
    g.refused(b.name, "width_need_minus_1", b.arg, r"needs \d+ pages", b.clause, width(1))


def _edge_page_index(g: _Gen, b: Bound) -> None:
    _, dims = _base_dims(g)
    rows = dims[b.rows]

    def last_page(args):  # request 0's first page moved to the last (spare) page, its rows copied along
        kv, bt = np.array(args["kv_cache"]), np.array(args[b.arg])
        kv[-1] = kv[bt[0, 0]]
        bt[0, 0] = kv.shape[0] - 1
        args["kv_cache"], args[b.arg] = kv, bt

    def garbage_past_need(args):  # entries no request needs are never read
        bt = np.array(args[b.arg])
        for r, n in enumerate(_needs(args, rows)):
            bt[r, n:] = [np.asarray(args["kv_cache"]).shape[0], -1, 2**31 - 1][: bt.shape[1] - n] + [-7] * max(
                0, bt.shape[1] - n - 3
            )
        args[b.arg] = bt

    g.accepted(b.name, "last_page", {}, b.clause, edit=last_page)
    g.accepted(b.name, "garbage_past_need", {}, b.clause, edit=garbage_past_need)

    def entry(col, value):
        def edit(args):
            bt = np.array(args[b.arg])
            n = np.asarray(args["kv_cache"]).shape[0]
            bt[0, _needs(args, rows)[0] - 1 if col == "last" else 0] = n if value == "num_pages" else value
            args[b.arg] = bt

        return edit

    for edge, col, value in (
        ("first_entry_num_pages", "first", "num_pages"),
        ("first_entry_minus_1", "first", -1),
        ("last_needed_entry_num_pages", "last", "num_pages"),
    ):
        g.refused(b.name, edge, b.arg, "is not a page index", b.clause, entry(col, value))


def _edge_visibility(g: _Gen, b: Bound) -> None:
    _, dims = _base_dims(g)
    Q = dims["Q"]
    for tree, q in (("chain", 33), ("star", 40)):  # the deepest tree over two words, the widest
        g.accepted(b.name, f"{tree}_Q{q}", {"tree": tree, "Q": q}, b.clause)

    def bits(row, col, on):
        def edit(args):
            v = np.array(args[b.arg])
            mask = np.uint32(1 << (col % 32))
            v[0, row, col // 32] = (v[0, row, col // 32] | mask) if on else (v[0, row, col // 32] & ~mask)
            args[b.arg] = v

        return edit

    if Q % 32:
        g.refused(b.name, "bit_Q_set", b.arg, "bits beyond Q", b.clause, bits(0, Q, True))
    g.refused(b.name, "last_row_without_itself", b.arg, "does not see itself", b.clause, bits(Q - 1, Q - 1, False))
    g.refused(b.name, "row_1_without_root", b.arg, "does not see the root", b.clause, bits(1, 0, False))
    g.refused(b.name, "row_1_sees_row_2", b.arg, "sees a later row", b.clause, bits(1, 2, True))
    g.refused(
        b.name,
        "chain_row_3_without_row_1",
        b.arg,
        "not its parent's row plus itself",
        b.clause,
        bits(3, 1, False),
        params={"tree": "chain", "Q": 4},
    )


def _edge_links(g: _Gen, b: Bound) -> None:
    _, dims = _base_dims(g)
    D = dims["D"]
    for tree in ("chain", "star"):  # the last index linked as a child, as a sibling
        g.accepted(b.name, f"{tree}_to_the_last_node", {"tree": tree}, b.clause)
    cases = [
        ("root_sibling", "next_sibling", (0, 0), 1, "root of request 0 has a sibling"),
        ("first_child_to_itself", "first_child", (0, 1), 1, "must be -1 or an index"),
        ("first_child_past_the_tree", "first_child", (0, D - 1), D, "must be -1 or an index"),
        ("next_sibling_backwards", "next_sibling", (0, 2), 1, "must be -1 or an index"),
    ]
    for edge, arg, i, v, words in cases:
        g.refused(b.name, edge, arg, words, b.clause, _at(arg, i, v))

    def two_incoming(args):  # a node already linked as a sibling becomes another node's sibling too
        ns = np.array(args["next_sibling"])
        target = int(np.flatnonzero(ns[0] >= 0)[0])  # u with a sibling s = ns[u]: link s from another node
        s = int(ns[0, target])
        other = next(u for u in range(1, s) if u != target and ns[0, u] == -1)
        ns[0, other] = s
        args["next_sibling"] = ns

    g.refused(
        b.name, "node_with_two_incoming_links", "first_child", "more than one incoming link", b.clause, two_incoming
    )


def _edge_max_depth(g: _Gen, b: Bound) -> None:
    depth = 5
    g.accepted(b.name, "deepest_node_at_max_depth", {"max_depth": depth}, b.clause)
    g.refused(
        b.name,
        "deepest_node_one_deeper",
        b.arg,
        rf"depth {depth} > max_depth {depth - 1}",
        b.clause,
        _set("max_depth", depth - 1),
        params={"max_depth": depth},
    )


def _edge_writeable(g: _Gen, b: Bound) -> None:
    def read_only(args):
        a = np.array(args[b.arg])
        a.setflags(write=False)
        args[b.arg] = a

    def fortran(args):
        args[b.arg] = np.asfortranarray(args[b.arg])

    words = "writeable C-contiguous"
    g.refused(b.name, "read_only", b.arg, words, b.clause, read_only, in_file=False)
    g.refused(b.name, "fortran_order", b.arg, words, b.clause, fortran, in_file=False)


def _edge_distinct_rows(g: _Gen, b: Bound) -> None:
    """Two requests on one page: request 1's tree rows right after request 0's (accepted), one row earlier
    (refused); and one request whose two needed pages are the same page."""
    _, dims = _base_dims(g)
    D = dims[b.rows]

    def share(args):
        bt = np.array(args[b.arg])
        bt[1, 0] = bt[0, 0]
        args[b.arg] = bt

    g.accepted(
        b.name, "adjacent_requests_on_one_page", {"page_size": 2 * D, "prefix_lens": [0, D]}, b.clause, edit=share
    )
    g.refused(
        b.name,
        "requests_overlap_by_one_row",
        b.arg,
        "map to the same cache row",
        b.clause,
        share,
        params={"page_size": 2 * D, "prefix_lens": [0, D - 1]},
    )

    def alias_within(args):
        bt = np.array(args[b.arg])
        bt[0, 1] = bt[0, 0]
        args[b.arg] = bt

    g.refused(
        b.name,
        "one_request_twice_on_a_page",
        b.arg,
        "map to the same cache row",
        b.clause,
        alias_within,
        params={"page_size": 2, "prefix_lens": [0, 0]},
    )


EDGES: dict[str, Callable[[_Gen, Bound], None]] = {
    "no_nan": _edge_no_nan,
    "at_most": _edge_at_most,
    "at_least": _edge_at_least,
    "non_increasing": _edge_non_increasing,
    "distinct": _edge_distinct,
    "context": _edge_context,
    "full_mask_bytes": _edge_full_mask_bytes,
    "cache_rows": _edge_cache_rows,
    "pages_needed": _edge_pages_needed,
    "page_index": _edge_page_index,
    "visibility": _edge_visibility,
    "links": _edge_links,
    "max_depth": _edge_max_depth,
    "writeable": _edge_writeable,
    "distinct_rows": _edge_distinct_rows,
}


def cases(c: OpContract, build: Callable[[dict], dict] | None = None) -> list[Boundary]:
    """Every boundary case of one op's contract (its builder from BUILDERS unless given)."""
    g = _Gen(c, build or BUILDERS[c.slug])
    _arrays(g)
    _symbols(g)
    _scalars(g)
    _groups(g)
    for b in c.bounds:
        EDGES[b.kind](g, b)
    ids = [x.id for x in g.out]
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})
    return g.out


def all_cases() -> list[Boundary]:
    return [x for c in contract.OPS.values() for x in cases(c)]


# ------------------------------------------------------------------------------------------- running
def _available_memory() -> int:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def cost(op: str, args: dict) -> int:
    """Memory running a case takes beyond its arguments (the reference's and the oracle's work arrays)."""
    if op == "tree_verify":  # float64 keys of the longest request, a few copies
        return 12 * 576 * (int(np.max(args["prefix_lens"])) + np.shape(args["q"])[1])
    if op == "tree_build" and args.get("with_full_mask"):
        return 3 * contract.full_mask_bytes(np.asarray(args["prefix_lens"]), 1 + int(args["budget"]))
    return 0


def _file_bytes(op: str, args: dict) -> int:
    """The larger of the op file and its result file (a FULL_MASK result can be 2 GiB)."""
    given = sum(np.asarray(v).nbytes for v in args.values() if isinstance(v, np.ndarray))
    mask = cost(op, args) // 3 if op == "tree_build" else 0
    return max(given, mask)


def run_case(impl, case: Boundary, args: dict):
    """Call `impl` with the case's arguments: the engine straight through an op file wherever a file can
    carry them (its own checks, not the Python adapter's), everything else through its Python entry.
    Returns (result, the committed cache or None)."""
    from . import engine
    from .cases import Case, run

    c = contract.OPS[case.op]
    if impl.kind.startswith("engine") and case.in_file:
        size = _file_bytes(case.op, args)
        if size > ENGINE_FILE_LIMIT:
            pytest.skip(
                f"the op file or its result would hold {size / 2**30:.1f} GiB (the engine's cases stop "
                f"at {ENGINE_FILE_LIMIT >> 20} MiB)"
            )
        out = engine.run_op(case.op, c.kdtr_inputs(args), device="cuda" if impl.kind == "engine-cuda" else "cpu")
        return c.result(**{n: out[n] for n in c.output_names}), out.get("kv_cache")
    got = run(impl, Case(case.op, args))
    return got, args.get("kv_cache")


def check(impl, case: Boundary) -> None:
    """Run one boundary case on `impl`: refused naming its argument with its check's words, or accepted with
    the result the oracle gives. Skips (with the reason) what cannot run here."""
    try:
        args = case.make()
    except TooLarge as e:
        pytest.skip(str(e))
    need = 0 if case.refused_by else cost(case.op, args)
    if need > _available_memory() // 2:
        pytest.skip(
            f"needs about {need / 2**30:.1f} GiB of work memory, this machine has "
            f"{_available_memory() / 2**30:.1f} GiB available"
        )
    before = {k: (np.array(v) if isinstance(v, np.ndarray) and v.nbytes < 1 << 30 else v) for k, v in args.items()}
    if case.refused_by is not None:
        try:
            run_case(impl, case, args)
        except InputError as e:
            msg = str(e)
            assert msg.startswith(f"{case.refused_by}: "), f"[{case.clause}] {case.id}: refused naming another: {msg}"
            assert re.search(case.words, msg), f"[{case.clause}] {case.id}: not its check's error: {msg}"
            return
        raise AssertionError(f"[{case.clause}] {case.id}: accepted, must be refused naming {case.refused_by}")
    got, committed = run_case(impl, case, args)
    EXPECT[case.op](case, before, got, committed)


def _expect_tree(case: Boundary, a: dict, got, _committed) -> None:
    """Every field against the brute-force oracle (parents, depths, tokens, ranks, scores) and the layouts of
    the oracle's parents."""
    from reference import oracles
    from reference.tree_build import layouts

    from .compare import assert_bit_exact

    lp, ids, roots, B = a["top_logp"], a["top_ids"], a["root_tokens"], int(a["budget"])
    prefix = a.get("prefix_lens")
    prefix = np.zeros(len(roots), np.int32) if prefix is None else prefix
    bs, D = len(roots), 1 + B
    want = {
        "parents": np.full((bs, D), -1, np.int32),
        "depths": np.zeros((bs, D), np.int32),
        "tokens": np.repeat(roots[:, None], D, axis=1).astype(np.int32),
        "ranks": np.full((bs, D), -1, np.int32),
        "scores": np.full((bs, D), -np.inf),
        "n_nodes": np.ones(bs, np.int32),
    }
    want["scores"][:, 0] = 0.0
    for b in range(bs):
        par, dep, tok, rk, sc = oracles.brute_force_tree(lp[b], ids[b], B)
        n = len(par)
        want["n_nodes"][b] = 1 + n
        for f, v in (("parents", par), ("depths", dep), ("tokens", tok), ("ranks", rk), ("scores", sc)):
            want[f][b, 1 : 1 + n] = v
    lay = layouts(want["parents"], want["depths"], want["n_nodes"], prefix)
    want.update(zip(("visibility", "positions", "first_child", "next_sibling"), lay[:4], strict=True))
    for f in contract.Tree.FIELDS[:-1]:
        assert_bit_exact(np.asarray(getattr(got, f)), want[f], what=f, spec_id=case.clause)
    _expect_full_mask(np.asarray(got.full_mask), want["visibility"], prefix, D, bool(a.get("with_full_mask")))


def _expect_full_mask(got: np.ndarray, vis: np.ndarray, prefix: np.ndarray, D: int, asked: bool) -> None:
    """FULL_MASK (TB.3.4), request by request without building the expected layout (it can be 2 GiB): a
    [D, prefix_len + D] block of rows, every prefix column set, the tree columns the visibility's bits."""
    from contract.trees import unpack_visibility

    from .compare import assert_bit_exact

    if not asked:
        assert got.shape == (0,), f"[TB.3.4] full_mask {got.shape} without with_full_mask"
        return
    sizes = D * (prefix.astype(np.int64) + D)
    assert got.shape == (int(sizes.sum()),) and got.dtype == np.bool_, f"[TB.3.4] full_mask {got.dtype}{got.shape}"
    start = 0
    for b, n in enumerate(sizes):
        block = got[start : start + n].reshape(D, -1)
        start += int(n)
        P = int(prefix[b])
        assert block[:, :P].all(), f"[TB.3.4] request {b}: a prefix column of full_mask is not set"
        assert_bit_exact(block[:, P:], unpack_visibility(vis[b], D), what=f"full_mask[{b}]", spec_id="TB.3.4")


_ORACLE: dict[str, Any] = {}


def _oracle(key: str, compute):
    """The last case's oracle, kept for the next implementation run on the same case in this process."""
    if key not in _ORACLE:
        _ORACLE.clear()
        _ORACLE[key] = compute()
    return _ORACLE[key]


def _expect_verify(case: Boundary, a: dict, got, _committed) -> None:
    """out and lse within the dtype's clauses of the float64 oracle, and the cosine check."""
    from reference.tree_verify import tree_verify_float64

    from .compare import assert_close, assert_cosine
    from .spec import clause

    dtype = a["q"].dtype
    o64, l64 = _oracle(case.id, lambda: tree_verify_float64(**a))
    oc, lc = ("TV.2.1", "TV.2.3") if dtype == np.float32 else ("TV.2.2", "TV.2.9")
    assert got.out.dtype == dtype and got.out.shape == a["q"].shape[:3] + (limits.LATENT,)
    assert got.lse.dtype == np.float32 and got.lse.shape == a["q"].shape[:3]
    assert_close(got.out.astype(np.float64), o64, what="out", spec_id=oc, **clause(oc).tolerance())
    assert_close(got.lse.astype(np.float64), l64, what="lse", spec_id=lc, **clause(lc).tolerance())
    for b in range(a["q"].shape[0]):
        assert_cosine(got.out[b].astype(np.float64), o64[b], what=f"out[{b}]", spec_id="TV.2.7")


def _expect_accept(case: Boundary, a: dict, got, committed) -> None:
    """The walk from the parents the links give (children in index order, the first matching one), and the
    commit as the spec's sequential copy."""
    from .compare import assert_bit_exact

    tok, tgt, L = a["tokens"], a["target_tokens"], int(a["max_depth"])
    par = parents_from_links(a["first_child"], a["next_sibling"])
    bs = tok.shape[0]
    path = np.full((bs, 1 + L), -1, np.int32)
    emitted = np.full((bs, 1 + L), -1, np.int32)
    n_acc = np.zeros(bs, np.int32)
    for b in range(bs):
        u, k = 0, 0
        path[b, 0] = 0
        while True:
            kids = [v for v in range(len(par[b])) if par[b, v] == u and tok[b, v] == tgt[b, u]]
            if not kids:
                break
            u, k = kids[0], k + 1
            path[b, k], emitted[b, k - 1] = u, tok[b, u]
        n_acc[b], emitted[b, k] = k, tgt[b, u]
    assert_bit_exact(got.accept_len, n_acc, what="accept_len", spec_id="TA.2.1")
    assert_bit_exact(got.accept_path, path, what="accept_path", spec_id="TA.2.3")
    assert_bit_exact(got.emitted, emitted, what="emitted", spec_id="TA.2.3")
    assert_bit_exact(got.bonus, tgt[np.arange(bs), path[np.arange(bs), n_acc]], what="bonus", spec_id="TA.2.3")
    pre = a.get("prefix_lens")
    assert_bit_exact(
        got.new_lens, ((0 if pre is None else pre) + 1 + n_acc).astype(np.int32), what="new_lens", spec_id="TA.3.3"
    )
    if pre is None:
        return
    want, bt = a["kv_cache"].copy(), a["block_table"]
    ps = want.shape[1]
    for b in range(bs):
        for j in range(1, int(n_acc[b]) + 1):  # sequential, increasing j, straight from the spec
            s, d = int(pre[b]) + int(path[b, j]), int(pre[b]) + j
            want[bt[b, d // ps], d % ps] = want[bt[b, s // ps], s % ps]
    assert_bit_exact(np.asarray(committed), want, what="kv_cache", spec_id="TA.3.1")


EXPECT = {"tree_build": _expect_tree, "tree_verify": _expect_verify, "tree_accept": _expect_accept}

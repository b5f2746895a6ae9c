"""One op's contract as data: its arguments (names, kinds, dtypes, shape symbols), the symbols' limits,
its outputs and result type, and the KDTR tensor names of both. `OpContract.validate()` runs the generic
structural checks in argument order, then the op's own value checks.

The structural pass binds shape symbols: the first array that names a symbol fixes its value (checked
against the symbol's range, naming that array), later arrays must agree ("shape (2, 2, 4), expected
(2, 3, 4)"). A dtype symbol works the same way (q and kv_cache share one dtype).
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np

from . import checks as c

REQUIRED = inspect.Parameter.empty


@dataclasses.dataclass(frozen=True)
class Symbol:
    """A named dimension with its range (inclusive)."""

    name: str
    lo: int
    hi: int
    doc: str


@dataclasses.dataclass(frozen=True)
class Arg:
    """One argument. kind: 'array' | 'int' | 'real' | 'flag'. `reads_values`: validate() reads the
    array's values (a device caller passes a host copy); otherwise only its shape and dtype (an ArrayInfo
    will do). `group`: arguments that must be given all together or not at all."""

    name: str
    kind: str
    doc: str
    dtypes: tuple[str, ...] = ()
    shape: tuple[str | int, ...] = ()
    dtype_symbol: str | None = None
    default: Any = REQUIRED
    keyword_only: bool = False
    reads_values: bool = False
    group: str | None = None
    lo: int | None = None  # for 'int'
    hi: int | None = None


# The kinds of value check an op's `check_values` makes, as its `bounds` describe them: for each kind the
# boundary generator (harness/boundaries.py) knows how to put a valid case exactly on the edge and one step
# past it. A new kind needs a generator there; a new check of a known kind needs one Bound here.
BOUND_KINDS = {
    "no_nan": "no element is NaN (-inf is allowed)",
    "no_plus_inf": "no element is +inf (the dtype's largest finite value and -inf are allowed)",
    "at_most_dim": "the int argument is at most the shape symbol `dim` bound by the arrays (K <= V)",
    "at_most": "every element <= value (a value the dtype cannot exceed is a limit the dtype keeps)",
    "at_least": "every element >= value",
    "non_increasing": "every row along the last axis is non-increasing (ties allowed)",
    "distinct": "the elements of every row along the last axis are distinct",
    "context": "prefix_len + rows <= limits.MAX_CONTEXT for every request",
    "full_mask_bytes": "the FULL_MASK layout D·(prefix_len + D) over all requests fits limits.MAX_FULL_MASK_BYTES",
    "cache_rows": "num_pages · page_size <= limits.MAX_CACHE_ROWS",
    "pages_needed": "the block table holds every page that prefix_len + rows positions need",
    "page_index": "every block-table entry a request needs is a page index of the cache (others are not read)",
    "visibility": "the mask is a tree's ancestor-or-self closure, parents before children, no bit beyond Q",
    "links": "first_child/next_sibling link forward inside the tree, one incoming link per node, no root sibling",
    "max_depth": "no node is deeper than max_depth",
    "writeable": "a writeable C-contiguous array (written in place)",
    "distinct_rows": "the tree rows of all requests are distinct physical cache rows",
}


@dataclasses.dataclass(frozen=True)
class Bound:
    """One value check of `check_values`, described so that its edge can be generated: `name` (unique within
    the op; the generated cases are named after it), `arg` (the argument its error names), `kind` (one of
    BOUND_KINDS), `clause` (the spec clause that states it), `value` (the bound of at_least / at_most),
    `rows` (the dimension whose rows follow each prefix, for context, pages_needed, page_index and
    distinct_rows) and `dim` (the symbol an at_most_dim argument must not exceed). Symbols' ranges, int
    arguments' ranges, dtypes, shapes and groups need no Bound: the generator reads them from the arguments
    and symbols."""

    name: str
    arg: str
    kind: str
    clause: str
    value: float | int | None = None
    rows: str | None = None
    dim: str | None = None


@dataclasses.dataclass(frozen=True)
class Output:
    name: str
    dtype: str  # a dtype name, or "T" for the dtype symbol's value
    shape: tuple[str | int, ...]
    doc: str


@dataclasses.dataclass
class Checked:
    """What validate() returns: the arguments with defaults applied, and the bound symbols."""

    args: dict[str, Any]
    dims: dict[str, Any]

    def __getattr__(self, name):  # dims read as attributes: checked.bs, checked.B
        try:
            return self.__dict__["dims"][name]
        except KeyError:
            raise AttributeError(name) from None


@dataclasses.dataclass(frozen=True)
class OpContract:
    slug: str
    summary: str
    args: tuple[Arg, ...]
    symbols: tuple[Symbol, ...]
    outputs: tuple[Output, ...]
    result: type
    # the op's own checks after the structural pass: (args, dims) -> None, may add derived dims
    check_values: Callable[[dict, dict], None]
    # the op's own default filling, before any check: (args) -> None (e.g. prefix_lens = zeros(bs))
    fill_defaults: Callable[[dict], None] = lambda args: None
    # symbols computed from others (visibility words W from Q), bound when an array first needs them
    derived: dict[str, Callable[[dict], int]] = dataclasses.field(default_factory=dict)
    # arguments the op writes in place; a KDTR op file carries them among its outputs too
    in_place: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()  # what is refused, for the docstring
    # the checks of check_values that need no array values, and the dims it derives: (args, dims) -> None;
    # set by ops whose CUDA wrapper offers deferred (on-device) value checks (validate_shapes)
    check_shapes: Callable[[dict, dict], None] | None = None
    # check_values' checks, in its order, described for the boundary generator (Bound)
    bounds: tuple[Bound, ...] = ()

    def __post_init__(self):
        names = [b.name for b in self.bounds]
        for b in self.bounds:
            if b.kind not in BOUND_KINDS:
                raise ValueError(f"{self.slug}: bound {b.name} has an unknown kind {b.kind!r}")
            if b.arg not in self.arg_names:
                raise ValueError(f"{self.slug}: bound {b.name} names no argument ({b.arg!r})")
        if len(set(names)) != len(names):
            raise ValueError(f"{self.slug}: bound names repeat: {names}")

    # ------------------------------------------------------------------ signature
    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)

    def signature(self) -> inspect.Signature:
        params = []
        for a in self.args:
            kind = inspect.Parameter.KEYWORD_ONLY if a.keyword_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
            params.append(inspect.Parameter(a.name, kind, default=a.default))
        return inspect.Signature(params)

    def bind(self, *args, **kwargs) -> dict[str, Any]:
        """The call's arguments by name, defaults applied (TypeError for a wrong call, as Python gives)."""
        b = self.signature().bind(*args, **kwargs)
        b.apply_defaults()
        return dict(b.arguments)

    def check_signature(self, fn) -> None:
        """TypeError unless fn's parameters are the contract's (names, order, kinds, defaults)."""
        got = inspect.signature(fn)
        want = self.signature()
        if [(p.name, p.kind, p.default) for p in got.parameters.values()] != [
            (p.name, p.kind, p.default) for p in want.parameters.values()
        ]:
            name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
            raise TypeError(f"{name}{got} does not match the {self.slug} contract {want}")

    def implements(self, fn):
        """Decorator for an implementation of this op: its parameters must be the contract's (names, order,
        kinds, defaults), and its docstring gets the contract appended (so help() shows shapes and limits)."""
        self.check_signature(fn)
        fn.__doc__ = (inspect.cleandoc(fn.__doc__ or "") + "\n\n" + self.doc()).strip()
        fn.contract = self
        return fn

    # ------------------------------------------------------------------ validation
    def validate(self, *args, **kwargs) -> Checked:
        """Every input check of the op, in argument order; raises InputError naming the argument. An array
        whose values are not read may be given as a contract.ArrayInfo (a device caller's cache)."""
        return self._validate(self.bind(*args, **kwargs), host=False)

    def validate_host(self, *args, **kwargs) -> Checked:
        """validate() for an implementation that reads every array on the host (the reference, the engine):
        each array argument must be a plain numpy array, an ArrayInfo is refused by name like any other
        non-array."""
        return self._validate(self.bind(*args, **kwargs), host=True)

    def _validate(self, named: dict, host: bool) -> Checked:
        self.fill_defaults(named)
        dims: dict[str, Any] = {}
        self._check_groups(named)
        self._check_args(named, dims, values=True, host=host)
        self.check_values(named, dims)
        return Checked(named, dims)

    def validate_shapes(self, *args, **kwargs) -> Checked:
        """The checks that read no array values (dtypes, ranks, shapes, limits, scalars), for a caller that
        checks the values on the device and calls validate() only when that check fails (the arrays may be
        ArrayInfo); raises InputError naming the argument."""
        if self.check_shapes is None:
            raise TypeError(f"{self.slug} has no shape-only validation")
        named = self.bind(*args, **kwargs)
        dims: dict[str, Any] = {}
        self._check_groups(named)
        self._check_args(named, dims, values=False)
        self.check_shapes(named, dims)
        return Checked(named, dims)

    def _check_groups(self, named: dict) -> None:
        """Arguments of one group (tree_accept's commit) come all together or not at all."""
        groups: dict[str, list[str]] = {}
        for a in self.args:
            if a.group:
                groups.setdefault(a.group, []).append(a.name)
        for names in groups.values():
            given = [n for n in names if named[n] is not None]
            if given and len(given) != len(names):
                missing = [n for n in names if named[n] is None]
                c.fail(names[0], f"needs {', '.join(names)} together ({', '.join(missing)} missing)")

    def _check_args(self, named: dict, dims: dict, values: bool, host: bool = False) -> None:
        """The structural pass over every argument, in argument order (arrays' values only when `values`;
        ArrayInfo for arrays whose values are not read, unless `host`)."""
        for a in self.args:
            v = named[a.name]
            if v is None and a.default is None:
                continue
            if a.kind == "array":
                named[a.name] = self._check_array(a, v, dims, values, host)
            elif a.kind == "int":
                assert a.lo is not None and a.hi is not None, f"{self.slug}.{a.name}: an int argument needs lo and hi"
                named[a.name] = c.integer(a.name, v, a.lo, a.hi)
            elif a.kind == "real":
                named[a.name] = c.positive_float32(a.name, v)
            elif a.kind == "flag":
                named[a.name] = c.flag(a.name, v)

    def _check_array(self, a: Arg, v, dims: dict, values: bool = True, host: bool = False):
        arr = c.host_array(a.name, v, shape_only=not (host or (values and a.reads_values)))
        allowed = [np.dtype(d) if d != "bfloat16" else c.BF16 for d in a.dtypes]
        if a.dtype_symbol and a.dtype_symbol in dims:
            allowed = [dims[a.dtype_symbol]]
        if arr.dtype not in allowed:
            c.fail(a.name, f"dtype {arr.dtype}, expected {' or '.join(str(d) for d in allowed)}")
        if a.dtype_symbol:
            dims.setdefault(a.dtype_symbol, arr.dtype)
        if arr.ndim != len(a.shape):
            c.fail(a.name, f"shape {tuple(arr.shape)} has {arr.ndim} dims, expected {len(a.shape)}")
        for s in a.shape:
            if isinstance(s, str) and s in self.derived and s not in dims:
                dims[s] = self.derived[s](dims)
        new = {}  # symbols this array is the first to name: bound (and range-checked) before comparing
        for s, n in zip(a.shape, arr.shape):
            if isinstance(s, str) and s not in dims and s not in new:
                sym = self.symbol(s)
                if not sym.lo <= n <= sym.hi:
                    c.fail(a.name, f"{sym.doc} {s}={n} is outside {sym.lo}..{sym.hi}")
                new[s] = int(n)
        expected = tuple({**dims, **new}.get(s, s) if isinstance(s, str) else s for s in a.shape)
        if any(e != n for e, n in zip(expected, arr.shape)):
            c.fail(a.name, f"shape {tuple(arr.shape)}, expected ({', '.join(map(str, expected))})")
        dims.update(new)
        return arr

    def symbol(self, name: str) -> Symbol:
        return next(s for s in self.symbols if s.name == name)

    # ------------------------------------------------------------------ KDTR op files
    def kdtr_inputs(self, named: dict) -> dict[str, np.ndarray]:
        """The input tensors of a KDTR op file: one per given argument, scalars as rank-0 tensors."""
        out = {}
        for a in self.args:
            v = named.get(a.name, a.default)
            if v is None or v is REQUIRED:
                continue
            if a.kind == "array":
                out[a.name] = np.asarray(v)
            elif a.kind == "int":
                out[a.name] = np.array(int(v), np.int32)
            elif a.kind == "real":
                out[a.name] = np.array(float(v), np.float64)
            else:
                out[a.name] = np.array(bool(v), np.bool_)
        return out

    def args_from_kdtr(self, tensors) -> dict[str, Any]:
        """Arguments from a KDTR op file's input tensors (a mapping name -> array); missing ones default."""
        named: dict[str, Any] = {}
        for a in self.args:
            if a.name not in tensors:
                continue
            t = np.asarray(tensors[a.name])
            if a.kind == "array":
                named[a.name] = np.array(t)  # a private, writeable copy (the commit writes in place)
            elif a.kind == "int":
                named[a.name] = int(t)
            elif a.kind == "real":
                named[a.name] = float(t)
            else:
                named[a.name] = bool(t)
        return named

    def kdtr_outputs(self, result, named: dict | None = None) -> dict[str, np.ndarray]:
        """The output tensors of a KDTR op file: the result's fields, and the arguments written in place."""
        out = {o.name: np.asarray(getattr(result, o.name)) for o in self.outputs}
        for name in self.in_place:
            if named is not None and named.get(name) is not None:
                out[name] = np.asarray(named[name])
        return out

    # ------------------------------------------------------------------ documentation
    def doc(self) -> str:
        """The contract as text: arguments with dtypes/shapes, limits, outputs, what is refused."""
        lines = [f"Contract ({self.slug}): {self.summary}", "", "Arguments:"]
        for a in self.args:
            if a.kind == "array":
                t = f"{'|'.join(a.dtypes)} [{', '.join(map(str, a.shape))}]"
            elif a.kind == "int":
                t = f"int in {a.lo}..{a.hi}"
            else:
                t = {"real": "real number", "flag": "bool"}[a.kind]
            dflt = "" if a.default is REQUIRED else f" = {a.default!r}"
            lines.append(f"  {a.name}{dflt}: {t}. {a.doc}")
        lines += ["", "Limits:"]
        lines += [f"  {s.name} ({s.doc}): {s.lo}..{s.hi}" for s in self.symbols]
        lines += ["", f"Returns {self.result.__name__}:"]
        lines += [f"  {o.name}: {o.dtype} [{', '.join(map(str, o.shape))}]. {o.doc}" for o in self.outputs]
        if self.errors:
            lines += ["", "Raises InputError (message starts with the argument's name) when:"]
            lines += [textwrap.fill(e, 100, initial_indent="  - ", subsequent_indent="    ") for e in self.errors]
        return "\n".join(lines)

"""Test cases as data: an op slug and its arguments by the contract's names, plus what the test knows
beyond the arguments (`info`: the parents behind a visibility mask, say). One `run()` calls any
implementation with a case, so no test restates an op's argument list."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest

import contract

from . import claims, impls, torch_staging


@dataclasses.dataclass(frozen=True, repr=False)
class Case:
    op: str
    args: dict
    info: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        c = contract.OPS[self.op]
        unknown = set(self.args) - set(c.arg_names)
        if unknown:
            raise TypeError(f"{self.op} has no argument(s) {', '.join(sorted(unknown))}")

    def __getattr__(self, name):
        d = self.__dict__
        if name in d.get("args", {}):
            return d["args"][name]
        if name in d.get("info", {}):
            return d["info"][name]
        raise AttributeError(name)

    def with_args(self, **changes) -> Case:
        """The same case with some arguments replaced (None removes an optional one)."""
        return Case(self.op, {**self.args, **changes}, self.info)

    def copy(self) -> Case:
        """A deep copy (a commit writes the cache in place: each run gets its own)."""
        return Case(self.op, copy.deepcopy(self.args), self.info)

    def __repr__(self):
        parts = []
        for k, v in self.args.items():
            if isinstance(v, np.ndarray):
                parts.append(f"{k}={v.dtype}{list(v.shape)}" if v.size > 16 else f"{k}={v.tolist()!r}")
            else:
                parts.append(f"{k}={v!r}")
        parts += [f"{k}={v.tolist() if isinstance(v, np.ndarray) else v!r}" for k, v in self.info.items()]
        return f"Case({self.op}: {', '.join(parts)})"


def _dtype(x) -> np.dtype | None:
    """A numpy dtype for numpy, cupy and torch arrays alike (None when it has no numpy name)."""
    name = str(getattr(x, "dtype", "")).removeprefix("torch.")
    if name == "bfloat16":
        return contract.BF16
    try:
        return np.dtype(name)
    except TypeError:
        return None


def input_dtypes(case: Case) -> list[np.dtype]:
    """Dtypes of the arguments whose contract allows more than one (what a narrower variant may refuse)."""
    c = contract.OPS[case.op]
    found = [
        _dtype(case.args[a.name])
        for a in c.args
        if a.kind == "array" and len(a.dtypes) > 1 and case.args.get(a.name) is not None
    ]
    return [d for d in found if d is not None]


def function(impl, op: str, **knobs):
    """The implementation's op function, or a skip naming why it cannot run here (not claimed: an external
    implementation without the op)."""
    if impl.declaration is not None and op not in impl.loaders:
        claims.not_claimed(f"{impl.name} has no {op} (it declares {', '.join(impl.loaders)})")
    try:
        return impl.op(op, **knobs)
    except impls.Unavailable as e:
        pytest.skip(str(e))


def run(impl, case: Case, **knobs):
    """Run `case` on `impl` (with tuning knobs where it has them); skips (with the reason) where the
    implementation cannot take it, and ends the test as not claimed where the case lies outside what an
    external implementation declares (harness/claims.py)."""
    fn = function(impl, case.op, **knobs)
    try:
        for dt in input_dtypes(case):
            impl.check_dtype(case.op, dt)
    except impls.Unavailable as e:
        pytest.skip(str(e))
    caps = impl.caps(case.op)
    if caps is not None:
        why = claims.outside(caps, case)
        if why:
            claims.not_claimed(f"{impl.name} declares {caps.describe()}; this case has {why}")
    try:
        return fn(**case.args)
    except torch_staging.CannotStage as e:  # only raised before the implementation is called
        pytest.skip(str(e))


def fixture_args(f) -> dict:
    """The op arguments a golden fixture (fixtures/<op>/*.kdtr, loaded) holds: its `in.*` tensors by the
    contract's KDTR names."""
    import contract

    inputs = {k[3:]: f[k] for k in f.infos if k.startswith("in.")}
    return contract.OPS[f.metadata["op"]].args_from_kdtr(inputs)

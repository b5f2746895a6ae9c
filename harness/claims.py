"""What an implementation claims: its declared capabilities checked against a case, the promises a clause
needs, and the declaration the strategies draw inside while a test runs.

A test whose inputs lie outside an implementation's declaration is *not claimed*: it ends as a pytest skip
whose reason starts with NOT_CLAIMED, which the report turns into a status of its own (harness/reporting.py).
Bad input is everyone's business: a case the contract refuses is never "not claimed", every implementation
must refuse it. The built-in implementations declare nothing (they take all the contract allows).
"""

from __future__ import annotations

import contextvars

import numpy as np
import pytest

import contract
from adapters.protocol import show_values
from contract.trees import unpack_visibility

NOT_CLAIMED = "not claimed: "
# clause -> the promise (adapters.protocol.PROMISES) it needs from an implementation
PROMISED_BY = {
    "TB.4.1": ("deterministic",),
    "TV.3.2": ("deterministic",),
    "TB.4.2": ("batch_invariant",),
    "TV.3.3": ("batch_invariant",),
    "TA.4.1": ("deterministic", "batch_invariant"),
    "DT.4.1": ("deterministic",),
    "DT.4.2": ("batch_invariant",),
}
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("kdtr_declaring_impl", default=None)


def not_claimed(reason: str):
    """End the current test as not claimed (a skip the report keeps apart from the others)."""
    pytest.skip(NOT_CLAIMED + reason)


def is_not_claimed(reason: str | None) -> bool:
    return bool(reason) and reason.startswith(NOT_CLAIMED)


# ------------------------------------------------------------------------------------------- the active one
def activate(impl):
    """Make `impl`'s declaration the one the strategies draw inside (a token for deactivate)."""
    return _ACTIVE.set(impl)


def deactivate(token) -> None:
    _ACTIVE.reset(token)


def declared(op: str):
    """The active implementation's Capabilities for `op`, or None when it declares nothing (built-ins, or
    no test running)."""
    impl = _ACTIVE.get()
    return impl.caps(op) if impl is not None else None


def fit(op: str, symbol: str, values, what: str = ""):
    """The candidate `values` of a dimension that the active declaration takes; not claimed when none."""
    caps = declared(op)
    if caps is None or symbol not in caps.dims:
        return list(values)
    kept = [v for v in values if v in caps.dims[symbol]]
    if not kept:
        not_claimed(
            f"{_name()} takes {symbol} in {show_values(caps.dims[symbol])}, the test draws {what or list(values)}"
        )
    return kept


def need_dtype(op: str, dtype) -> None:
    """Not claimed when the active declaration does not take `dtype` for `op`."""
    caps = declared(op)
    name = dtype_name(dtype)
    if caps is not None and caps.dtypes is not None and name not in caps.dtypes:
        not_claimed(f"{_name()} takes {'/'.join(caps.dtypes)} for {op}, the test uses {name}")


def chains_only(op: str = "tree_verify") -> bool:
    caps = declared(op)
    return caps is not None and caps.trees == "chains"


def _name() -> str:
    impl = _ACTIVE.get()
    return impl.name if impl is not None else "?"


def dtype_name(dtype) -> str:
    return "bfloat16" if np.dtype(dtype) == contract.BF16 else np.dtype(dtype).name


# ------------------------------------------------------------------------------------------- a case
def outside(caps, case) -> str | None:
    """Why `case` lies outside `caps` (None when it is inside, or when the contract refuses it: bad input
    is checked for every implementation). The case's arrays are numpy (the harness stages device copies
    after this check)."""
    from .cases import input_dtypes

    try:
        checked = contract.OPS[case.op].validate(**case.args)
    except contract.InputError:
        return None
    if caps.dtypes is not None:
        for dt in input_dtypes(case):
            if dtype_name(dt) not in caps.dtypes:
                return f"dtype {dtype_name(dt)} (declared: {'/'.join(caps.dtypes)})"
    values = {**checked.dims, **{k: v for k, v in checked.args.items() if isinstance(v, int)}}
    for name, allowed in caps.dims.items():
        if name in values and values[name] not in allowed:
            return f"{name}={values[name]} (declared: {show_values(allowed)})"
    if caps.trees == "chains" and case.op == "tree_verify":
        Q = checked.dims["Q"]
        bits = unpack_visibility(np.asarray(case.args["visibility"]), Q)
        if not (bits == np.tril(np.ones((Q, Q), bool))[None]).all():
            return "a tree that is not a chain of Q rows in every request (declared: chains only)"
    return None


def unpromised(caps_by_op: dict, clause_ids) -> str | None:
    """Why a test of these clauses is not claimed: a clause needs a promise some declared op does not make."""
    missing = []
    for cid in clause_ids:
        op = {"TB": "tree_build", "TV": "tree_verify", "TA": "tree_accept", "DT": "draft_topk"}.get(cid.split(".")[0])
        caps = caps_by_op.get(op)
        if caps is None:
            continue
        missing += [
            f"{cid} needs the {p.replace('_', '-')} promise" for p in PROMISED_BY.get(cid, ()) if not caps.promises(p)
        ]
    return "; ".join(missing) or None

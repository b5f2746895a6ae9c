"""Which tests a run reaches: `--op` (certify one op, or a few), and, for external implementations, only the
tests of the ops they provide (docs/ADAPTERS.md).

A test belongs to the ops its clauses name (TB tree_build, TV tree_verify, TA tree_accept, DT draft_topk);
tests of no op (the KDTR container, the kernels' builds, the engine binary, the step) are the harness's own.
- `--op OP` keeps the tests of OP, and of no other op or none.
- A run whose every `--impl` is external keeps, per implementation, the tests of the ops it provides (and of
  `--op`, when given); the harness's own tests, and tests that take no implementation, run only with
  `--harness-tests`. An op the implementation does not provide is not run: the report's per-implementation
  table lists it as not claimed (not provided).
- A kept test of an external implementation whose clauses are all paths of this project's own CUDA wrappers
  (device arrays in and out, deferred device checks, the step's advance) ends as not claimed at once.
"""

from __future__ import annotations

import pytest

from . import external, impls

OP_OF_PREFIX = {"TB": "tree_build", "TV": "tree_verify", "TA": "tree_accept", "DT": "draft_topk"}
# Clauses about the project's own CUDA wrappers: their device-array paths, deferred checks and the step's advance.
WRAPPER_CLAUSES = frozenset({"TB.4.4", "TB.4.5", "TA.4.3", "TA.4.4", "TA.4.5", "TV.3.6", "TV.3.7", "DT.4.4", "DT.4.5"})
NOT_CLAIMED_KEY = pytest.StashKey[str]()


def add_options(parser) -> None:
    parser.addoption(
        "--op",
        action="append",
        default=None,
        choices=list(OP_OF_PREFIX.values()),
        help="run only the tests of this op (repeat for several); with external implementations, certify one "
        "op in a few minutes (docs/ADAPTERS.md)",
    )
    parser.addoption(
        "--harness-tests",
        action="store_true",
        default=False,
        help="with only external implementations selected, run the harness's own tests too (KDTR readers, "
        "kernel builds, the engine, the step), which are left out by default",
    )


def ops_of(clause_ids) -> set[str]:
    """The ops a test's clauses belong to."""
    return {OP_OF_PREFIX[c.split(".")[0]] for c in clause_ids if c.split(".")[0] in OP_OF_PREFIX}


def _external(name: str) -> bool:
    return name not in impls.names() and external.looks_external(name)


def _provided(name: str) -> set[str] | None:
    """The ops an external implementation provides (None: it cannot be loaded; its tests say why)."""
    try:
        return set(external.load(name).ops)
    except external.NotFound:
        return None


def select(config, items: list) -> None:
    """Deselect (pytest's own deselection, counted in the summary) what this run does not reach."""
    wanted = set(config.getoption("--op") or ())
    chosen = impls.expand(config.getoption("--impl"))
    external_only = bool(chosen) and all(_external(n) for n in chosen)
    harness_too = config.getoption("--harness-tests")
    if not wanted and not any(_external(n) for n in chosen):
        return
    keep, drop = [], []
    for item in items:
        ids = [i for m in item.iter_markers("spec") for i in m.args]
        ops = ops_of(ids)
        params = getattr(item, "callspec", None)
        impl = params.params.get("impl") if params else None
        if impl is None or not ops:  # the harness's own tests
            ok = (harness_too or not external_only) and (not wanted or bool(ops & wanted))
        elif _external(impl):
            provided = _provided(impl)
            reach = (provided if provided is not None else ops) & (wanted or ops)
            ok = bool(ops & reach)
            if ok and set(ids) <= WRAPPER_CLAUSES:
                item.stash[NOT_CLAIMED_KEY] = (
                    f"{impl}: {', '.join(sorted(set(ids)))} are paths of this project's own CUDA wrappers"
                )
        else:
            ok = not wanted or bool(ops & wanted)
        (keep if ok else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def not_claimed_here(item) -> str | None:
    """Why `item` is not claimed before it runs (select() decided it), or None."""
    return item.stash.get(NOT_CLAIMED_KEY, None)

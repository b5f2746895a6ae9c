"""One assertion, one clause: every check names the clause it proves, so that a test checking several clauses
fails only the clause whose check failed (the report's rows, harness/reporting.py).

A check names its clause in one of three ways:
- the comparison helpers (`harness.compare.assert_bit_exact`, `assert_close`, `assert_cosine`) given
  `spec_id=` raise a `ClauseFailure` for it;
- `expect(condition, clause, message)` for a plain condition;
- `with clause("TB.2.6"): ...` around any code whose failure belongs to one clause (an assertion, or the call of
  the implementation whose refusal or crash is what the clause is about).

The innermost name wins (a helper's spec_id inside a `clause()` block keeps its own). Each check that passes is
recorded too, so the report can tell a clause whose checks passed before another clause's check failed from one
the failing test never reached. A failure that names no clause (an implementation crashing outside any check,
say) is blamed on every clause the test carries, as before: the honest answer when nothing says which.

Failures travel as exceptions, unchanged apart from the attribute, so hypothesis shrinks each one as it would
an AssertionError (its origin, the failing line, stays the check's own).
"""

from __future__ import annotations

import contextlib

ATTR = "kdtree_clause"
_PASSED: set[str] = set()
_CHECKED_ONLY: list[bool] = [False]


class ClauseFailure(AssertionError):
    """A failed check of one clause; the message starts with the clause in brackets."""

    def __init__(self, clause_id: str, message: str):
        tag = f"[{clause_id}]"
        super().__init__(message if tag in message else f"{tag} {message}")
        setattr(self, ATTR, clause_id)


def tag(exc: BaseException, clause_id: str) -> BaseException:
    """Name `clause_id` as the clause `exc` fails, unless a check inside already named one."""
    if getattr(exc, ATTR, None) is None:
        with contextlib.suppress(AttributeError):  # a type with __slots__: unnamed (blamed on every clause)
            setattr(exc, ATTR, clause_id)
    return exc


def passed(clause_id: str | None) -> None:
    """A check of `clause_id` passed (the compare helpers call this)."""
    if clause_id:
        _PASSED.add(clause_id)


def expect(condition, clause_id: str, message: str) -> None:
    """A plain check of one clause: ClauseFailure(message) unless `condition`."""
    __tracebackhide__ = True
    if not condition:
        raise ClauseFailure(clause_id, message)
    passed(clause_id)


@contextlib.contextmanager
def clause(clause_id: str):
    """Blame any exception raised inside on `clause_id` (pytest's skips and xfails are not exceptions of a
    check and pass through untouched); the block passing counts as a passed check of it."""
    try:
        yield
    except Exception as e:
        tag(e, clause_id)
        raise
    passed(clause_id)


# ------------------------------------------------------------------------------------------- the report's side
def checked_only() -> None:
    """The running test answers only for the clauses whose checks ran: a test carrying the clauses of every
    case it might meet (a generated boundary case of either dtype, say) reports the others not at all,
    instead of a pass it did not check."""
    _CHECKED_ONLY[0] = True


def reset() -> None:
    """Forget the passed checks (before each test)."""
    _PASSED.clear()
    _CHECKED_ONLY[0] = False


def is_checked_only() -> bool:
    """Whether the running test asked to answer only for the clauses it checked (checked_only())."""
    return _CHECKED_ONLY[0]


def reached() -> set[str]:
    """The clauses whose checks passed at least once in the running test."""
    return set(_PASSED)


def failed_clauses(exc: BaseException | None) -> tuple[set[str], bool]:
    """(the clauses named by `exc` and the exceptions it groups, whether some part of it names none)."""
    if exc is None:
        return set(), True
    if isinstance(exc, BaseExceptionGroup):
        found: set[str] = set()
        unnamed = False
        for sub in exc.exceptions:
            s, u = failed_clauses(sub)
            found |= s
            unnamed |= u
        return found, unnamed
    cid = getattr(exc, ATTR, None)
    return ({cid}, False) if cid else (set(), True)


def passed_outcomes(test_clauses, reached_ids, checked_only_: bool) -> dict[str, str]:
    """Each of a passed test's clauses: "passed", or "unchecked" (left out of the report) for a test that
    answers only for the clauses it checked (checked_only) and never checked this one."""
    ids = list(dict.fromkeys(test_clauses))
    return {c: "passed" if not checked_only_ or c in reached_ids else "unchecked" for c in ids}


def outcomes(
    test_clauses, exc: BaseException | None, reached_ids, checked_only_: bool = False
) -> tuple[dict[str, str], str | None]:
    """Each of a failed test's clauses: "failed" (its check failed), "passed" (its checks passed, and the
    failure is another clause's) or "not_reached" (the test failed before any check of it ran; "unchecked" in
    a checked_only test); and a note when the failure could not be pinned on the test's own clauses (then
    every clause fails)."""
    ids = list(dict.fromkeys(test_clauses))
    named, unnamed = failed_clauses(exc)
    if unnamed or not named:
        note = "a failure naming no clause (blamed on every clause of the test)" if len(ids) > 1 else None
        return dict.fromkeys(ids, "failed"), note
    missing = "unchecked" if checked_only_ else "not_reached"
    out = {c: "failed" if c in named else ("passed" if c in reached_ids else missing) for c in ids}
    stray = sorted(named - set(ids))
    for c in stray:  # the check named it: it is that clause's failure, whatever the test's marks forgot
        out[c] = "failed"
    note = f"a failure naming {', '.join(stray)}, not among the test's spec marks (add it)" if stray else None
    return out, note

"""The clause registry: numbered clauses parsed from spec/*.md.

A clause is a heading `### TB.3.2 Title`, followed within its section by an `Accuracy:` line
(`exact`, `ulp(N)`, `rel(R)` / `rel(R, atol=A)` against a float64 oracle, or `cos(D)`: 1 − cosine
similarity ≤ D against a float64 oracle) and optionally a
`Status: planned` line. Conformance tests carry `@pytest.mark.spec("TB.3.2")`.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re

SPEC_DIR = pathlib.Path(__file__).resolve().parent.parent / "spec"
_HEAD = re.compile(r"^###\s+([A-Z]+(?:\.\d+)+)\s+(.+?)\s*$")
_ACC = re.compile(r"^Accuracy:\s*(exact|ulp\((\d+)\)|rel\(([^,)]+)(?:,\s*atol=([^)]+))?\)|cos\(([^)]+)\))\s*$")
_STATUS = re.compile(r"^Status:\s*(\w+)")


@dataclasses.dataclass(frozen=True)
class Clause:
    id: str
    title: str
    accuracy: str
    status: str  # "normative" or "planned"
    source: str

    def tolerance(self) -> dict:
        """kwargs for harness.compare.assert_close (empty for exact clauses: use assert_bit_exact)."""
        m = _ACC.match(f"Accuracy: {self.accuracy}")
        if m.group(2):
            return {"max_ulp": int(m.group(2))}
        if m.group(3):
            return {"rtol": float(m.group(3)), "atol": float(m.group(4) or 0.0)}
        if m.group(5):
            return {"max_cos_diff": float(m.group(5))}
        return {}


class SpecError(ValueError):
    pass


def parse(text: str, source: str) -> list[Clause]:
    clauses, cur = [], None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            if cur is not None:
                clauses.append(_finish(cur, source))
                cur = None
            m = _HEAD.match(line)
            if m:
                cur = {"id": m.group(1), "title": m.group(2), "line": n, "accuracy": None, "status": "normative"}
            continue
        if cur is None:
            continue
        if line.startswith("Accuracy:"):
            if not _ACC.match(line.strip()):
                raise SpecError(f"{source}:{n}: bad Accuracy line {line!r}")
            cur["accuracy"] = line.split(":", 1)[1].strip()
        m = _STATUS.match(line)
        if m:
            cur["status"] = m.group(1)
    if cur is not None:
        clauses.append(_finish(cur, source))
    return clauses


def _finish(c: dict, source: str) -> Clause:
    if c["accuracy"] is None:
        raise SpecError(f"{source}:{c['line']}: clause {c['id']} has no Accuracy: line")
    if c["status"] not in ("normative", "planned"):
        raise SpecError(f"{source}:{c['line']}: clause {c['id']} has unknown Status {c['status']!r}")
    return Clause(c["id"], c["title"], c["accuracy"], c["status"], f"{source}:{c['line']}")


@functools.cache
def registry(spec_dir: pathlib.Path = SPEC_DIR) -> dict[str, Clause]:
    out: dict[str, Clause] = {}
    for path in sorted(spec_dir.glob("*.md")):
        for c in parse(path.read_text(), path.name):
            if c.id in out:
                raise SpecError(f"{c.source}: clause {c.id} already defined at {out[c.id].source}")
            out[c.id] = c
    return out


# Clauses about one input dtype: a test parametrized by dtype checks only its own dtype's (harness/claims.py
# reports a dtype an implementation does not declare as not claimed, clause by clause).
DTYPE_CLAUSES = {"float32": ("TV.2.1", "TV.2.3"), "bfloat16": ("TV.2.2", "TV.2.9")}


def for_dtype(ids, dtype) -> tuple:
    """The clause IDs a test checks for one value of its `dtype` parameter (all of them without one)."""
    if dtype is None:
        return tuple(ids)
    import numpy as np

    try:
        name = np.dtype(dtype).name
    except TypeError:
        return tuple(ids)
    other = {c for d, cs in DTYPE_CLAUSES.items() if d != name for c in cs}
    return tuple(i for i in ids if i not in other)


def sort_key(spec_id: str) -> tuple:
    """Clause IDs in reading order: TV.2.10 after TV.2.9."""
    head, *nums = spec_id.split(".")
    return (head, *(int(n) if n.isdigit() else 0 for n in nums))


def clause(spec_id: str) -> Clause:
    try:
        return registry()[spec_id]
    except KeyError:
        raise SpecError(f"unknown spec clause {spec_id!r}") from None

"""The C++ CPU tree builder (the engine's libkdtree_cpu.so, through harness.kdtree_cpu): a comparator of tree_build.

Each call is what a caller of the library pays per step: the arguments checked (dtypes and shapes; the values are
trusted, validate=False) and marshalled, the outputs allocated, the build. Until the library is built, `load()`
raises Unavailable("C++ builder: libkdtree_cpu.so is not built ...") and the comparator is recorded as skipped with
that reason.
"""

from __future__ import annotations

import functools

from contract import Tree

from .. import kdtree_cpu, tools
from . import Unavailable


@functools.cache
def load() -> kdtree_cpu.KdtreeCpu:
    """The loaded library (Unavailable, not cached, while it is not built)."""
    try:
        return kdtree_cpu.KdtreeCpu()
    except tools.ToolMissing as e:
        raise Unavailable(f"C++ builder: {e}") from None


def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, *, with_full_mask=False, threads: int = 1) -> Tree:
    """One call of the C++ builder with the contract's arguments (values trusted: validate=False)."""
    return load().tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, with_full_mask=with_full_mask,
                             threads=threads, validate=False)  # fmt: skip

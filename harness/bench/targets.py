"""The one place the benchmarks reach the CUDA wrappers: a rename in kernels_cu is a one-line change here.

Each `prepare_*` returns the wrappers' Prepared: `launch()` enqueues the kernel(s) only (what is timed),
`sync()`, `results()` (wait and copy back, keeping buffers), `finish()` (results, then free).
"""

from __future__ import annotations

import importlib

from . import Unavailable

# op -> (module, function)
PREPARE = {
    "tree_build": ("kernels_cu.ops", "prepare_tree_build"),
    "tree_accept": ("kernels_cu.ops", "prepare_tree_accept"),
    "tree_verify": ("kernels_cu.tree_verify_ops", "prepare_tree_verify"),
}
MISSING = {"tree_verify": "tree_verify CUDA kernel not present (kernels_cu/tree_verify_ops.py)"}


def prepare_fn(op: str):
    """The wrapper's prepare function for `op`, or Unavailable naming what is missing."""
    module, name = PREPARE[op]
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise Unavailable(MISSING.get(op, f"{module}.{name} is missing") + f" [{type(e).__name__}: {e}]") from e
    return fn


def prepare(op: str, *args, **kwargs):
    return prepare_fn(op)(*args, **kwargs)


def verify_outputs(result) -> tuple:
    """(out, lse) of a tree_verify result (the wrapper returns the reference's tuple)."""
    out, lse = result
    return out, lse

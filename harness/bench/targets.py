"""The one place the benchmarks reach the CUDA wrappers: a rename in kernels_cu is a one-line change here.

`prepare(op, variant, ...)` returns the wrappers' Prepared: `launch()` enqueues the kernel(s) only (what is
timed), `sync()`, `results()` (wait and copy back, keeping buffers), `finish()` (results, then free).
`variants(op)` lists the op's kernel variants (kernels_cu/specs.py): the benchmarks time each of them.
`selects(op, variant)` and `fallbacks(op, variant, ...)`: tree_build's select variants and how often their
selection falls back to the replay (harness/bench/fallbacks.py).
"""

from __future__ import annotations


def variants(op: str) -> list[str]:
    from kernels_cu import specs

    return [s.variant for s in specs.for_op(op)]


def other_arch_budget(op: str) -> set[str]:
    """The op's variants built with another arch's shared-memory budget (the *_99k twins: what an sm_120 GPU
    runs, built for sm_90): the benchmarks time them on a subset beside the variants they mirror."""
    from kernels_cu import specs

    return {s.variant for s in specs.sm120_twins(op)}


def prepare(op: str, variant: str, *args, **kwargs):
    from kernels_cu import ops

    return ops.prepare(op, variant, *args, **kwargs)


def selects(op: str, variant: str) -> bool:
    """Whether the variant selects before it replays (tree_build's select variants): its cases record a fallback
    rate (harness/bench/fallbacks.py)."""
    from kernels_cu import specs, tree_build_ops

    return op == "tree_build" and tree_build_ops.selects(specs.get(op, variant))


def fallbacks(op: str, variant: str, *args) -> dict:
    """The variant's reporting build launched once on args: {requests, checks_failed, overflowed}, or {requests,
    no_selection: why} (kernels_cu.tree_build_ops.fallbacks). The spec is looked up now, so that a planted build
    swapped in by the kernel-mutant plugin is the one measured."""
    from kernels_cu import specs, tree_build_ops

    if op != "tree_build":
        raise ValueError(f"{op} has no fallback to count")
    return tree_build_ops.fallbacks(specs.get(op, variant), *args)


def verify_outputs(result) -> tuple:
    """(out, lse) of a tree_verify result."""
    return result.out, result.lse

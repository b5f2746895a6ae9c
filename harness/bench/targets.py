"""The one place the benchmarks reach the CUDA wrappers: a rename in kernels_cu is a one-line change here.

`prepare(op, variant, ...)` returns the wrappers' Prepared: `launch()` enqueues the kernel(s) only (what is
timed), `sync()`, `results()` (wait and copy back, keeping buffers), `finish()` (results, then free).
`variants(op)` lists the op's kernel variants (kernels_cu/specs.py): the benchmarks time each of them.
"""

from __future__ import annotations


def variants(op: str) -> list[str]:
    from kernels_cu import specs

    return [s.variant for s in specs.for_op(op)]


def other_arch_budget(op: str) -> set[str]:
    """The op's variants built with another arch's shared-memory budget (the *_99k twins: what an sm_120 GPU
    runs, built for sm_90): the benchmarks time them on a subset beside the variants they mirror."""
    from kernels_cu import specs

    return {s.variant for s in specs.for_op(op) if "KDTR_SMEM_BUDGET" in s.all_defines()}


def prepare(op: str, variant: str, *args, **kwargs):
    from kernels_cu import ops

    return ops.prepare(op, variant, *args, **kwargs)


def verify_outputs(result) -> tuple:
    """(out, lse) of a tree_verify result."""
    return result.out, result.lse

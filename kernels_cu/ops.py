"""The CUDA implementations of the ops, one per kernel build spec (kernels_cu/specs.py).

`function(slug, variant)` is the op with the contract's signature; `prepare(slug, variant, ...)` validates
and sets up a call whose `launch()` can be timed alone. Validation is the contract's (same errors, same
messages as every implementation) and happens before anything reaches the GPU.
"""

from __future__ import annotations

import functools
import importlib

from . import specs


def _module(slug: str):
    return importlib.import_module(f"kernels_cu.{slug}_ops")


@functools.cache
def _bound(spec: specs.KernelSpec, knobs: tuple):
    return _module(spec.slug).bind(spec, **dict(knobs))


def function(slug: str, variant: str, **knobs):
    """The op function for one variant (looked up now, so a spec swapped in by a test is honoured), with
    the spec's tuning knobs fixed where given (e.g. tree_verify's split_chunk)."""
    spec = specs.get(slug, variant)
    unknown = set(knobs) - set(spec.knobs)
    if unknown:
        raise TypeError(f"{spec.name} has no tuning knob {', '.join(sorted(unknown))} (it has {spec.knobs})")
    return _bound(spec, tuple(sorted((k, v) for k, v in knobs.items() if v is not None)))


def prepare(slug: str, variant: str, *args, **kwargs):
    """A validated call on the device, for benchmarks: `.launch()`, `.sync()`, `.results()`, `.finish()`."""
    return _module(slug).prepare(specs.get(slug, variant), *args, **kwargs)


def launches(spec: specs.KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads per block, most dynamic shared memory)} of every launch the op's wrapper makes of the
    spec's entries, anywhere in the contract's limits, on a GPU whose blocks may use block_limit bytes of shared
    memory (geometry.smem_budget of the build). No GPU needed."""
    return _module(spec.slug).launches(spec, block_limit)


def prepare_deferred(slug: str, variant: str, *args, **kwargs):
    """A call on device-resident inputs with the value checks on the device (tree_build, tree_accept, tree_verify
    and draft_topk, specs TB.4.5, TA.4.4, TV.3.7 and DT.4.5; tree_verify also takes max_context):
    `.launch()` is capturable, `.check()` raises the contract's error when the device check failed."""
    return _module(slug).prepare_deferred(specs.get(slug, variant), *args, **kwargs)

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
def _bound(spec: specs.KernelSpec):
    return _module(spec.slug).bind(spec)


def function(slug: str, variant: str):
    """The op function for one variant (looked up now, so a spec swapped in by a test is honoured)."""
    return _bound(specs.get(slug, variant))


def prepare(slug: str, variant: str, *args, **kwargs):
    """A validated call on the device, for benchmarks: `.launch()`, `.sync()`, `.results()`, `.finish()`."""
    return _module(slug).prepare(specs.get(slug, variant), *args, **kwargs)

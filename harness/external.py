"""External implementations (adapters.protocol.Implementation) found by name: `module:attribute` (the
attribute is an Implementation, or a function of no arguments returning one), or the name of an entry
point in the group adapters.ENTRY_POINT_GROUP that an installed package registers (its value is again
`module:attribute`). harness/impls.py turns what is found into a registry entry."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect

from adapters import ENTRY_POINT_GROUP, Implementation

# Names of the implementations this project ships as adapters but not as entry points (the GPU runner does not
# install the project): name -> module:attribute.
SHIPPED = {"torch-ops": "kdtree_torch.adapter:IMPLEMENTATION"}


class NotFound(ValueError):
    """The name is neither an importable module:attribute nor an installed entry point."""


@functools.cache
def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Installed entry points of the group, by name (read once per process)."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def looks_external(name: str) -> bool:
    """A name that is not a built-in's: module:attribute, or an entry point name."""
    return (":" in name and not name.startswith("cuda:")) or name in SHIPPED or name in entry_points()


@functools.cache
def load(name: str) -> Implementation:
    """The Implementation a name refers to; NotFound naming what failed."""
    target = SHIPPED.get(name, name)
    eps = entry_points()
    if name in eps:
        target = eps[name].value
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise NotFound(
            f"{name!r} is not an implementation: use module:attribute or an installed entry point "
            f"({', '.join(sorted(eps)) or f'none installed in {ENTRY_POINT_GROUP}'})"
        )
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise NotFound(f"{name!r}: cannot import {module} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise NotFound(f"{name!r}: {module} has no attribute {attr}")
        obj = getattr(obj, part)
    if inspect.isfunction(obj):  # a factory: the package defers its heavy imports to the call
        obj = obj()
    if not isinstance(obj, Implementation):
        raise NotFound(f"{name!r}: {target} is a {type(obj).__name__}, not an adapters.Implementation")
    return obj

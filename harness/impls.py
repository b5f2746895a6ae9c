"""The implementations under test, selected by the `impl` fixture and `--impl`.

Each implementation exposes the three ops under one slug each: `tree_build`, `tree_verify`,
`tree_accept`. An op an implementation does not have raises `Unavailable`, which the fixture turns
into a skip naming why.
"""

from __future__ import annotations

import functools
import importlib

from . import device, tools

ALL = ("reference", "cuda", "engine-cpu", "engine-cuda")
GPU_IMPLS = frozenset({"cuda", "engine-cuda"})
OPS = ("tree_build", "tree_verify", "tree_accept")


class Unavailable(Exception):
    """This implementation (or this op of it) cannot run here; the message says why."""


class MissingTool(Unavailable):
    """A project tool this implementation needs is not built (a failure under --require-tools)."""


class Impl:
    def __init__(self, name: str, ops: dict):
        self.name = name
        self._ops = ops

    def op(self, slug: str):
        fn = self._ops.get(slug)
        if fn is None:
            raise Unavailable(f"{self.name} has no {slug} (planned)")
        return fn

    def __repr__(self):
        return f"Impl({self.name})"


def get(name: str) -> Impl:
    if name == "reference":
        return Impl(name, {op: getattr(importlib.import_module(f"reference.{op}"), op) for op in OPS})
    if name == "cuda":
        p = device.probe()
        if not p.ok:
            raise Unavailable(f"GPU unavailable: {p.reason}")
        ops = importlib.import_module("kernels_cu.ops")
        return Impl(name, {op: getattr(ops, op) for op in OPS if hasattr(ops, op)})
    if name == "engine-cpu":
        from . import engine

        try:
            ops = engine.ops()
        except tools.ToolMissing as e:
            raise MissingTool(str(e)) from e
        # Today's conformance tests and fixtures expect the FULL_MASK layout from every tree_build, as the
        # reference still builds it unconditionally; the engine builds it only on request.
        ops["tree_build"] = functools.partial(ops["tree_build"], with_full_mask=True)
        return Impl(name, ops)
    raise Unavailable(f"{name}: the C++ engine has no CUDA backend yet (engine/ builds the CPU backend only)")


def device_label(impl: str, arch: str | None, gpu_marked: bool) -> str:
    if arch:
        return f"compile-only {arch}"
    if impl in GPU_IMPLS or gpu_marked:
        p = device.probe()
        return f"{p.name} {p.arch}" if p.ok else "gpu (absent)"
    return "cpu"

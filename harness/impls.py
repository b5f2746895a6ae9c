"""The implementations under test: one registry, and the one place that decides whether an implementation
can run a case here (the `impl` fixture and `harness.cases.run` skip with its reason).

Names: `reference` (numpy), `cuda:VARIANT` (one kernel variant per op that has it; `cuda` selects every
variant), `engine-cpu` and `engine-cuda` (the C++ engine binary through KDTR files). Each implementation
declares what it can do: its ops, the input dtypes each takes, whether it takes device arrays, where it
runs, and how many reruns a determinism check gives it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from kernels_cu import specs

from . import device, tools

OPS = ("tree_build", "tree_verify", "tree_accept")
KINDS = ("reference", "cuda", "engine-cpu", "engine-cuda")


class Unavailable(Exception):
    """This implementation (or this op of it, or this case for it) cannot run here; the message says why."""


@dataclasses.dataclass(frozen=True)
class Impl:
    name: str  # "reference", "cuda:heap_smem", ...
    kind: str  # one of KINDS
    variant: str | None
    loaders: dict[str, Callable[..., Callable]]  # op -> loader of the op function (taking the op's knobs)
    dtypes: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # narrower than the contract
    on_gpu: bool = False
    takes_device_arrays: bool = False
    reruns: int = 3  # determinism checks: more for implementations whose scheduling varies
    why_not: str | None = None  # set when the implementation cannot run on this machine at all
    knobs: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # op -> its tuning knobs
    missing_tool: bool = False  # why_not is a project tool that is not built (a failure under --require-tools)

    def op(self, slug: str, **knobs):
        """The op function, or Unavailable naming why not. Tuning knobs (e.g. a forced split chunk) reach an
        implementation that has them; for the others they mean nothing and are dropped."""
        if self.why_not:
            raise Unavailable(f"{self.name}: {self.why_not}")
        if slug not in self.loaders:
            raise Unavailable(f"{self.name} has no {slug} kernel (it is a variant of {', '.join(self.loaders)})")
        mine = {k: v for k, v in knobs.items() if k in self.knobs.get(slug, ()) and v is not None}
        return self.loaders[slug](**mine)

    def knob_values(self, slug: str, name: str, values) -> tuple:
        """The values of a knob worth running: all of them where the implementation has the knob, else one
        run with its own default (None)."""
        return tuple(values) if name in self.knobs.get(slug, ()) else (None,)

    def check_dtype(self, slug: str, dtype) -> None:
        allowed = self.dtypes.get(slug)
        if allowed is not None and np.dtype(dtype).name not in allowed:
            raise Unavailable(f"{self.name} takes {' or '.join(allowed)} for {slug}, not {np.dtype(dtype).name}")

    def __repr__(self):
        return f"Impl({self.name})"


def _reference() -> Impl:
    import importlib

    return Impl(
        "reference",
        "reference",
        None,
        {op: (lambda op=op: getattr(importlib.import_module(f"reference.{op}"), op)) for op in OPS},
    )


def _cuda(variant: str) -> Impl:
    from kernels_cu import ops

    mine = [s for s in specs.SPECS if s.variant == variant]
    p = device.probe()
    why = None if p.ok else f"GPU unavailable: {p.reason}"
    if p.ok and not any(s.runs_on(p.arch) for s in mine):
        why = f"built for {', '.join(sorted({a for s in mine for a in s.archs}))}, this GPU is {p.arch}"
    return Impl(
        f"cuda:{variant}",
        "cuda",
        variant,
        {s.slug: (lambda s=s, **knobs: ops.function(s.slug, s.variant, **knobs)) for s in mine},
        dtypes={s.slug: s.dtypes for s in mine if s.dtypes},
        knobs={s.slug: s.knobs for s in mine if s.knobs},
        on_gpu=True,
        takes_device_arrays=True,
        reruns=100,
        why_not=why,
    )


def _engine(kind: str) -> Impl:
    from . import engine

    gpu = kind == "engine-cuda"
    try:
        tools.binary("kdtree-engine")
    except tools.ToolMissing as e:
        return Impl(kind, kind, None, {}, on_gpu=gpu, why_not=str(e), missing_tool=True)
    dev = "cuda" if gpu else "cpu"
    loaders = {op: (lambda op=op: engine.function(op, dev)) for op in OPS}
    if not gpu:
        return Impl(kind, kind, None, loaders)
    # each op runs its first kernel variant built for this GPU (the engine picks it, as cuda:VARIANT would);
    # every variant is compared with the NVRTC build in conformance/test_engine_cuda.py
    why = None
    if not engine.cuda_variants():
        why = "the engine was built without its CUDA backend (no nvcc when tools/setup.sh configured it)"
    p = device.probe()
    if p.ok is False and why is None:
        why = f"GPU unavailable: {p.reason}"
    return Impl(kind, kind, None, loaders, on_gpu=True, reruns=10, why_not=why, missing_tool=why is not None and p.ok)


def names() -> list[str]:
    """Every implementation name, `cuda` expanded to its variants."""
    return ["reference", *(f"cuda:{v}" for v in specs.variants()), "engine-cpu", "engine-cuda"]


def expand(selected: list[str] | None) -> list[str]:
    """--impl values to implementation names: none = all; `cuda` = every variant in the default selection
    (kernels_cu/specs.py: a variant not yet proven on a GPU is left out); `cuda:NAME` = one."""
    out = []
    default_cuda = [f"cuda:{v}" for v in specs.variants(default_only=True)]
    for s in selected or KINDS:
        out += default_cuda if s == "cuda" else [s]
    unknown = [n for n in out if n not in names()]
    if unknown:
        raise ValueError(f"--impl: unknown implementation {', '.join(unknown)} (have: {', '.join(names())}, cuda)")
    return list(dict.fromkeys(out))


@functools.cache
def get(name: str) -> Impl:
    if name == "reference":
        return _reference()
    if name.startswith("cuda:"):
        return _cuda(name.removeprefix("cuda:"))
    if name in ("engine-cpu", "engine-cuda"):
        return _engine(name)
    raise Unavailable(f"unknown implementation {name!r}")


def device_label(impl: str, arch: str | None, gpu_marked: bool) -> str:
    if arch:
        return f"compile-only {arch}"
    if impl.startswith("cuda") or impl == "engine-cuda" or gpu_marked:
        p = device.probe()
        return f"{p.name} {p.arch}" if p.ok else "gpu (absent)"
    return "cpu"

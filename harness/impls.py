"""The implementations under test: one registry, and the one place that decides whether an implementation
can run a case here (the `impl` fixture and `harness.cases.run` skip with its reason).

Names: `reference` (numpy), `cuda:VARIANT` (one kernel variant per op that has it; `cuda` selects every
variant), `engine-cpu` and `engine-cuda` (the C++ engine binary through KDTR files), and external
implementations (adapters.protocol): `module:attribute` or an installed entry point's name (harness/external.py),
which are never in the default selection. Each implementation declares what it can do: its ops, the input
dtypes each takes, whether it takes device arrays, where it runs, and how many reruns a determinism check
gives it; an external one also declares per op the inputs it claims (harness/claims.py).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections.abc import Callable

import numpy as np

from adapters.protocol import Capabilities
from kernels_cu import specs

from . import device, external, tools

OPS = ("tree_build", "tree_verify", "tree_accept", "draft_topk")
# Ops the engine's CUDA backend does not launch (no spec of theirs is `in_engine`; none today); their engine-cuda
# tests skip, saying so.
NO_CUDA_KERNEL = tuple(op for op in OPS if not any(s.slug == op for s in specs.engine_specs()))
KINDS = ("reference", "cuda", "engine-cpu", "engine-cuda")  # the built-ins, the default selection


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
    declaration: dict | None = None  # external: op -> adapters.Capabilities it claims (None: all the contract)
    version: str | None = None  # external: the implementation's own version

    def op(self, slug: str, **knobs):
        """The op function, or Unavailable naming why not. Tuning knobs (e.g. a forced split chunk) reach an
        implementation that has them; for the others they mean nothing and are dropped."""
        if self.why_not:
            raise Unavailable(f"{self.name}: {self.why_not}")
        if slug not in self.loaders:
            if self.variant is None and slug in NO_CUDA_KERNEL:
                raise Unavailable(f"{self.name} has no {slug}: the engine's CUDA backend does not launch it")
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

    def caps(self, op: str):
        """The adapters.Capabilities this implementation declares for `op` (None: it declares nothing)."""
        return None if self.declaration is None else self.declaration.get(op)

    def __repr__(self):
        return f"Impl({self.name})"

    def _repr_pretty_(self, p, cycle) -> None:
        """hypothesis prints a falsifying example's arguments with its pretty printer, which spells out a
        dataclass field by field (twenty lines of loaders): the name is what identifies the implementation."""
        p.text(repr(self.name))


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
    # a variant that plans for the batch (tree_verify sm90a_planned) declares no batch invariance: those clauses are
    # not claimed for it (its other promises and everything the contract allows stay)
    unpromised = {s.slug: Capabilities(batch_invariant=False) for s in mine if not s.batch_invariant}
    return Impl(
        f"cuda:{variant}",
        "cuda",
        variant,
        {s.slug: (lambda s=s, **knobs: ops.function(s.slug, s.variant, **knobs)) for s in mine},
        declaration=unpromised or None,
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
    loaders = {op: (lambda op=op: engine.function(op, dev)) for op in OPS if not (gpu and op in NO_CUDA_KERNEL)}
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


def _external(name: str) -> Impl:
    """An adapters.Implementation as a registry entry: its ops (device-array ones staged through torch), its
    declaration, and why it cannot run here (its own answer, or no GPU / no torch for a device one)."""
    from . import torch_staging

    ext = external.load(name)
    device_arrays = ext.arrays == "device"
    why = None
    if device_arrays:
        p = device.probe()
        why = None if p.ok else f"GPU unavailable: {p.reason}"
        if why is None and importlib.util.find_spec("torch") is None:
            why = "torch is not installed (a device-array implementation takes torch CUDA tensors)"
    if why is None:
        try:
            why = ext.available()
        except Exception as e:  # an availability probe that fails says why as well as one that answers
            why = f"its availability check failed: {type(e).__name__}: {e}"
    loaders = {
        op: (lambda e=entry, op=op: torch_staging.staged(e.fn, op) if device_arrays else e.fn)
        for op, entry in ext.ops.items()
    }
    return Impl(
        name,
        "external",
        None,
        loaders,
        on_gpu=device_arrays,
        why_not=None if why is None else f"{ext.name} {ext.version}: {why}",
        declaration={op: entry.caps for op, entry in ext.ops.items()},
        version=ext.version,
    )


def names() -> list[str]:
    """Every built-in implementation name, `cuda` expanded to its variants."""
    return ["reference", *(f"cuda:{v}" for v in specs.variants()), "engine-cpu", "engine-cuda"]


def expand(selected: list[str] | None) -> list[str]:
    """--impl values to implementation names: none = the built-ins; `cuda` = every variant in the default
    selection (kernels_cu/specs.py: a variant not yet proven on a GPU is left out); `cuda:NAME` = one;
    `module:attribute` or an entry point's name = an external implementation (ValueError when it cannot be
    found: a typo is a usage error, a missing dependency of a found one is a skip with its reason)."""
    out = []
    default_cuda = [f"cuda:{v}" for v in specs.variants(default_only=True)]
    for s in selected or KINDS:
        out += default_cuda if s == "cuda" else [s]
    unknown = []
    for n in out:
        if n in names():
            continue
        if external.looks_external(n):
            try:
                external.load(n)
                continue
            except external.NotFound as e:
                raise ValueError(f"--impl: {e}") from None
        unknown.append(n)
    if unknown:
        installed = sorted({*external.SHIPPED, *external.entry_points()})
        raise ValueError(
            f"--impl: unknown implementation {', '.join(unknown)} (have: {', '.join(names() + installed)}, cuda, "
            "or module:attribute of an adapters.Implementation)"
        )
    return list(dict.fromkeys(out))


@functools.cache
def get(name: str) -> Impl:
    if name == "reference":
        return _reference()
    if name.startswith("cuda:"):
        return _cuda(name.removeprefix("cuda:"))
    if name in ("engine-cpu", "engine-cuda"):
        return _engine(name)
    if external.looks_external(name):
        try:
            return _external(name)
        except external.NotFound as e:
            raise Unavailable(str(e)) from None
    raise Unavailable(f"unknown implementation {name!r}")


def on_gpu(name: str) -> bool:
    """Does the implementation run on the GPU (so 'no GPU' is a skip, or a failure under --require-gpu)?"""
    if name.startswith("cuda") or name == "engine-cuda":
        return True
    if external.looks_external(name):
        try:
            return get(name).on_gpu
        except Unavailable:
            return False
    return False


def report_columns(name: str) -> tuple[str, str]:
    """(impl, variant) columns of the report: `cuda:heap_smem` -> (cuda, heap_smem); an external one is
    shown by the name its Implementation gives itself, however it was reached (module:attribute or an entry
    point of another name), with no variant (its version is in the per-implementation table)."""
    if name.startswith("cuda:"):
        return "cuda", name.removeprefix("cuda:")
    if name not in names() and external.looks_external(name):
        try:
            ext = external.load(name)
        except external.NotFound:
            return name, "-"
        return ext.name, "-"
    return name, "-"


def device_label(impl: str, arch: str | None, gpu_marked: bool) -> str:
    if arch:
        return f"compile-only {arch}"
    if gpu_marked or (impl != "-" and on_gpu(impl)):
        p = device.probe()
        return f"{p.name} {p.arch}" if p.ok else "gpu (absent)"
    return "cpu"

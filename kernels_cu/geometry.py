"""Kernel launch geometry, read from the kernels' own headers (kernels_cu/<op>.cuh).

The headers hold the geometry as host+device constexpr functions: NVRTC and nvcc compile them into the
kernels and the engine, and here the same headers are compiled into one small host library
(kernels_cu/geometry_host.cpp, with the C++ compiler `$CXX`, default `c++`) that Python calls through ctypes,
so no launch formula is restated in Python and the geometry is known without a GPU. The library is cached
next to the cubins, keyed by the sources and the compiler, and written atomically (xdist workers may build
it at once). Each kernel module also has a geometry query kernel that evaluates the same functions on the
GPU; conformance/test_kernels_build.py and meta/test_kernel_geometry.py check that both agree.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

from . import runtime
from .specs import KernelSpec

HERE = pathlib.Path(__file__).resolve().parent


class GeometryError(RuntimeError):
    """The geometry library could not be built (no C++ compiler, or the header does not compile)."""


def _compiler() -> str:
    cxx = os.environ.get("CXX") or "c++"
    path = shutil.which(cxx)
    if path is None:
        raise GeometryError(f"no C++ compiler '{cxx}' on PATH (set CXX): the launch geometry is built from its header")
    return path


SOURCES = (
    "geometry_host.cpp",
    "arch_limits.cuh",
    "common.cuh",
    "contract_limits.cuh",
    "tree_build.cuh",
    "tree_build_variants.cuh",
    "tree_accept.cuh",
    "tree_verify.cuh",
    "draft_topk.cuh",
)


@functools.cache
def _library() -> ctypes.CDLL:
    cxx = _compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    parts = [(HERE / f).read_text() for f in SOURCES] + [cxx, version]
    key = hashlib.sha256(b"\0".join(x.encode() for x in parts))
    path = runtime.cache_dir() / f"geometry-{key.hexdigest()[:24]}.so"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".so")
        os.close(fd)
        try:
            cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", f"-I{HERE}", str(HERE / SOURCES[0]), "-o", tmp]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise GeometryError(f"building the geometry library failed:\n{' '.join(cmd)}\n{r.stderr}")
            os.replace(tmp, path)
        finally:
            pathlib.Path(tmp).unlink(missing_ok=True)
    lib = ctypes.CDLL(str(path))
    i64p = ctypes.POINTER(ctypes.c_longlong)
    i32p = ctypes.POINTER(ctypes.c_int)
    lib.geom_tree_build_variant_name.restype = ctypes.c_char_p
    lib.geom_tree_build_variant_name.argtypes = [ctypes.c_int]
    lib.geom_tree_build_variant_count.restype = ctypes.c_int
    lib.geom_tree_build_policy.restype = None
    lib.geom_tree_build_policy.argtypes = [ctypes.c_int, i32p]
    lib.geom_tree_build_launch.restype = None
    lib.geom_tree_build_launch.argtypes = (
        [i32p] + [ctypes.c_int] * 5 + [ctypes.c_longlong] + [ctypes.c_int] * 3 + [i64p]
    )
    lib.geom_tree_build_geometry.restype = None
    lib.geom_tree_build_geometry.argtypes = [ctypes.c_int] * 3 + [ctypes.c_longlong] + [ctypes.c_int] * 3 + [i64p]
    lib.geom_arch_limit_names.restype = ctypes.c_char_p
    lib.geom_arch_limit_count.restype = ctypes.c_int
    lib.geom_arch_limits_row.restype = None
    lib.geom_arch_limits_row.argtypes = [ctypes.c_int, i64p]
    lib.geom_smem_budget_for.restype = ctypes.c_longlong
    lib.geom_smem_budget_for.argtypes = [ctypes.c_longlong, ctypes.c_int]
    lib.geom_tree_build_smem_max.restype = None
    lib.geom_tree_build_smem_max.argtypes = [ctypes.c_longlong] + [ctypes.c_int] * 3 + [i64p]
    lib.geom_tree_accept_smem.restype = ctypes.c_longlong
    lib.geom_tree_accept_smem.argtypes = [ctypes.c_int]
    lib.tv_geometry_field_names.restype = ctypes.c_char_p
    lib.tv_geometry_field_count.restype = ctypes.c_int
    lib.tv_sm90a_serves.restype = ctypes.c_int
    lib.tv_sm90a_serves.argtypes = [ctypes.c_int, ctypes.c_longlong]
    lib.tv_geometry_fields.restype = None
    lib.tv_geometry_fields.argtypes = (
        [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int] + [ctypes.c_longlong] * 2 + [i64p]
    )
    lib.tv_unbounded_budget.restype = ctypes.c_longlong
    lib.tv_planned_schedule.restype = None
    lib.tv_planned_schedule.argtypes = [i64p, ctypes.c_int, ctypes.c_longlong, ctypes.c_int, ctypes.c_longlong, i64p,
                                        i64p, i32p, i64p]  # fmt: skip
    lib.tv_planned_bounds.restype = None
    lib.tv_planned_bounds.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int, ctypes.c_longlong, i64p]
    lib.geom_draft_topk_geometry.restype = None
    lib.geom_draft_topk_geometry.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, i64p]
    return lib


def compute_capability(arch: str) -> int:
    """sm_90 / sm_90a / sm_120 -> 90 / 90 / 120 (an arch-specific target has its base arch's limits)."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if m is None:
        raise ValueError(f"arch: {arch!r} is not an sm_XX architecture")
    return int(m.group(1))


@functools.cache
def arch_limits(arch: str) -> dict[str, int]:
    """The row of kernels_cu/arch_limits.cuh for `arch`: per-block and per-SM shared memory, registers and threads
    (GeometryError when the table has no row for it)."""
    lib = _library()
    names = lib.geom_arch_limit_names().decode().split()
    if len(names) != lib.geom_arch_limit_count():
        raise GeometryError(f"arch limits: {len(names)} names for {lib.geom_arch_limit_count()} fields")
    out = (ctypes.c_longlong * len(names))()
    lib.geom_arch_limits_row(compute_capability(arch), out)
    row = dict(zip(names, (int(x) for x in out)))
    if row["cc"] == 0:
        raise GeometryError(f"kernels_cu/arch_limits.cuh has no limits for {arch}")
    return row


def spec_smem_budget(spec: KernelSpec) -> int:
    """A build spec's own shared-memory budget in bytes (its KERNEL_SMEM_BUDGET define), 0 when it names none."""
    return int(spec.all_defines().get("KERNEL_SMEM_BUDGET", "0"))


@functools.cache
def smem_budget(spec: KernelSpec, arch: str) -> int:
    """The shared memory per block that `spec`'s build for `arch` plans for, as its kernels compute it
    (arch_limits.cuh's kernel_smem_budget): the arch's opt-in limit, or the spec's own budget where smaller."""
    arch_limits(arch)  # a clear error for an arch the table lacks
    return int(_library().geom_smem_budget_for(spec_smem_budget(spec), compute_capability(arch)))


@functools.cache
def tree_build_smem_max(smem_limit: int, stage_policy: int, select_policy: int, race: int) -> tuple[int, int, int, int]:
    """(bytes, B, L, K): the most dynamic shared memory a tree_build variant with these policies asks for at any
    budget, depth and top-k of the contract under the per-block limit smem_limit, and the first shape asking it."""
    out = (ctypes.c_longlong * 4)()
    _library().geom_tree_build_smem_max(smem_limit, stage_policy, select_policy, race, out)
    return int(out[0]), int(out[1]), int(out[2]), int(out[3])


@functools.cache
def tree_build(
    B: int, L: int, K_in: int, smem_limit: int, stage_policy: int, select_policy: int = 0, race: int = 0
) -> tuple[int, int, int]:
    """(dynamic shared memory bytes, lp_in_smem, select_cap) of tree_build for a variant's layout policies (its type's
    stage_lp and select_cap, and whether it races: tree_build_ops.policies)."""
    out = (ctypes.c_longlong * 3)()
    _library().geom_tree_build_geometry(B, L, K_in, smem_limit, stage_policy, select_policy, race, out)
    return int(out[0]), int(out[1]), int(out[2])


# The policy fields of a tree_build variant type (tb::Policy in kernels_cu/tree_build_variants.cuh), in order.
TREE_BUILD_POLICY = ("strategy", "stage_lp", "select_cap", "race_min_b", "hand_off")
# tb::Strategy
TREE_BUILD_STRATEGIES = ("heap_pop", "lane_pop", "level_select", "warp_select", "race")


@functools.cache
def tree_build_variants() -> tuple[str, ...]:
    """The tree_build variant types of tree_build_variants.cuh, in the order of its table (tb::VariantId)."""
    lib = _library()
    return tuple(lib.geom_tree_build_variant_name(i).decode() for i in range(lib.geom_tree_build_variant_count()))


def tree_build_policy(variant: str) -> dict[str, int]:
    """The policy of the tree_build variant type `variant` (TREE_BUILD_POLICY fields), from the header's table."""
    names = tree_build_variants()
    if variant not in names:
        raise KeyError(f"no tree_build variant type {variant!r} in tree_build_variants.cuh (have: {', '.join(names)})")
    out = (ctypes.c_int * len(TREE_BUILD_POLICY))()
    _library().geom_tree_build_policy(names.index(variant), out)
    return dict(zip(TREE_BUILD_POLICY, (int(x) for x in out)))


def tree_build_launch(
    variant: str,
    policy: dict[str, int],
    bs: int,
    B: int,
    L: int,
    K_in: int,
    smem_limit: int,
    sm_count: int,
    race_min_b: int | None = None,
    select_min_b: int = 0,
) -> dict:
    """tree_build's one launch rule (tree_build_launch in tree_build.cuh) for a launch of `variant` (its type's
    policy, or a design build's): {variant: the type whose build runs it (a race's hand-off where it does not race),
    lp_in_smem, select_cap, smem: dynamic shared memory bytes, selects: whether it selects at all}. race_min_b: the
    knob (None: the type's own); select_min_b: the build's TB_SELECT_MIN_B."""
    names = tree_build_variants()
    pol = (ctypes.c_int * len(TREE_BUILD_POLICY))(*(policy[k] for k in TREE_BUILD_POLICY))
    out = (ctypes.c_longlong * 5)()
    mb = -1 if race_min_b is None else race_min_b
    _library().geom_tree_build_launch(pol, names.index(variant), bs, B, L, K_in, smem_limit, sm_count, mb,
                                      select_min_b, out)  # fmt: skip
    return {"variant": names[out[0]], "lp_in_smem": int(out[1]), "select_cap": int(out[2]), "smem": int(out[3]),
            "selects": bool(out[4])}  # fmt: skip


@functools.cache
def tree_accept(D: int) -> int:
    """Dynamic shared memory bytes of tree_accept for tree width D."""
    return int(_library().geom_tree_accept_smem(D))


@functools.cache
def tree_verify_fields() -> tuple[str, ...]:
    lib = _library()
    names = tuple(lib.tv_geometry_field_names().decode().split())
    if len(names) != lib.tv_geometry_field_count():
        raise GeometryError(f"tree_verify geometry: {len(names)} names for {lib.tv_geometry_field_count()} fields")
    return names


@functools.cache
def unbounded_budget() -> int:
    """A shared-memory budget every tile fits (tree_verify.cuh's kUnbounded): the tuned tiles."""
    return int(_library().tv_unbounded_budget())


@functools.cache
def tree_verify(n_keys: int, rows: int, variant: int, chunk: int = 0, *, budget: int) -> dict[str, int]:
    """The header's geometry for one request: n_keys = prefix_len + Q, rows = Q·H, variant (the values of
    `variant_bf16` / `variant_f32`), chunk = an explicit split chunk in keys (<= 0: the default rule), budget =
    the build's shared-memory budget (smem_budget(...): it picks the portable kernel's tile)."""
    names = tree_verify_fields()
    out = (ctypes.c_longlong * len(names))()
    _library().tv_geometry_fields(int(n_keys), int(rows), int(variant), int(chunk), int(budget), out)
    return dict(zip(names, (int(x) for x in out)))


def tree_verify_planned_bounds(bs: int, rows: int, variant: int, ctas: int) -> tuple[int, int]:
    """The planned schedule's bounds for any batch of bs requests with Q·H = rows on `ctas` CTAs a wave: (the grid,
    in units, the partial slots)."""
    out = (ctypes.c_longlong * 2)()
    _library().tv_planned_bounds(int(bs), int(rows), int(variant), int(ctas), out)
    return int(out[0]), int(out[1])


def tree_verify_schedule(n_keys, rows: int, variant: int, ctas: int) -> dict:
    """tree_verify's planned schedule (tree_verify.cuh) for a batch whose requests have n_keys keys (prefix + Q) and
    Q·H = rows, on `ctas` CTAs a wave: {"chunk", "first" (int64 [bs]: each request's chunk and first partial slot),
    "units" (int32: the unit table, its count first), "target", "slots", "most"}."""
    import numpy as np

    bs = len(n_keys)
    keys = np.ascontiguousarray(n_keys, np.int64)
    chunk, first = np.zeros(bs, np.int64), np.zeros(bs, np.int64)
    units = np.zeros(1 + 3 * tree_verify_planned_bounds(bs, rows, variant, ctas)[0], np.int32)
    out = (ctypes.c_longlong * 4)()
    i64 = ctypes.POINTER(ctypes.c_longlong)
    _library().tv_planned_schedule(
        keys.ctypes.data_as(i64), bs, int(rows), int(variant), int(ctas), chunk.ctypes.data_as(i64),
        first.ctypes.data_as(i64), units.ctypes.data_as(ctypes.POINTER(ctypes.c_int)), out,
    )  # fmt: skip
    n = int(out[1])
    return {"chunk": chunk, "first": first, "units": units[: 1 + 3 * n], "target": int(out[0]), "slots": int(out[2]),
            "most": int(out[3])}  # fmt: skip


@functools.cache
def tree_verify_sm90a_serves(bf16: bool, page_size: int) -> bool:
    """Whether the sm90a kernel serves a call of this dtype and page size (the header's tv::sm90a_serves)."""
    return bool(_library().tv_sm90a_serves(int(bf16), int(page_size)))


def tree_verify_variant(kernel: str) -> int:
    """Variant id of the header for the portable kernel's 'bf16' or 'fp32' path, or the 'sm90a' kernel."""
    g = tree_verify(1, 1, 0, budget=unbounded_budget())
    return g[{"bf16": "variant_bf16", "sm90a": "variant_sm90a"}.get(kernel, "variant_f32")]


DRAFT_TOPK_FIELDS = ("splits", "kept", "workspace_bytes", "smem_bytes", "chunk", "threads")


@functools.cache
def draft_topk(V: int, K: int, rows: int) -> dict[str, int]:
    """The header's geometry of a draft_topk call on `rows` rows of V logits keeping K (draft_topk.cuh): splits per
    row (1: one block per row), candidates kept per split, workspace bytes, dynamic shared memory of the kernels
    that write a row, tokens per split and threads per block."""
    out = (ctypes.c_longlong * len(DRAFT_TOPK_FIELDS))()
    _library().geom_draft_topk_geometry(int(V), int(K), int(rows), out)
    return dict(zip(DRAFT_TOPK_FIELDS, (int(x) for x in out)))

"""Compile kernel build specs (kernels_cu/specs.py) with NVRTC through cuda.core, and load them.

- `compile_kernel(spec, arch)` works without a GPU (compile-only checks in CI): cubin for the named arch,
  with the ptxas `-v` report parsed into registers / shared memory / stack / spills per entry function.
- Results are memoized in-process and cached on disk, keyed by the source (patches applied) and every
  header it includes, the defines and options, the NVRTC version and the arch. Entries are written to a
  temporary file and renamed into place, so concurrent workers (pytest-xdist) never see a torn entry.
  We keep our own cache rather than cuda.core's program cache because we also need the ptxas log next to
  the cubin, and cuda.core 1.2.0 (the GPU image) may not have that cache.
- `load(spec)` loads the cubin for the current GPU (never PTX: driver 580 cannot JIT newer PTX ISAs);
  `geometry(spec, *args)` runs the spec's geometry query kernel (launch geometry evaluated by the same
  constexpr header functions the kernel uses). Only call these after `cuda_env.probe()` succeeded:
  cuda.core's driver APIs hang after a failed get_kernel() when no driver is present.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
import pathlib
import re
import tempfile
from typing import Any

import numpy as np

from . import cuda_env
from .specs import KernelSpec

SCHEMA = 2
HERE = pathlib.Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_FUNC = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(
    r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes cumulative stack size)?(?:, (\d+) bytes smem)?"
)


class CompileError(RuntimeError):
    """NVRTC rejected a kernel; the message carries the full compiler log."""


@dataclasses.dataclass(frozen=True)
class Compiled:
    spec: KernelSpec
    arch: str
    cubin: bytes
    log: str
    resources: dict  # entry function -> {registers, smem, stack, spill_stores, spill_loads}
    cached: bool


def source_with_headers(spec: KernelSpec) -> tuple[str, dict[str, str]]:
    """The spec's source and every local header it transitively includes (names relative to kernels_cu/), with the
    spec's patches applied: (old, new) patches the source, (old, new, header) that header (the first occurrence)."""
    path = HERE / spec.source
    if not path.is_file():
        raise FileNotFoundError(f"no kernel source {path}")
    src = path.read_text()
    headers, todo = {}, _INCLUDE.findall(src)
    while todo:
        h = todo.pop()
        if h not in headers and (HERE / h).is_file():
            headers[h] = (HERE / h).read_text()
            todo += _INCLUDE.findall(headers[h])
    for old, new, *where in spec.patches:
        name = where[0] if where else spec.source
        text = src if name == spec.source else headers.get(name)
        if text is None:
            raise ValueError(f"{spec.name}: a patch names {name}, which {spec.source} does not include")
        if old not in text:
            raise ValueError(f"{spec.name}: patch text not found in {name}: {old!r}")
        if name == spec.source:
            src = src.replace(old, new, 1)
        else:
            headers[name] = text.replace(old, new, 1)
    return src, headers


def patched_headers(spec: KernelSpec) -> list[str]:
    """The headers spec's patches change (the compile then reads every header from a patched copy)."""
    return [p[2] for p in spec.patches if len(p) > 2 and p[2] != spec.source]


@functools.cache
def include_dirs() -> tuple[str, ...]:
    import cuda.pathfinder as pf

    out = [str(HERE)]
    for name in ("cudart", "cccl"):
        loc = pf.locate_nvidia_header_directory(name)
        if loc is None:
            raise CompileError(
                f"CUDA headers '{name}' not found (install the CUDA toolkit headers or nvidia-cuda-runtime)"
            )
        out.append(loc.abs_path)
    return tuple(dict.fromkeys(out))


def program_options(spec: KernelSpec, arch: str) -> dict:
    """The one place NVRTC options are put together (the cache key hashes this dict)."""
    opts = {
        "arch": arch,
        "std": "c++17",
        "include_path": list(include_dirs()),
        "lineinfo": True,
        "ptxas_options": ["-v"],
        "define_macro": [f"{k}={v}" for k, v in spec.all_defines().items()],
        "no_cache": True,  # NVRTC >= 12.9 caches too, and a hit skips ptxas and its -v report
    }
    opts.update(dict(spec.options))
    return opts


def cache_dir() -> pathlib.Path:
    root = os.environ.get("KDTREE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kdtree-conformance"
    )
    return pathlib.Path(root) / f"v{SCHEMA}"


def cache_key(spec: KernelSpec, arch: str) -> str:
    src, headers = source_with_headers(spec)
    h = hashlib.sha256()
    for part in (
        str(SCHEMA),
        spec.name,
        spec.entry,
        cuda_env.nvrtc_version(),
        json.dumps(program_options(spec, arch), sort_keys=True),
        src,
        *(f"{k}\0{v}" for k, v in sorted(headers.items())),
    ):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def parse_resources(log: str) -> dict:
    out, current = {}, None
    for line in log.splitlines():
        m = _FUNC.search(line)
        if m:
            current = m.group(1)
            out[current] = {"registers": None, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            continue
        if current is None:
            continue
        m = _FRAME.search(line)
        if m:
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        m = _USED.search(line)
        if m:
            out[current]["registers"] = int(m.group(1))
            out[current]["smem"] = int(m.group(3) or 0)
    return out


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _read_cache(key: str):
    d = cache_dir()
    meta, blob = d / f"{key}.json", d / f"{key}.cubin"
    try:
        info = json.loads(meta.read_text())
        cubin = blob.read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(cubin).hexdigest() != info.get("cubin_sha256"):
        return None  # a half-replaced pair from another process: recompile
    return cubin, info["log"]


def _nvrtc(spec: KernelSpec, arch: str) -> tuple[bytes, str]:
    from cuda.core import Program, ProgramOptions

    src, headers = source_with_headers(spec)
    options = program_options(spec, arch)
    log = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="kdtree-patched-") as tmp:
        if patched_headers(spec):  # a patched header: NVRTC reads every local header from a patched copy
            for name, text in headers.items():
                (pathlib.Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                (pathlib.Path(tmp) / name).write_text(text)
            options["include_path"] = [tmp, *(d for d in options["include_path"] if d != str(HERE))]
        opts = ProgramOptions(**options, name=spec.source)
        try:
            obj = Program(src, "c++", options=opts).compile("cubin", logs=log)
        except Exception as e:  # cuda.core raises its own types; keep NVRTC's log for the user
            raise CompileError(
                f"NVRTC failed on {spec.name} (kernels_cu/{spec.source}) for {arch}:\n{log.getvalue()}\n{e}"
            ) from e
    if not obj.code:
        raise CompileError(f"NVRTC produced an empty cubin for {spec.name} ({arch}); is '{arch}' a real sm_ arch?")
    return bytes(obj.code), log.getvalue()


@functools.cache
def compile_kernel(spec: KernelSpec, arch: str) -> Compiled:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"arch: {arch!r} is not an sm_XX architecture (PTX targets are not loaded)")
    key = cache_key(spec, arch)
    use_cache = not os.environ.get("KDTREE_DISABLE_CACHE")
    hit = _read_cache(key) if use_cache else None
    if hit is not None:
        cubin, log = hit
    else:
        cubin, log = _nvrtc(spec, arch)
        if use_cache:
            d = cache_dir()
            _atomic_write(d / f"{key}.cubin", cubin)
            meta = {"spec": spec.name, "arch": arch, "log": log, "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
            _atomic_write(d / f"{key}.json", json.dumps(meta).encode())
    return Compiled(spec, arch, cubin, log, parse_resources(log), hit is not None)


@dataclasses.dataclass
class Gpu:
    device: Any  # cuda.core Device (imported lazily: no driver calls before the probe)
    stream: Any
    arch: str


@functools.cache
def gpu() -> Gpu:
    p = cuda_env.probe()
    if not p.ok:
        raise RuntimeError(f"GPU unavailable: {p.reason}")
    from cuda.bindings import driver
    from cuda.core import Device

    # Make the primary context current first: cuda.core's Device() otherwise probes cuCtxGetDevice with no
    # context, which compute-sanitizer reports as an API error (CUDA_ERROR_INVALID_CONTEXT).
    err, cu_dev = driver.cuDeviceGet(0)
    if err == driver.CUresult.CUDA_SUCCESS:
        err, ctx = driver.cuDevicePrimaryCtxRetain(cu_dev)
        if err == driver.CUresult.CUDA_SUCCESS:
            driver.cuCtxSetCurrent(ctx)
    dev = Device()
    dev.set_current()
    return Gpu(dev, dev.create_stream(), f"sm_{dev.arch}")


def build_arch(spec: KernelSpec, gpu_arch: str) -> str:
    """The arch to compile `spec` for on a GPU of `gpu_arch` (an sm_90a spec builds sm_90a on sm_90)."""
    for a in spec.archs:
        if a == gpu_arch or (a.endswith("a") and a[:-1] == gpu_arch):
            return a
    return gpu_arch  # a portable spec on an arch it is not compile-checked for: still build for the GPU


@functools.cache
def _module(spec: KernelSpec):
    """The loaded cubin of `spec` for the current GPU (kept alive for its kernels)."""
    from cuda.core import ObjectCode

    return ObjectCode.from_cubin(compile_kernel(spec, build_arch(spec, gpu().arch)).cubin)


_smem_limit: dict[tuple[KernelSpec, str], int] = {}


@functools.cache
def _kernel(spec: KernelSpec, entry: str):
    return _module(spec).get_kernel(entry)


def load(spec: KernelSpec, dynamic_smem: int = 0, entry: str | None = None):
    """The spec's kernel `entry` (default: its main entry), with its dynamic shared-memory limit raised to
    `dynamic_smem` when needed."""
    entry = entry or spec.entry
    kernel = _kernel(spec, entry)
    if dynamic_smem > max(48 * 1024, _smem_limit.get((spec, entry), 0)):
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        h = kernel.handle
        if isinstance(h, driver.CUkernel):
            (err,) = driver.cuKernelSetAttribute(attr, dynamic_smem, h, int(gpu().device.device_id))
        else:
            (err,) = driver.cuFuncSetAttribute(h, attr, dynamic_smem)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(
                f"cannot raise {spec.name} {entry}'s dynamic shared memory to {dynamic_smem} bytes: {err.name}"
            )
        _smem_limit[(spec, entry)] = dynamic_smem
    return kernel


def smem_optin_limit() -> int:
    """The device's per-block shared-memory limit (opt-in: static and dynamic together)."""
    return int(gpu().device.properties.max_shared_memory_per_block_optin)


def sm_count() -> int:
    """The device's number of SMs (a race build's launch depends on it)."""
    return int(gpu().device.properties.multiprocessor_count)


@functools.cache
def geometry(spec: KernelSpec, args: tuple, n_out: int) -> tuple[int, ...]:
    """Run the spec's geometry query kernel with `args` (numpy scalars typed as its parameters) and read
    `n_out` int64 results back. Memoized per (spec, args): a shape's geometry costs one tiny launch, once."""
    from cuda.core import LaunchConfig, launch

    g = gpu()
    kernel = _module(spec).get_kernel(spec.geometry)
    buf = g.device.memory_resource.allocate(8 * n_out, stream=g.stream)
    try:
        launch(g.stream, LaunchConfig(grid=1, block=1), kernel, *args, int(buf.handle))
        out = np.empty(n_out, np.int64)
        from cuda.bindings import driver

        (err,) = driver.cuMemcpyDtoHAsync(out.ctypes.data, int(buf.handle), out.nbytes, g.stream.handle)
        g.stream.sync()
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"geometry query of {spec.name} failed: {err.name}")
        return tuple(int(x) for x in out)
    finally:
        buf.close(g.stream)


def driver_result(res):
    """A cuda.bindings driver call's result: RuntimeError naming its error, else the value it returns (a tuple of
    several, None for none)."""
    from cuda.bindings import driver

    err, *rest = res if isinstance(res, tuple) else (res,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def capture_graph(stream, calls) -> tuple:
    """The enqueue-only callables `calls`, captured in order from `stream` into a CUDA graph: (graph, its
    executable); RuntimeError naming what failed when a call does something a capture refuses (it allocates or
    synchronises). The caller destroys both (destroy_graph)."""
    from cuda.bindings import driver

    ok = driver_result
    ok(driver.cuStreamBeginCapture(stream.handle, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    failed = None
    try:
        for f in calls:
            f()
    except Exception as e:  # the launch did something a capture refuses: end the capture, report it
        failed = e
    finally:
        graph = ok(driver.cuStreamEndCapture(stream.handle))
    if failed is not None:
        if graph is not None:
            ok(driver.cuGraphDestroy(graph))
        raise RuntimeError(f"{type(failed).__name__}: {failed}")
    return graph, ok(driver.cuGraphInstantiate(graph, 0))


def destroy_graph(graph, exe) -> None:
    """Free what capture_graph made."""
    from cuda.bindings import driver

    driver_result(driver.cuGraphExecDestroy(exe))
    driver_result(driver.cuGraphDestroy(graph))

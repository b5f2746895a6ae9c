"""Compile kernels_cu/<op>.cu with NVRTC (through cuda.core) and load them.

- `compile_kernel(slug, arch)` works without a GPU (compile-only checks in CI): cubin for the named arch,
  with the ptxas `-v` report parsed into registers / shared memory / stack / spills per entry function.
- Results are memoized in-process and cached on disk, keyed by the source and every header it includes,
  the options, the NVRTC version and the arch. Entries are written to a temporary file and renamed into
  place, so concurrent workers (pytest-xdist) never see a torn entry; identical keys give identical bytes.
  We keep our own cache rather than cuda.core's FileStreamProgramCache because we also need the ptxas log
  next to the cubin, and cuda.core 1.2.0 (the GPU image) may not have that cache.
- `load(slug)` loads the cubin for the current GPU (never PTX: driver 580 cannot JIT newer PTX ISAs).
  Only call it after harness.device.probe() succeeded: cuda.core's driver APIs hang after a failed
  get_kernel() when no driver is present.
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

SCHEMA = 1
HERE = pathlib.Path(__file__).resolve().parent
ARCHS = ("sm_90", "sm_120")
ENTRY = {"tree_build": "tree_build_kernel", "tree_accept": "tree_accept_kernel"}
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
    slug: str
    arch: str
    cubin: bytes
    log: str
    resources: dict  # entry function -> {registers, smem, stack, spill_stores, spill_loads}
    cached: bool


def source_with_headers(slug: str) -> tuple[str, dict[str, str]]:
    """The op's source and every local header it (transitively) includes."""
    path = HERE / f"{slug}.cu"
    if not path.is_file():
        raise FileNotFoundError(f"no kernel source {path}")
    src = path.read_text()
    if os.environ.get("KDTR_KERNEL_MUTANT"):  # meta tests only: a deliberately broken kernel
        from harness.kernel_mutants import apply

        src = apply(slug, src, os.environ["KDTR_KERNEL_MUTANT"])
    headers, todo = {}, _INCLUDE.findall(src)
    while todo:
        h = todo.pop()
        if h not in headers and (HERE / h).is_file():
            headers[h] = (HERE / h).read_text()
            todo += _INCLUDE.findall(headers[h])
    return src, headers


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


def program_options(arch: str) -> dict:
    """The one place the NVRTC options are stated (the cache key hashes this dict).
    No fast math and no contraction: tree_build's float64 scores follow the reference's operation order."""
    return {
        "arch": arch,
        "std": "c++17",
        "include_path": list(include_dirs()),
        "lineinfo": True,
        "ptxas_options": ["-v"],
        "fma": False,
        "no_cache": True,
    }  # NVRTC >= 12.9 caches too, and a hit skips ptxas and its -v report


def cache_dir() -> pathlib.Path:
    root = os.environ.get("KDTR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kdtree-conformance"
    )
    return pathlib.Path(root) / f"v{SCHEMA}"


def cache_key(slug: str, arch: str) -> str:
    from harness.device import nvrtc_version

    src, headers = source_with_headers(slug)
    h = hashlib.sha256()
    for part in (
        str(SCHEMA),
        slug,
        nvrtc_version(),
        json.dumps(program_options(arch), sort_keys=True),
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


def _nvrtc(slug: str, arch: str) -> tuple[bytes, str]:
    from cuda.core import Program, ProgramOptions

    src, _ = source_with_headers(slug)
    opts = ProgramOptions(**program_options(arch), name=f"{slug}.cu")
    log = io.StringIO()
    try:
        obj = Program(src, "c++", options=opts).compile("cubin", logs=log)
    except Exception as e:  # cuda.core raises its own types; keep NVRTC's log for the user
        raise CompileError(f"NVRTC failed on kernels_cu/{slug}.cu for {arch}:\n{log.getvalue()}\n{e}") from e
    if not obj.code:
        raise CompileError(f"NVRTC produced an empty cubin for {slug} ({arch}); is '{arch}' a real sm_ arch?")
    return bytes(obj.code), log.getvalue()


@functools.cache
def compile_kernel(slug: str, arch: str) -> Compiled:
    if not re.fullmatch(r"sm_\d+[af]?", arch):
        raise ValueError(f"arch: {arch!r} is not an sm_XX architecture (PTX targets are not loaded)")
    key = cache_key(slug, arch)
    use_cache = not os.environ.get("KDTR_DISABLE_CACHE")
    hit = _read_cache(key) if use_cache else None
    if hit is not None:
        cubin, log = hit
    else:
        cubin, log = _nvrtc(slug, arch)
        if use_cache:
            d = cache_dir()
            _atomic_write(d / f"{key}.cubin", cubin)
            _atomic_write(
                d / f"{key}.json",
                json.dumps(
                    {"slug": slug, "arch": arch, "log": log, "cubin_sha256": hashlib.sha256(cubin).hexdigest()}
                ).encode(),
            )
    return Compiled(slug, arch, cubin, log, parse_resources(log), hit is not None)


@dataclasses.dataclass
class Gpu:
    device: object
    stream: object
    arch: str


@functools.cache
def gpu() -> Gpu:
    from harness.device import probe

    p = probe()
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


@functools.cache
def _object(slug: str):
    """The loaded cubin of `slug` for the current GPU (cached: kernels keep it alive)."""
    from cuda.core import ObjectCode

    return ObjectCode.from_cubin(compile_kernel(slug, gpu().arch).cubin)


@functools.cache
def _kernel(slug: str, entry: str):
    return _object(slug).get_kernel(entry)


_smem_limit: dict[tuple[str, str], int] = {}


def load(slug: str, dynamic_smem: int = 0, entry: str | None = None):
    """The kernel `entry` (default: the op's main entry) of `slug`, with its dynamic shared-memory limit raised
    to `dynamic_smem` when needed."""
    entry = entry or ENTRY[slug]
    kernel = _kernel(slug, entry)
    key = (slug, entry)
    if dynamic_smem > max(48 * 1024, _smem_limit.get(key, 0)):
        from cuda.bindings import driver

        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        h = kernel.handle
        if isinstance(h, driver.CUkernel):
            (err,) = driver.cuKernelSetAttribute(attr, dynamic_smem, h, int(gpu().device.device_id))
        else:
            (err,) = driver.cuFuncSetAttribute(h, attr, dynamic_smem)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(
                f"cannot raise {slug}:{entry}'s dynamic shared memory to {dynamic_smem} bytes: {err.name}"
            )
        _smem_limit[key] = dynamic_smem
    return kernel

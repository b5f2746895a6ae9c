"""GPU probe and environment facts, without touching cuda.core's driver-backed APIs.

cuda.core 1.2 hangs in `Device()` after a failed `get_kernel()` when no driver is present, so the probe
calls `cuInit` once through cuda.bindings inside a narrow except, and callers never use cuda.core's
driver APIs when it failed (notes: toolchain §2.5).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import os
import subprocess


@dataclasses.dataclass(frozen=True)
class Probe:
    ok: bool
    reason: str
    name: str = ""
    arch: str = ""  # "sm_90"
    driver: str = ""  # driver API version, "13.0"
    count: int = 0


@functools.cache
def probe() -> Probe:
    try:
        from cuda.bindings import driver
    except ImportError as e:
        return Probe(False, f"cuda-bindings not installed ({e})")
    try:
        (err,) = driver.cuInit(0)
    except RuntimeError as e:  # no libcuda: RuntimeError or DynamicLibNotFoundError (a RuntimeError)
        return Probe(False, f"no CUDA driver ({type(e).__name__}: {e})")
    if err != driver.CUresult.CUDA_SUCCESS:
        return Probe(False, f"cuInit failed: {err.name}")
    err, n = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or n == 0:
        return Probe(False, "no CUDA device visible")
    _, dev = driver.cuDeviceGet(0)
    _, raw = driver.cuDeviceGetName(256, dev)
    A = driver.CUdevice_attribute
    _, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
    _, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
    _, ver = driver.cuDriverGetVersion()
    name = raw.split(b"\0", 1)[0].decode()
    return Probe(True, f"{n} device(s): {name}", name, f"sm_{major}{minor}", f"{ver // 1000}.{ver % 1000 // 10}", n)


@functools.cache
def nvrtc_version() -> str:
    try:
        from cuda.bindings import nvrtc

        _err, major, minor = nvrtc.nvrtcVersion()
        return f"{major}.{minor}"
    except Exception as e:
        return f"unavailable ({type(e).__name__})"


def nvrtc_available() -> tuple[bool, str]:
    v = nvrtc_version()
    return (not v.startswith("unavailable"), v)


def driver_version_string() -> str:
    """The kernel-mode driver version from nvidia-smi when present (e.g. 580.159.03)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        return ""


def package_versions() -> dict[str, str]:
    out = {}
    for p in (
        "numpy",
        "ml_dtypes",
        "hypothesis",
        "pytest",
        "pytest-xdist",
        "pytest-benchmark",
        "cuda-bindings",
        "cuda-core",
        "cuda-pathfinder",
        "nvidia-cuda-nvrtc",
        "torch",
        "nvidia-cublas",
        "cupy-cuda13x",
        "matplotlib",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[p] = importlib.metadata.version(p)
    return out


def git_revision(root: str) -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        if rev:
            return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return os.environ.get("GIT_REVISION", "unknown")  # a copy without .git (a GPU runner's work tree)


def visible_gpu_ids() -> list[str]:
    """The GPUs this process may use, found without initialising CUDA (which would pin the process):
    KDTR_GPUS (comma list) or CUDA_VISIBLE_DEVICES when set, else one id per `nvidia-smi -L` line."""
    for var in ("KDTR_GPUS", "CUDA_VISIBLE_DEVICES"):
        if os.environ.get(var) is not None:
            return [x.strip() for x in os.environ[var].split(",") if x.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(out.stdout.splitlines()) if line.startswith("GPU ")]

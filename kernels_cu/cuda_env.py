"""The CUDA facts the kernels layer needs, found without touching cuda.core's driver-backed APIs.

cuda.core 1.2 hangs in `Device()` after a failed `get_kernel()` when no driver is present, so `probe()`
calls `cuInit` once through cuda.bindings inside a narrow except; callers never use cuda.core's driver
APIs when it failed.
"""

from __future__ import annotations

import dataclasses
import functools


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

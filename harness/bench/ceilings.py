"""The ceilings each GPU case is set against, measured on this device in this run (once per process).

- copy rate: kernels_cu/copy_ceiling.cu's copy kernel over COPY_BYTES (source and destination each),
  counting bytes read plus bytes written. cuMemcpyDtoD is measured beside it for the record only: on the
  H200 it reaches about a third less than a copy kernel, so it is not the memory roofline.
- read rate: the same file's read kernel over the same COPY_BYTES source (16-byte streaming loads,
  READ_BLOCKS_PER_SM blocks per SM, an XOR of every word written per block and checked on the host),
  counting bytes read: what a kernel that streams its inputs in and writes little (MLA decode) can reach.
  Memory-bound fractions are taken against it (`fraction.read`), and against the copy rate as before.
- bf16 matrix rate: torch.matmul (cuBLAS) of MATMUL_N × MATMUL_N bf16 matrices of random normal values
  (not zeros, which run faster), 2·n³ FLOPs per product.
"""

from __future__ import annotations

import functools

import numpy as np

from harness import timing
from kernels_cu import specs

from . import Unavailable

COPY_BYTES = 2 << 30
MATMUL_N = 8192
_THREADS, _VECTORS = 256, 4  # copy_ceiling.cu's kThreads, kVectors
READ_BLOCKS_PER_SM = 16  # 4096 threads per SM: enough 16-byte loads in flight to saturate HBM
READ_CHECK_BYTES = 64 << 20  # the XOR is checked at this size (its numpy twin is cheap there)
_SEED = 0x9E3779B9
_results: dict[str, dict] = {}
_errors: dict[str, str] = {}


def lowbias32(i: np.ndarray, seed: int = _SEED) -> np.ndarray:
    """fill_kernel's value at 32-bit word index i (numpy twin, to check the copy)."""
    i = i.astype(np.uint64)
    x = ((i & 0xFFFFFFFF) ^ (i >> np.uint64(32)) ^ np.uint64(seed)).astype(np.uint32)
    x ^= x >> np.uint32(16)
    x = (x * np.uint32(0x7FEB352D)).astype(np.uint32)
    x ^= x >> np.uint32(15)
    x = (x * np.uint32(0x846CA68B)).astype(np.uint32)
    x ^= x >> np.uint32(16)
    return x


def copy_grid(nbytes: int) -> tuple[int, int]:
    """(vectors of 16 bytes, blocks) of one copy_kernel launch over nbytes."""
    n16 = nbytes // 16
    return n16, -(-n16 // (_THREADS * _VECTORS))


def copy_policy() -> timing.Policy:
    return timing.policy_from_env(warmup=2, min_reps=5, max_reps=50)


# The copy-ceiling kernel as a build spec of its own: a measuring tool, not a variant of an op, so it is not
# in kernels_cu.specs.SPECS (the implementation registry is built from those).
COPY_SPEC = specs.KernelSpec(
    "copy_ceiling",
    "tool",
    "16-byte vector copy and read over >= 2 GiB (the memory ceilings), and the fill that seeds them",
    "copy_ceiling.cu",
    "copy_kernel",
    "fill_kernel",
    _THREADS,
)


@functools.cache
def copy_rates(nbytes: int = COPY_BYTES) -> dict:
    """{"copy_kernel": ..., "memcpy_dtod": ..., "read_kernel": ...}, each with gbs (read + written for the
    copies, read for the read kernel) and its time summary."""
    from cuda.bindings import driver
    from cuda.core import LaunchConfig, launch

    from kernels_cu import runtime

    g = runtime.gpu()
    s = g.stream
    if nbytes % 16:
        raise ValueError(f"copy size {nbytes} is not a multiple of 16 bytes")
    src = g.device.memory_resource.allocate(nbytes, stream=s)
    dst = g.device.memory_resource.allocate(nbytes, stream=s)
    try:
        fill = runtime.load(COPY_SPEC, entry="fill_kernel")
        copy = runtime.load(COPY_SPEC, entry="copy_kernel")
        launch(s, LaunchConfig(grid=132 * 16, block=_THREADS), fill, int(src.handle), np.uint64(nbytes // 4),
               np.uint32(_SEED))  # fmt: skip
        n16, blocks = copy_grid(nbytes)

        def copy_launch():
            launch(s, LaunchConfig(grid=blocks, block=_THREADS), copy, int(src.handle), int(dst.handle), np.uint64(n16))

        copy_launch()
        _check_copy(dst, nbytes, s)
        plan = timing.L2Plan("large")
        out = {}
        samples, method = timing.device_times_us([copy_launch], plan=plan, policy=copy_policy())
        out["copy_kernel"] = _rate(samples, nbytes, f"copy_kernel, {nbytes >> 20} MiB each way; {method}")

        def memcpy_launch():
            timing._ok(driver.cuMemcpyDtoDAsync(int(dst.handle), int(src.handle), nbytes, s.handle))

        samples, method = timing.device_times_us([memcpy_launch], plan=plan, policy=copy_policy())
        out["memcpy_dtod"] = _rate(samples, nbytes, f"cuMemcpyDtoDAsync, {nbytes >> 20} MiB; {method}")
        read, blocks = runtime.load(COPY_SPEC, entry="read_kernel"), read_grid(g)
        xors = g.device.memory_resource.allocate(4 * blocks, stream=s)
        try:

            def read_launch(n=nbytes):
                launch(s, LaunchConfig(grid=blocks, block=_THREADS), read, int(src.handle), np.uint64(n // 16),
                       int(xors.handle))  # fmt: skip

            read_launch(READ_CHECK_BYTES)
            _check_read(xors, blocks, READ_CHECK_BYTES, s)
            samples, method = timing.device_times_us([read_launch], plan=plan, policy=copy_policy())
            out["read_kernel"] = _rate(samples, nbytes, f"read_kernel, {nbytes >> 20} MiB, {blocks} blocks; {method}",
                                       counted=nbytes)  # fmt: skip
        finally:
            s.sync()
            xors.close(s)
        return out
    finally:
        s.sync()
        src.close(s)
        dst.close(s)


def _check_copy(dst, nbytes: int, stream) -> None:
    """The copy must have moved the filled values: compare three 64 KiB windows with fill_kernel's twin."""
    from cuda.bindings import driver

    stream.sync()
    window = 1 << 16
    for start in (0, (nbytes // 2) & ~15, nbytes - window):
        host = np.empty(window // 4, np.uint32)
        timing._ok(driver.cuMemcpyDtoH(host.ctypes.data, int(dst.handle) + start, window))
        want = lowbias32(np.arange(start // 4, (start + window) // 4, dtype=np.uint64))
        if not np.array_equal(host, want):
            bad = int(np.flatnonzero(host != want)[0])
            raise RuntimeError(f"copy ceiling: the copy kernel moved wrong data at byte {start + 4 * bad}")


def read_grid(g) -> int:
    """Blocks of one read_kernel launch: READ_BLOCKS_PER_SM per SM of this GPU."""
    from cuda.bindings import driver

    dev = timing._ok(driver.cuDeviceGet(int(g.device.device_id)))
    attr = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    return READ_BLOCKS_PER_SM * int(timing._ok(driver.cuDeviceGetAttribute(attr, dev)))


def read_xor(nbytes: int) -> int:
    """The XOR of every 32-bit word fill_kernel writes into the first nbytes (the read kernel's answer)."""
    return int(np.bitwise_xor.reduce(lowbias32(np.arange(nbytes // 4, dtype=np.uint64))))


def _check_read(xors, blocks: int, nbytes: int, stream) -> None:
    """The read kernel must have read every word: the XOR of its per-block results against the twin's."""
    from cuda.bindings import driver

    stream.sync()
    host = np.empty(blocks, np.uint32)
    timing._ok(driver.cuMemcpyDtoH(host.ctypes.data, int(xors.handle), 4 * blocks))
    got, want = int(np.bitwise_xor.reduce(host)), read_xor(nbytes)
    if got != want:
        raise RuntimeError(f"read ceiling: the read kernel's XOR is {got:#010x}, the fill's is {want:#010x}")


def _rate(samples_us, nbytes: int, method: str, counted: int | None = None) -> dict:
    """GB/s of `counted` bytes (default: nbytes read plus nbytes written) over the median time."""
    t = timing.summary(samples_us, method=method)
    counted = 2 * nbytes if counted is None else counted
    return {"gbs": counted / (t["median_us"] * 1e-6) / 1e9, "bytes_counted": counted, "time": t}


@functools.cache
def bf16_matmul(n: int = MATMUL_N) -> dict:
    """{"tflops", "n", "time"} of torch.matmul on random bf16 n × n matrices (cuBLAS)."""
    try:
        import torch
    except ImportError as e:
        raise Unavailable(f"torch not installed ({e}): the bf16 matrix ceiling needs torch.matmul") from e
    if not torch.cuda.is_available():
        raise Unavailable("torch sees no CUDA device: the bf16 matrix ceiling needs torch.matmul on the GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    torch.matmul(a, b, out=c)
    ref = a[:128].float() @ b[:, :128].float()
    err = float((c[:128, :128].float() - ref).norm() / ref.norm())
    if not err < 1e-2:
        raise RuntimeError(f"bf16 matrix ceiling: torch.matmul is off by {err:.3g} (relative norm) on a 128 block")
    policy = timing.policy_from_env(warmup=3, min_reps=10, max_reps=100)
    samples = timing.torch_times_us(lambda: torch.matmul(a, b, out=c), flush_bytes=0, policy=policy)
    t = timing.summary(samples, method=f"torch.matmul {n}x{n}x{n} bf16, random normal inputs, events")
    return {"tflops": 2 * n**3 / (t["median_us"] * 1e-6) / 1e12, "n": n, "torch": torch.__version__, "time": t}


class Ceilings:
    """The measured ceilings for this run, measured on first use; a ceiling that cannot be measured is None
    with its reason in `unavailable`."""

    def __init__(self):
        self._done = False

    def _measure(self):
        if self._done:
            return
        self._done = True
        # a ceiling that fails is reported missing with its reason; the cases still run (fractions are None)
        try:
            _results.update(copy_rates())
        except Exception as e:
            _errors["copy_gbs"] = f"{type(e).__name__}: {e}"
        try:
            _results["bf16_matmul"] = bf16_matmul()
        except Exception as e:
            _errors["bf16_tflops"] = f"{type(e).__name__}: {e}" if not isinstance(e, Unavailable) else str(e)

    @property
    def copy_gbs(self) -> float | None:
        self._measure()
        return _results.get("copy_kernel", {}).get("gbs")

    @property
    def read_gbs(self) -> float | None:
        self._measure()
        return _results.get("read_kernel", {}).get("gbs")

    @property
    def bf16_tflops(self) -> float | None:
        self._measure()
        return _results.get("bf16_matmul", {}).get("tflops")

    def as_dict(self) -> dict:
        self._measure()
        return snapshot()


def snapshot() -> dict:
    """What this process measured so far, for the JSON (measures nothing)."""
    out = {
        "copy_gbs": _results.get("copy_kernel", {}).get("gbs"),
        "bf16_tflops": _results.get("bf16_matmul", {}).get("tflops"),
        "memcpy_dtod_gbs": _results.get("memcpy_dtod", {}).get("gbs"),
        "read_gbs": _results.get("read_kernel", {}).get("gbs"),
        "unavailable": dict(_errors),
    }
    for k, v in _results.items():
        out[f"{k}_method"] = v["time"]["method"]
    return out

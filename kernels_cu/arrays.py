"""Arrays in and out of the kernels: the caller's device arrays (cupy, torch), staging of host arrays,
and a prepared call (`Prepared`) whose launch can be timed apart from its setup.

Outputs come back in the form the inputs came in: numpy in, numpy out; cupy or torch device arrays in,
arrays of the same library on the same device out.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from contract import BF16, ArrayInfo, InputError
from contract.checks import host_array, is_device_array

from . import runtime

SUPPORTED_LIBS = ("cupy", "torch")


def _torch():
    import torch

    return torch


# torch dtypes read through a same-width integer view: {torch dtype: (the real dtype, the view's torch dtype)}
_TORCH_VIEWED = {"torch.bfloat16": (BF16, "int16"), "torch.uint32": (np.dtype(np.uint32), "int32")}


class DeviceArray:
    """A CUDA array given by the caller: pointer, shape, dtype, and the library that made it."""

    def __init__(self, obj, arg: str):
        self.obj = obj
        self.lib = type(obj).__module__.split(".")[0]
        if self.lib not in SUPPORTED_LIBS:
            raise InputError(
                f"{arg}: CUDA arrays from {self.lib} ({type(obj).__qualname__}) are not supported "
                f"(use numpy, cupy or torch)"
            )
        # torch exports neither __cuda_array_interface__ nor numpy arrays for bf16 or uint32: read them through the
        # same-width integer view and keep the real dtype
        viewed = _TORCH_VIEWED.get(str(obj.dtype)) if self.lib == "torch" else None
        self._readable = obj.view(getattr(_torch(), viewed[1])) if viewed else obj
        cai = self._readable.__cuda_array_interface__
        self.ptr = int(cai["data"][0])
        self.shape = tuple(cai["shape"])
        self.dtype = viewed[0] if viewed else np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(self.shape, self.dtype.itemsize):
            raise InputError(f"{arg}: device arrays must be C-contiguous")

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def host(self) -> np.ndarray:
        """A host copy, for validation of small index and score arrays."""
        if self.lib == "torch":
            return self._readable.detach().cpu().numpy().view(self.dtype)
        return self.obj.get()

    def info(self) -> ArrayInfo:
        """Shape and dtype alone, for arguments whose values validation does not read."""
        return ArrayInfo(self.shape, self.dtype)


def device_only(arg: str, x) -> DeviceArray:
    """A caller's CUDA array, for paths that take device arrays only (the deferred checks: device_call)."""
    if not is_device_array(x):
        raise InputError(f"{arg}: deferred checks take device arrays (cupy, torch), got {type(x).__name__}")
    return DeviceArray(x, arg)


def device_call(contract, named: dict) -> tuple[str | None, object, dict, dict]:
    """A deferred call's arguments (every array a caller's device array: InputError naming the first that is not).
    Returns (lib, an array of that library, {name: DeviceArray}, the arguments for validate_shapes(): each array's
    shape and dtype, the other arguments as given)."""
    lib, like, dev, infos = None, None, {}, {}
    for a in contract.args:
        x = named[a.name]
        if a.kind != "array" or x is None:
            infos[a.name] = x
            continue
        d = device_only(a.name, x)
        lib, like, dev[a.name], infos[a.name] = d.lib, x, d, d.info()
    return lib, like, dev, infos


class ErrorFlag:
    """A deferred call's device error word, from its `error_flag=`: None gives the call its own word, which each launch
    zeroes first; a caller's device array of one 4-byte word is shared: the call's device checks set it and never
    clear it, so calls that share it (one DDTree step, kernels_cu/step.py) see each other's refusals, and it stays set
    until the caller clears it. The argument is checked here, by name, before any GPU work."""

    def __init__(self, error_flag=None):
        self.shared = None if error_flag is None else device_only("error_flag", error_flag)
        d = self.shared
        if d is not None and (d.shape != (1,) or d.dtype.itemsize != 4 or d.dtype.kind not in "iu"):
            raise InputError(f"error_flag: shape {d.shape} dtype {d.dtype}, expected one int32 or uint32 word "
                             f"(shape (1,))")  # fmt: skip
        self.ptr = d.ptr if d is not None else 0

    def allocate(self, st: Staging) -> int:
        """The word's device address: the caller's, or the call's own from `st`'s scratch."""
        if self.shared is None:
            self.ptr = st.scratch(4)
        return self.ptr

    def clear(self, st: Staging) -> None:
        """Enqueue the zeroing of the call's own word on the launch stream, ahead of its checks (a shared word is
        left)."""
        if self.shared is None:
            check(driver().cuMemsetD32Async(self.ptr, 0, 1, launch_stream(st).handle))


def device_vector(arg: str, x, n: int | None = None) -> DeviceArray:
    """A caller's int32 [n] device array (any n when None): a step's prefix lengths and root tokens."""
    d = device_only(arg, x)
    if d.dtype != np.int32 or len(d.shape) != 1 or (n is not None and d.shape[0] != n):
        raise InputError(f"{arg}: shape {d.shape} dtype {d.dtype}, expected int32 [{'bs' if n is None else n}]"
                         + ("" if n is None else " (one per request)"))  # fmt: skip
    return d


def library_holds(arg: str, lib: str, dtype) -> None:
    """The caller's array library can hold `dtype` on the device (cupy has no bfloat16; torch before 2.3 no uint32)."""
    if dtype == BF16 and lib != "torch":
        raise InputError(f"{arg}: bfloat16 needs torch arrays ({lib} has no bfloat16)")
    if dtype == np.uint32 and lib == "torch" and not hasattr(_torch(), "uint32"):
        raise InputError(f"{arg}: torch {_torch().__version__} has no uint32 (2.3 or later holds it on the device)")


def host_copies(contract, named: dict) -> dict:
    """A deferred call's arguments for the contract's full validate(), when its device check failed: host copies of
    the arrays whose values it reads, the shape and dtype of the others (a cache is not copied)."""
    out = {}
    for a in contract.args:
        x = named[a.name]
        if a.kind == "array" and is_device_array(x):
            d = DeviceArray(x, a.name)
            x = d.host() if a.reads_values else d.info()
        out[a.name] = x
    return out


def _c_strides(shape, itemsize):
    out, acc = [], itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def split_args(contract, named: dict) -> tuple[str | None, object, dict, dict]:
    """Split a call's arguments into what validation sees (host copies of the arrays whose values it reads,
    shape-and-dtype infos of the others) and what the launch uses (device arrays or host arrays), and find
    the caller's array library. Returns (lib, an array of that library, for_validation, for_launch)."""
    lib, like, check, launch = None, None, {}, {}
    for a in contract.args:
        x = named[a.name]
        if x is not None and a.kind == "array" and is_device_array(x):
            d = DeviceArray(x, a.name)
            lib, like = d.lib, x
            launch[a.name] = d
            check[a.name] = d.host() if a.reads_values else d.info()
        else:
            if isinstance(x, ArrayInfo):  # validate() takes one for a device array's shape: a caller's has no data
                host_array(a.name, x)  # raises the contract's InputError naming the argument
            launch[a.name] = check[a.name] = x
    return lib, like, check, launch


class Staging:
    """Device buffers for one call: host inputs are copied in, outputs allocated and copied back."""

    def __init__(self, like_lib: str | None, like_obj=None):
        self.g = runtime.gpu()
        self.lib, self.like = like_lib, like_obj
        self.buffers: list = []

    def input(self, x) -> int:
        if isinstance(x, DeviceArray):
            return x.ptr
        x = np.ascontiguousarray(x)
        buf = self._alloc(max(x.nbytes, 1))
        if x.nbytes:  # stream-ordered after the (stream-ordered) allocation; pageable source is staged at once
            check(driver().cuMemcpyHtoDAsync(int(buf.handle), x.ctypes.data, x.nbytes, self.g.stream.handle))
        return int(buf.handle)

    def output(self, shape, dtype):
        """An output array of the caller's library, and its device pointer (torch: uint32 bits are held in
        int32, which torch can index; uint8 0/1 bytes in bool)."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        if self.lib == "torch":
            torch = _torch()
            tdt = {
                np.dtype(np.int32): torch.int32,
                np.dtype(np.float32): torch.float32,
                np.dtype(np.float64): torch.float64,
                np.dtype(np.float16): torch.float16,
                np.dtype(np.uint32): torch.int32,
                np.dtype(np.uint8): torch.bool,
                BF16: torch.bfloat16,
            }[dtype]
            t = torch.empty(shape, dtype=tdt, device=self.like.device)
            return t, t.data_ptr()
        if self.lib == "cupy":
            import cupy

            a = cupy.empty(shape, dtype=dtype if dtype != BF16 else np.uint16)
            return a, a.data.ptr
        buf = self._alloc(max(n, 1))
        host = np.empty(shape, dtype)
        return (host, buf), int(buf.handle)

    def result(self, out):
        if isinstance(out, tuple):
            host, buf = out
            if host.nbytes:
                check(driver().cuMemcpyDtoHAsync(host.ctypes.data, int(buf.handle), host.nbytes, self.g.stream.handle))
                self.g.stream.sync()
            return host
        return out

    def scratch(self, nbytes: int) -> int:
        """A device-only buffer (partial results), freed with the call's other buffers."""
        return int(self._alloc(max(int(nbytes), 1)).handle)

    def _alloc(self, n):
        buf = self.g.device.memory_resource.allocate(n, stream=self.g.stream)
        self.buffers.append(buf)
        return buf

    def sync_before(self):
        """Work the caller queued on its own stream (torch, cupy) must be done before our launch."""
        if self.lib == "torch":
            _torch().cuda.synchronize()
        elif self.lib == "cupy":
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    def close(self):
        """Free the call's buffers (once: a second close, a step's and then its op's say, frees nothing again)."""
        self.g.stream.sync()
        buffers, self.buffers = self.buffers, []
        for b in buffers:
            b.close(self.g.stream)
        self.g.stream.sync()


class Prepared:
    """A validated call with its device buffers: `launch()` enqueues the kernel alone (benchmarks time
    this), `results()` waits and copies the outputs back keeping the buffers, `finish()` also frees them."""

    def __init__(self, staging, launch, collect):
        self.staging, self.launch, self._collect = staging, launch, collect
        self.served_by: str | None = None  # the kernel spec that runs, where a variant hands calls to another

    def sync(self):
        self.staging.g.stream.sync()

    def results(self):
        self.sync()
        return self._collect()

    def finish(self):
        try:
            return self.results()
        finally:
            self.staging.close()


class Deferred(Prepared):
    """A prepared call whose value checks run on the device (TB.4.5, TA.4.4, TV.3.7, DT.4.5): `launch()` enqueues the
    reset of the error flag at device address `flag`, the check and the op (no host work: capturable); `check()` reads
    the flag and, when it is set, calls `revalidate()` (the contract's validate() on host copies: it raises the
    named error); `results()` and `finish()` check first."""

    def __init__(self, staging, launch, collect, flag: int, revalidate, slug: str):
        super().__init__(staging, launch, lambda: (self.check(), collect())[1])
        self._flag, self._revalidate, self._slug, self._unchecked = flag, revalidate, slug, collect

    def outputs(self):
        """The output arrays as they are on the device, without waiting or checking (device inputs give device
        outputs): the inputs of the next op of a step, enqueued behind this one on the same stream."""
        return self._unchecked()

    def validate_on_host(self):
        """The contract's validate() on host copies of the inputs as they are now: the named error where a value
        is refused (a step asks each op in turn which one set a shared flag)."""
        self._revalidate()

    def check(self):
        self.sync()
        got = np.zeros(1, np.uint32)
        check(driver().cuMemcpyDtoH(got.ctypes.data, self._flag, 4))
        if got[0]:
            self._revalidate()
            raise RuntimeError(f"{self._slug}: the device check flagged inputs that the contract accepts")


def check_aligned(arg: str, x, what: str) -> None:
    """A caller's device array must be 16-byte aligned where the kernel moves 16-byte vectors (`what`)."""
    if isinstance(x, DeviceArray) and x.ptr % 16:
        raise InputError(f"{arg}: device pointer 0x{x.ptr:x} is not 16-byte aligned ({what})")


def call_args(contract, scope: dict) -> dict:
    """An implementation's arguments by name, from its `locals()` (its parameters are the contract's)."""
    return {name: scope[name] for name in contract.arg_names}


def run(prepared: Prepared):
    """Launch a prepared call, wait, and return its results (buffers freed)."""
    prepared.launch()
    return prepared.finish()


def driver():
    from cuda.bindings import driver as d

    return d


check = runtime.driver_result  # a driver call's result: RuntimeError naming its error


# A prepared call launched on another stream over other arrays of its shapes (kdtree_torch: torch's current stream and
# each call's tensors): (stream, {address the call was prepared with: this launch's}), else None.
_ELSEWHERE: contextvars.ContextVar = contextvars.ContextVar("kdtree_launch_elsewhere", default=None)


@contextlib.contextmanager
def launching(stream, moved: dict[int, int]):
    """The launches enqueued inside (launch_kernel, ErrorFlag.clear, a wrapper's memsets through launch_stream) go to
    `stream` (a cuda.core Stream), each device-address argument found in `moved` replaced by its value there. A
    prepared call's addresses are its kernels' pointer arguments alone (Python ints; scalars are numpy), so a call
    prepared on some arrays launches on others of the same shapes, dtypes and aliasing."""
    token = _ELSEWHERE.set((stream, moved))
    try:
        yield
    finally:
        _ELSEWHERE.reset(token)


def launch_stream(st: Staging):
    """The stream a prepared call's work goes to: `st`'s (kernels_cu's own), or the one `launching` names."""
    elsewhere = _ELSEWHERE.get()
    return st.g.stream if elsewhere is None else elsewhere[0]


def launch_kernel(
    spec, grid, shmem, *args, entry: str | None = None, block: int | None = None, dependent: bool = False
):
    """Launch one of the spec's entries (default: its main entry, with the spec's block size) on kernels_cu's stream,
    or where `launching` says. dependent: a programmatic dependent launch (PDL): the kernel may start before the
    previous kernel of the stream has finished, so it must wait for it (griddepcontrol.wait) before reading what
    that kernel writes."""
    from cuda.core import LaunchConfig, launch

    kernel = runtime.load(spec, shmem, entry)
    options = {"programmatic_stream_serialization": True} if dependent else {}
    config = LaunchConfig(grid=grid, block=block or spec.block, shmem_size=shmem, **options)
    elsewhere = _ELSEWHERE.get()
    if elsewhere is None:
        stream = runtime.gpu().stream
    else:
        stream, moved = elsewhere
        args = tuple(moved.get(a, a) if type(a) is int else a for a in args)
    launch(stream, config, kernel, *args)

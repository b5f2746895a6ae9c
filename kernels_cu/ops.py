"""Typed wrappers of the CUDA kernels, with the references' signatures (the `cuda` implementation).

Each wrapper validates its inputs with the reference's own checks (same errors, same messages) before
anything is launched, then runs the kernel on the harness stream and returns outputs in the form the inputs
came in: numpy in, numpy out; CUDA arrays (cupy, torch: anything with __cuda_array_interface__ or a torch
tensor on a GPU) in, arrays of the same library on the same device out. The commit of tree_accept writes
the cache in place on the device; a numpy cache is copied over and back.
"""

from __future__ import annotations

import numpy as np

from reference import tree_accept as ref_accept
from reference import tree_build as ref_build
from reference import validate as v
from reference.tree_accept import Accept
from reference.tree_build import Tree
from reference.tree_verify import BF16

from . import runtime

BLOCK = 128


# ------------------------------------------------------------------------------------------- arrays
class DeviceArray:
    """A CUDA array given by the caller: pointer, shape, dtype, and the library that made it."""

    def __init__(self, obj, arg: str):
        self.obj = obj
        self.lib = type(obj).__module__.split(".")[0]
        bf16 = self.lib == "torch" and str(obj.dtype) == "torch.bfloat16"
        # torch exports no __cuda_array_interface__ for bf16: take the int16 view's and keep the real dtype
        cai = (obj.view(__import__("torch").int16) if bf16 else obj).__cuda_array_interface__
        self.ptr = int(cai["data"][0])
        self.shape = tuple(cai["shape"])
        # (not `x or y`: a numpy dtype is falsy)
        self.dtype = BF16 if bf16 else np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(self.shape, self.dtype.itemsize):
            v.fail(arg, "device arrays must be C-contiguous")

    def host(self) -> np.ndarray:
        """A host copy, for validation of small index and score arrays."""
        if self.lib == "torch":
            t = self.obj.view(__import__("torch").int16) if self.dtype == BF16 else self.obj
            return t.detach().cpu().numpy().view(self.dtype)
        return self.obj.get()


def _c_strides(shape, itemsize):
    out, acc = [], itemsize
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _is_device(x) -> bool:
    return hasattr(x, "__cuda_array_interface__") or (
        type(x).__module__.split(".")[0] == "torch" and getattr(getattr(x, "device", None), "type", "") == "cuda"
    )


class Staging:
    """Device buffers for one call: numpy inputs are copied in, outputs allocated and copied back."""

    def __init__(self, like_lib: str | None, like_obj=None):
        self.g = runtime.gpu()
        self.lib, self.like = like_lib, like_obj
        self.buffers = []

    def input(self, x) -> int:
        if isinstance(x, DeviceArray):
            return x.ptr
        x = np.ascontiguousarray(x)
        buf = self._alloc(max(x.nbytes, 1))
        if x.nbytes:  # stream-ordered after the (stream-ordered) allocation; pageable source is staged at once
            _check(_driver().cuMemcpyHtoDAsync(int(buf.handle), x.ctypes.data, x.nbytes, self.g.stream.handle))
        return int(buf.handle)

    def output(self, shape, dtype):
        """An output array of the caller's library, and its device pointer (torch: uint32 bits are held in
        int32, which torch can index; uint8 0/1 bytes in bool)."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        if self.lib == "torch":
            import torch

            tdt = {
                np.dtype(np.int32): torch.int32,
                np.dtype(np.float64): torch.float64,
                np.dtype(np.uint32): torch.int32,
                np.dtype(np.uint8): torch.bool,
            }[dtype]
            t = torch.empty(shape, dtype=tdt, device=self.like.device)
            return t, t.data_ptr()
        if self.lib == "cupy":
            import cupy

            a = cupy.empty(shape, dtype=dtype)
            return a, a.data.ptr
        buf = self._alloc(max(n, 1))
        host = np.empty(shape, dtype)
        return (host, buf), int(buf.handle)

    def result(self, out):
        if isinstance(out, tuple):
            host, buf = out
            if host.nbytes:
                _check(
                    _driver().cuMemcpyDtoHAsync(host.ctypes.data, int(buf.handle), host.nbytes, self.g.stream.handle)
                )
                self.g.stream.sync()
            return host
        return out

    def _alloc(self, n):
        buf = self.g.device.memory_resource.allocate(n, stream=self.g.stream)
        self.buffers.append(buf)
        return buf

    def sync_before(self):
        """Work the caller queued on its own stream (torch, cupy) must be done before our launch."""
        if self.lib == "torch":
            __import__("torch").cuda.synchronize()
        elif self.lib == "cupy":
            __import__("cupy").cuda.get_current_stream().synchronize()

    def close(self):
        self.g.stream.sync()
        for b in self.buffers:
            b.close(self.g.stream)
        self.g.stream.sync()


def _driver():
    from cuda.bindings import driver

    return driver


def _check(res):
    err = res[0] if isinstance(res, tuple) else res
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err.name}")


def _args(**named):
    """Split each argument into (host view for validation, handle for launch) and find the caller's library."""
    lib, like, host, handle = None, None, {}, {}
    for name, x in named.items():
        if x is not None and _is_device(x):
            d = DeviceArray(x, name)
            lib, like = d.lib, x
            handle[name], host[name] = d, d
        else:
            handle[name] = host[name] = x
    return lib, like, host, handle


def _launch(slug, grid, shmem, *args):
    from cuda.core import LaunchConfig, launch

    kernel = runtime.load(slug, shmem)
    g = runtime.gpu()
    launch(g.stream, LaunchConfig(grid=grid, block=BLOCK, shmem_size=shmem), kernel, *args)


# ------------------------------------------------------------------------------------------- tree_build
def tree_build_smem_bytes(B: int, L: int, K: int, lp_in_smem: bool) -> int:
    """Mirrors the shared-memory layout at the top of tree_build_kernel (kernels_cu/tree_build.cu)."""
    D = B + 1
    nwords = (L + 5) // 6 if L > 0 else 1
    return D * 16 + D * nwords * 8 + D * 8 + 6 * D * 4 + (L * K * 4 if lp_in_smem else 0)


def tree_build_layout(B: int, L: int, K_in: int) -> tuple[int, int]:
    """(dynamic shared memory bytes, lp_in_smem): stage the log-probs when they fit."""
    K = min(B, K_in)
    limit = runtime.gpu().device.properties.max_shared_memory_per_block_optin - 64  # 16 B of static shared too
    staged = tree_build_smem_bytes(B, L, K, True)
    return (staged, 1) if staged <= limit else (tree_build_smem_bytes(B, L, K, False), 0)


class Prepared:
    """A validated call with its device buffers: `launch()` enqueues the kernel alone (benchmarks time
    this), `finish()` waits, copies results back and frees the buffers."""

    def __init__(self, staging, launch, collect):
        self.staging, self.launch, self._collect = staging, launch, collect

    def sync(self):
        self.staging.g.stream.sync()

    def results(self):
        """Wait and copy the outputs back, keeping the buffers (a benchmark checks, then times)."""
        self.sync()
        return self._collect()

    def finish(self):
        try:
            return self.results()
        finally:
            self.staging.close()


def prepare_tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None) -> Prepared:
    lib, like, host, dev = _args(top_logp=top_logp, top_ids=top_ids, root_tokens=root_tokens, prefix_lens=prefix_lens)
    h = {k: (x.host() if isinstance(x, DeviceArray) else x) for k, x in host.items()}
    if h["prefix_lens"] is None:
        h["prefix_lens"] = dev["prefix_lens"] = ref_build.default_prefix_lens(h["root_tokens"], None)
    bs, L, K_in, B = ref_build.validate_inputs(h["top_logp"], h["top_ids"], h["root_tokens"], budget, h["prefix_lens"])
    D, W = B + 1, (B + 32) // 32
    full = int(D * (int(np.sum(h["prefix_lens"], dtype=np.int64)) + bs * D))
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("top_logp", "top_ids", "root_tokens", "prefix_lens")]
        outs = {"n_nodes": st.output((bs,), np.int32)}
        for f in ("parents", "depths", "tokens", "ranks"):
            outs[f] = st.output((bs, D), np.int32)
        outs["scores"] = st.output((bs, D), np.float64)
        outs["visibility"] = st.output((bs, D, W), np.uint32)
        for f in ("positions", "first_child", "next_sibling"):
            outs[f] = st.output((bs, D), np.int32)
        outs["full_mask"] = st.output((full,), np.uint8)
    except BaseException:
        st.close()
        raise
    smem, lp_in_smem = tree_build_layout(B, L, K_in)
    args = (*ins, np.int32(L), np.int32(K_in), np.int32(B), np.int32(lp_in_smem), *(outs[f][1] for f in Tree.FIELDS))

    def collect():
        res = {f: st.result(outs[f][0]) for f in Tree.FIELDS}
        if lib is None or lib == "cupy":
            res["full_mask"] = res["full_mask"].view(bool)
        return Tree(**res)

    return Prepared(st, lambda: _launch("tree_build", bs, smem, *args), collect)


def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None) -> Tree:
    p = prepare_tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens)
    p.launch()
    return p.finish()


# ------------------------------------------------------------------------------------------- tree_accept
def prepare_tree_accept(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
) -> Prepared:
    lib, like, host, dev = _args(
        tokens=tokens,
        first_child=first_child,
        next_sibling=next_sibling,
        target_tokens=target_tokens,
        kv_cache=kv_cache,
        block_table=block_table,
        prefix_lens=prefix_lens,
    )
    h = {k: (x.host() if isinstance(x, DeviceArray) and k != "kv_cache" else x) for k, x in host.items()}
    kv = host["kv_cache"]
    if isinstance(kv, DeviceArray):
        if kv.dtype not in (np.dtype(np.float32), BF16):
            v.fail("kv_cache", f"dtype {kv.dtype}, expected float32 or bfloat16")
        bs, D, L = ref_accept.validate_inputs(
            h["tokens"], h["first_child"], h["next_sibling"], h["target_tokens"], max_depth, None, None, None
        )
        if len(kv.shape) != 3:
            v.fail("kv_cache", f"shape {kv.shape} has {len(kv.shape)} dims, expected 3")
        if h["block_table"] is None or h["prefix_lens"] is None:
            v.fail("kv_cache", "the commit needs kv_cache, block_table and prefix_lens together")
        ref_accept.validate_commit(kv.shape, True, h["block_table"], h["prefix_lens"], bs, D)
        if kv.ptr % 16:
            v.fail(
                "kv_cache", f"device pointer 0x{kv.ptr:x} is not 16-byte aligned (the commit copies 16-byte vectors)"
            )
    else:
        bs, D, L = ref_accept.validate_inputs(
            h["tokens"],
            h["first_child"],
            h["next_sibling"],
            h["target_tokens"],
            max_depth,
            kv,
            h["block_table"],
            h["prefix_lens"],
        )
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("tokens", "first_child", "next_sibling", "target_tokens")]
        outs = {
            "accept_len": st.output((bs,), np.int32),
            "accept_path": st.output((bs, 1 + L), np.int32),
            "emitted": st.output((bs, 1 + L), np.int32),
            "bonus": st.output((bs,), np.int32),
            "new_lens": st.output((bs,), np.int32),
        }
        if kv is None:
            commit = (0, np.int32(0), np.int32(1), 0, np.int32(0), 0)
        else:
            kv_ptr = st.input(kv)
            row_vec = v.HEAD_DIM * kv.dtype.itemsize // 16
            commit = (
                kv_ptr,
                np.int32(row_vec),
                np.int32(kv.shape[1]),
                st.input(dev["block_table"]),
                np.int32(h["block_table"].shape[1]),
                st.input(dev["prefix_lens"]),
            )
    except BaseException:
        st.close()
        raise
    args = (*ins, np.int32(D), np.int32(L), *(outs[f][1] for f in Accept.FIELDS), *commit)

    def collect():
        res = {f: st.result(outs[f][0]) for f in Accept.FIELDS}
        if kv is not None and not isinstance(kv, DeviceArray):  # the in-place commit, back into the caller's array
            _check(_driver().cuMemcpyDtoHAsync(kv.ctypes.data, commit[0], kv.nbytes, st.g.stream.handle))
            st.g.stream.sync()
        return Accept(**res)

    return Prepared(st, lambda: _launch("tree_accept", bs, (6 * D + 33) * 4, *args), collect)


def tree_accept(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
) -> Accept:
    p = prepare_tree_accept(
        tokens,
        first_child,
        next_sibling,
        target_tokens,
        max_depth=max_depth,
        kv_cache=kv_cache,
        block_table=block_table,
        prefix_lens=prefix_lens,
    )
    p.launch()
    return p.finish()


# ------------------------------------------------------------------------------------------- tree_verify
def __getattr__(name):
    """tree_verify lives in its own module (which builds on this one); it is found here by name like every op
    (harness/impls.py), imported on first use so that neither module imports the other at load time."""
    if name in ("tree_verify", "prepare_tree_verify"):
        from . import tree_verify_ops

        return getattr(tree_verify_ops, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

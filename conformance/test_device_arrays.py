"""The CUDA wrappers take device arrays (cupy, torch) and answer in kind (TB.4.4, TA.4.3)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from harness import strategies as hh
from harness.compare import assert_bit_exact
from reference.tree_accept import Accept
from reference.tree_build import Tree
from reference.tree_verify import BF16
from reference.validate import InputError

LIBS = ["cupy", "torch"]


def _lib(impl, name):
    if impl.name in ("reference", "engine-cpu"):
        pytest.skip(f"{impl.name} takes host arrays only")
    try:
        mod = importlib.import_module(name)
    except ImportError:
        pytest.skip(f"{name} is not installed")
    if name == "torch" and not mod.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return mod


def to_dev(lib, name, a):
    if name == "cupy":
        return lib.asarray(a)
    return lib.from_numpy(np.ascontiguousarray(a)).cuda()


def to_host(name, x):
    if name == "cupy":
        return x.get()
    return x.cpu().numpy()


@pytest.mark.spec("TB.4.4")
@pytest.mark.parametrize("lib_name", LIBS)
def test_tree_build_device_arrays(impl, lib_name):
    lib = _lib(impl, lib_name)
    rng = np.random.default_rng(4)
    lp = hh.logp_rows(rng, (3, 4, 8), "bf16", 0.3)
    ids = np.stack([np.stack([rng.permutation(500)[:8] for _ in range(4)]) for _ in range(3)]).astype(np.int32)
    roots, pre = np.array([1, 2, 3], np.int32), np.array([0, 5, 64], np.int32)
    want = impl.op("tree_build")(lp, ids, roots, 20, pre)
    got = impl.op("tree_build")(*(to_dev(lib, lib_name, a) for a in (lp, ids, roots)), 20, to_dev(lib, lib_name, pre))
    for f in Tree.FIELDS:
        x = getattr(got, f)
        assert type(x).__module__.split(".")[0] == lib_name, f"{f} came back as {type(x)}"
        h = to_host(lib_name, x)
        w = getattr(want, f)
        assert_bit_exact(
            h.view(w.dtype) if h.dtype.itemsize == w.dtype.itemsize else h.astype(w.dtype), w, what=f, spec_id="TB.4.4"
        )
    bad = lp.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(InputError, match=r"top_logp: NaN at \(0, 0, 0\)"):
        impl.op("tree_build")(
            to_dev(lib, lib_name, bad),
            to_dev(lib, lib_name, ids),
            to_dev(lib, lib_name, roots),
            20,
            to_dev(lib, lib_name, pre),
        )


@pytest.mark.spec("TA.4.3")
@pytest.mark.parametrize("lib_name,kv_dtype", [("cupy", "fp32"), ("torch", "fp32"), ("torch", "bf16")])
def test_tree_accept_device_arrays_commit_in_place(impl, lib_name, kv_dtype):
    lib = _lib(impl, lib_name)
    rng = np.random.default_rng(9)
    par = np.array([[-1, 0, 0, 1, 3, 2]], np.int32).repeat(2, 0)
    fc, ns = hh.links_of(par[0], 6)
    fc, ns = np.stack([fc, fc]), np.stack([ns, ns])
    tok = rng.integers(0, 2, (2, 6)).astype(np.int32)
    tgt = rng.integers(0, 2, (2, 6)).astype(np.int32)
    pre = np.array([3, 17], np.int32)
    _, kv, bt = hh.build_paged_cache(rng, BF16 if kv_dtype == "bf16" else np.float32, pre, 6, 4, 1)
    kv_np = kv.copy()
    want = impl.op("tree_accept")(tok, fc, ns, tgt, max_depth=3, kv_cache=kv_np, block_table=bt, prefix_lens=pre)
    if kv_dtype == "bf16":  # torch has bf16; numpy hands it over as raw 16-bit words
        kv_dev = lib.from_numpy(kv.view(np.int16)).cuda().view(lib.bfloat16)
    else:
        kv_dev = to_dev(lib, lib_name, kv)
    got = impl.op("tree_accept")(
        *(to_dev(lib, lib_name, a) for a in (tok, fc, ns, tgt)),
        max_depth=3,
        kv_cache=kv_dev,
        block_table=to_dev(lib, lib_name, bt),
        prefix_lens=to_dev(lib, lib_name, pre),
    )
    for f in Accept.FIELDS:
        assert_bit_exact(to_host(lib_name, getattr(got, f)), getattr(want, f), what=f, spec_id="TA.4.3")
    back = kv_dev.view(lib.int16).cpu().numpy().view(BF16) if kv_dtype == "bf16" else to_host(lib_name, kv_dev)
    assert_bit_exact(back, kv_np, what="kv_cache (device, in place)", spec_id="TA.4.3")

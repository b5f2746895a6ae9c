"""The CUDA wrappers take device arrays (cupy, torch) and answer in kind (TB.4.4, TA.4.3)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from contract import BF16, Accept, InputError, Tree
from harness import strategies as hh
from harness.cases import run
from harness.compare import assert_bit_exact

LIBS = ["cupy", "torch"]


def _lib(impl, name):
    if not impl.takes_device_arrays:
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
    case = hh.topk_case(lp, ids, roots, 20, pre, with_full_mask=True)
    want = run(impl, case)
    dev = {k: to_dev(lib, lib_name, v) for k, v in case.args.items() if isinstance(v, np.ndarray)}
    got = run(impl, case.with_args(**dev))
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
        run(impl, case.with_args(**{**dev, "top_logp": to_dev(lib, lib_name, bad)}))


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
    case = hh.accept_case(par, np.array([6, 6], np.int32), tok, fc, ns, tgt, 3)
    want = run(impl, case.with_args(kv_cache=kv_np, block_table=bt, prefix_lens=pre))
    if kv_dtype == "bf16":  # torch has bf16; numpy hands it over as raw 16-bit words
        kv_dev = lib.from_numpy(kv.view(np.int16)).cuda().view(lib.bfloat16)
    else:
        kv_dev = to_dev(lib, lib_name, kv)
    dev = {k: to_dev(lib, lib_name, case.args[k]) for k in ("tokens", "first_child", "next_sibling", "target_tokens")}
    got = run(
        impl,
        case.with_args(
            **dev, kv_cache=kv_dev, block_table=to_dev(lib, lib_name, bt), prefix_lens=to_dev(lib, lib_name, pre)
        ),
    )
    for f in Accept.FIELDS:
        assert_bit_exact(to_host(lib_name, getattr(got, f)), getattr(want, f), what=f, spec_id="TA.4.3")
    back = kv_dev.view(lib.int16).cpu().numpy().view(BF16) if kv_dtype == "bf16" else to_host(lib_name, kv_dev)
    assert_bit_exact(back, kv_np, what="kv_cache (device, in place)", spec_id="TA.4.3")


@pytest.mark.spec("TV.3.6")
@pytest.mark.parametrize("lib_name,dtype", [("cupy", "fp32"), ("torch", "fp32"), ("torch", "bf16")])
def test_tree_verify_device_arrays(impl, lib_name, dtype):
    lib = _lib(impl, lib_name)
    rng = np.random.default_rng(11)
    np_dtype = BF16 if dtype == "bf16" else np.float32
    case = hh.paged_case(rng, np_dtype, [np.array([-1, 0, 0, 1], np.int32)] * 2, [70, 3], 16, 8)
    want = run(impl, case)

    def dev(a):
        if a.dtype == BF16:  # numpy hands bf16 over as raw 16-bit words
            return lib.from_numpy(a.view(np.int16)).cuda().view(lib.bfloat16)
        return to_dev(lib, lib_name, a)

    # torch has no uint32 tensors to speak of: its callers keep the (small) visibility mask on the host
    on_device = [k for k, v in case.args.items() if isinstance(v, np.ndarray)]
    on_device = [k for k in on_device if not (lib_name == "torch" and k == "visibility")]
    arrays = {k: dev(case.args[k]) for k in on_device}
    got = run(impl, case.with_args(**arrays))
    for name in ("out", "lse"):
        x = getattr(got, name)
        assert type(x).__module__.split(".")[0] == lib_name, f"{name} came back as {type(x)}"
        w = getattr(want, name)
        h = x.view(lib.int16).cpu().numpy().view(BF16) if w.dtype == BF16 else to_host(lib_name, x)
        assert_bit_exact(h, w, what=name, spec_id="TV.3.6")
    bad = case.visibility.copy()
    bad[0, 1, 0] = 2  # row 1 does not see the root
    bad_vis = bad if lib_name == "torch" else to_dev(lib, lib_name, bad)
    with pytest.raises(InputError, match="visibility: request 0 row 1 does not see the root"):
        run(impl, case.with_args(**{**arrays, "visibility": bad_vis}))

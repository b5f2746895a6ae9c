"""The CUDA wrappers take device arrays (cupy, torch) and answer in kind (TB.4.4, TA.4.3, TV.3.6, DT.4.4), and the
capturable paths check values on the device (TB.4.5, TA.4.4, TV.3.7, DT.4.5)."""

from __future__ import annotations

import numpy as np
import pytest

from contract import BF16, Accept, InputError, TopK, Tree
from harness import device
from harness import strategies as hh
from harness.cases import run
from harness.compare import assert_bit_exact

LIBS = ["cupy", "torch"]


def _lib(impl, name):
    if not impl.takes_device_arrays:
        pytest.skip(f"{impl.name} takes host arrays only")
    return device.array_library(name)


def _on_device(cp, args: dict) -> dict:
    """The call's arguments with every numpy array on the device (cupy), the rest as they are."""
    return {k: cp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in args.items()}


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


def _deferred_variant(impl, slug="tree_build"):
    if impl.kind != "cuda" or slug not in impl.loaders:
        pytest.skip(f"{impl.name}: deferred device checks are a path of the CUDA {slug} wrapper")
    return impl.variant


def _captured_results(p, message, after_refusal=None):
    """Launch a deferred call from a CUDA graph (it must capture), then its results; with `message`, reading them
    must raise the contract's error matching it instead (None returned), and then after_refusal(p) runs, if given.
    The call's buffers are freed."""
    from harness import timing

    try:
        _, method = timing.device_times_us([p.launch], plan=timing.WARM, policy=timing.Policy(1, 1, 1, 0.0, 1))
        assert method.startswith("CUDA graph"), f"the deferred launch was not captured: {method}"
        if message is not None:
            with pytest.raises(InputError, match=message):
                p.results()
            if after_refusal is not None:
                after_refusal(p)
            return None
        return p.results()
    finally:
        p.staging.close()


# One bad value per check of TB.1.2-TB.1.3 the device makes: (what to change, the contract's error).
DEFERRED_BAD = {
    "nan": (lambda a: a["top_logp"].__setitem__((1, 2, 3), np.nan), r"top_logp: NaN at \(1, 2, 3\)"),
    "positive": (lambda a: a["top_logp"].__setitem__((0, 0, 0), 0.5), r"top_logp: log-prob > 0 at \(0, 0, 0\)"),
    "unsorted": (
        lambda a: a["top_logp"].__setitem__((1, 1, 5), 0.0),
        r"top_logp: row \[1, 1\] is not non-increasing at rank 5",
    ),
    "duplicate_id": (
        lambda a: a["top_ids"].__setitem__((0, 3, 7), a["top_ids"][0, 3, 2]),
        r"top_ids: row \[0, 3\] has duplicate token ids",
    ),
    "negative_id": (lambda a: a["top_ids"].__setitem__((1, 0, 4), -3), r"top_ids: .*negative"),
    "negative_root": (lambda a: a["root_tokens"].__setitem__(1, -1), r"root_tokens: .*negative"),
    "negative_prefix": (lambda a: a["prefix_lens"].__setitem__(0, -2), r"prefix_lens: .*negative"),
    "context": (lambda a: a["prefix_lens"].__setitem__(1, 262_144 - 20), r"prefix_lens: request 1: .*context limit"),
    # what a refused draft_topk row hands a step's tree_build (ST.2.4): every log-prob of the row NaN
    "nan_row": (lambda a: a["top_logp"].__setitem__((1, 2), np.nan), r"top_logp: NaN at \(1, 2, 0\)"),
}
SENTINEL = 0x5A  # the byte a refused deferred build's outputs are filled with before it runs


def _fill_outputs(p, byte=SENTINEL):
    for f in Tree.FIELDS:
        getattr(p.outputs(), f).view("uint8").fill(byte)


def _outputs_untouched(p):
    """A refused deferred build wrote none of its outputs: the build never ran on the refused values (ST.2.4)."""
    for f in Tree.FIELDS:
        raw = getattr(p.outputs(), f).view("uint8")
        assert bool((raw == SENTINEL).all()), f"[TB.4.5] the refused build wrote its {f} (it built on refused values)"


@pytest.mark.spec("TB.4.5")
@pytest.mark.parametrize("bad", [None, *DEFERRED_BAD])
def test_tree_build_deferred_checks(impl, bad):
    """The deferred path: a captured launch gives the checked call's bits; a bad value gets its named error, and the
    build writes nothing (it never runs on values its check refused)."""
    from kernels_cu import ops

    variant = _deferred_variant(impl)
    cp = _lib(impl, "cupy")
    rng = np.random.default_rng(7)
    args = {
        "top_logp": hh.logp_rows(rng, (2, 4, 8), "bf16", 0.3),
        "top_ids": np.stack([np.stack([rng.permutation(500)[:8] for _ in range(4)]) for _ in range(2)]).astype(
            np.int32
        ),
        "root_tokens": np.array([3, 4], np.int32),
        "budget": 20,
        "prefix_lens": np.array([0, 9], np.int32),
    }
    message = None  # a good build: its results are read, not refused
    if bad is not None:
        change, message = DEFERRED_BAD[bad]
        change(args)
        with pytest.raises(InputError, match=message):  # the host-checked call names the same error
            ops.prepare("tree_build", variant, **args).finish()
    dev = _on_device(cp, args)
    p = ops.prepare_deferred("tree_build", variant, **dev)
    if bad is not None:
        _fill_outputs(p)
    got = _captured_results(p, message, _outputs_untouched if bad is not None else None)
    if got is None:
        return
    want = ops.function("tree_build", variant)(**args)
    for f in Tree.FIELDS:
        assert_bit_exact(to_host("cupy", getattr(got, f)).view(getattr(want, f).dtype), getattr(want, f), what=f,
                         spec_id="TB.4.5")  # fmt: skip


@pytest.mark.spec("TB.4.5")
def test_tree_build_deferred_refuses_host_arrays_and_full_mask(impl):
    from kernels_cu import ops

    variant = _deferred_variant(impl)
    cp = _lib(impl, "cupy")
    lp = np.zeros((1, 2, 3), np.float32)
    ids = np.arange(6, dtype=np.int32).reshape(1, 2, 3)
    roots = np.zeros(1, np.int32)
    with pytest.raises(InputError, match="top_logp: deferred checks take device arrays"):
        ops.prepare_deferred("tree_build", variant, lp, ids, roots, 4)
    with pytest.raises(InputError, match="with_full_mask: the FULL_MASK size depends on prefix_lens"):
        ops.prepare_deferred("tree_build", variant, cp.asarray(lp), cp.asarray(ids), cp.asarray(roots), 4,
                             with_full_mask=True)  # fmt: skip
    with pytest.raises(InputError, match=r"top_ids: shape \(1, 2, 2\), expected \(1, 2, 3\)"):
        ops.prepare_deferred("tree_build", variant, cp.asarray(lp), cp.asarray(ids[:, :, :2]), cp.asarray(roots), 4)


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


def _replayed_once(p):
    """Capture a deferred call's launch in a CUDA graph and replay it once (a commit must run exactly once)."""
    from kernels_cu import runtime
    from kernels_cu.arrays import check, driver

    s = runtime.gpu().stream
    graph, exe = runtime.capture_graph(s, [p.launch])
    try:
        check(driver().cuGraphLaunch(exe, s.handle))
        s.sync()
    finally:
        runtime.destroy_graph(graph, exe)


def _accept_args(rng, wide=False):
    """Three requests of one 6-node tree whose walks accept 0 to 3 drafts, with a commit into a paged cache of 4-row
    pages (prefixes 3, 17, 40). The tree is 3 deep (a chain and a branch), or, `wide`, 2 deep with four siblings
    under the root (max_depth 2: a check that counted a sibling link as a level would refuse it)."""
    par = np.array([-1, 0, 0, 0, 0, 1] if wide else [-1, 0, 0, 1, 3, 2], np.int32)
    fc, ns = hh.links_of(par, 6)
    tok = np.array([[0, 5, 6, 7, 8, 9], [0, 5, 6, 1, 2, 3], [0, 4, 4, 4, 4, 4]], np.int32)
    tgt = np.array([[5, 7, 0, 8, 1, 0], [6, 0, 3, 0, 0, 0], [1, 0, 0, 0, 0, 0]], np.int32)
    if wide:
        tgt = np.array([[8, 9, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [4, 4, 0, 0, 0, 0]], np.int32)
    pre = np.array([3, 17, 40], np.int32)
    _, kv, bt = hh.build_paged_cache(rng, np.float32, pre, 6, 4, 1)
    return {"tokens": tok, "first_child": np.stack([fc] * 3), "next_sibling": np.stack([ns] * 3),
            "target_tokens": tgt, "max_depth": 2 if wide else 3, "kv_cache": kv, "block_table": bt,
            "prefix_lens": pre}  # fmt: skip


def _alias(a):  # request 1's first commit page is request 0's: their commit rows map to one cache row
    a["block_table"][1, 17 // 4] = a["block_table"][0, 3 // 4]


# One bad value per check of TA.1.1-TA.1.3 the device makes: (what to change, the contract's error).
TA_DEFERRED_BAD = {
    "negative_token": (lambda a: a["tokens"].__setitem__((1, 2), -1), r"tokens: .*negative"),
    "negative_target": (lambda a: a["target_tokens"].__setitem__((2, 5), -7), r"target_tokens: .*negative"),
    "root_sibling": (lambda a: a["next_sibling"].__setitem__((1, 0), 2), r"next_sibling: root of request 1 has a sib"),
    "backward_link": (lambda a: a["first_child"].__setitem__((2, 3), 1), r"first_child: \[2, 3\] = 1 must be -1"),
    "link_past_tree": (lambda a: a["next_sibling"].__setitem__((0, 4), 6), r"next_sibling: \[0, 4\] = 6 must be -1"),
    "two_parents": (lambda a: a["first_child"].__setitem__((1, 4), 5), r"first_child: request 1: node 5 has more"),
    "too_deep": (lambda a: a.__setitem__("max_depth", 2), r"first_child: request 0 node 4 is at depth 3 > max_depth 2"),
    "negative_prefix": (lambda a: a["prefix_lens"].__setitem__(2, -1), r"prefix_lens: .*negative"),
    "context": (lambda a: a["prefix_lens"].__setitem__(0, 262_144 - 5), r"prefix_lens: request 0: .*context limit"),
    "table_short": (lambda a: a["prefix_lens"].__setitem__(1, 49), r"block_table: request 1 needs 14 pages"),
    "dead_entry": (  # a longer prefix reaches the table's unused entries (a huge index, as FlashMLA's tests fill)
        lambda a: a["prefix_lens"].__setitem__(1, 30),
        r"block_table: \[1, 6\] = 2147480000 is not a page index",
    ),
    "page_index": (
        lambda a: a["block_table"].__setitem__((2, 1), a["kv_cache"].shape[0]),
        r"block_table: \[2, 1\] = \d+ is not a page index",
    ),
    "alias": (_alias, r"block_table: request 0 position \d+ and request 1 position \d+ map to the same cache row"),
}


@pytest.mark.spec("TA.4.4")
@pytest.mark.parametrize("bad", [None, "wide", "walk_only", *TA_DEFERRED_BAD])
def test_tree_accept_deferred_checks(impl, bad):
    """The deferred path: a captured launch gives the checked call's bits and commits into the device cache in
    place; a bad value gets its named error when the results are read, and the cache keeps every bit. walk_only:
    the walk without a commit (no cache, table or lengths given) is deferred too."""
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_accept")
    cp = _lib(impl, "cupy")
    args = _accept_args(np.random.default_rng(19), wide=bad == "wide")
    if bad == "walk_only":
        args = {**args, "kv_cache": None, "block_table": None, "prefix_lens": None}
    message = None
    if bad in TA_DEFERRED_BAD:
        change, message = TA_DEFERRED_BAD[bad]
        change(args)
        with pytest.raises(InputError, match=message):  # the host-checked call names the same error
            ops.prepare("tree_accept", variant, **{**args, "kv_cache": args["kv_cache"].copy()}).finish()
    dev = _on_device(cp, args)
    p = ops.prepare_deferred("tree_accept", variant, **dev)
    try:
        _replayed_once(p)
        if message is not None:
            with pytest.raises(InputError, match=message):
                p.results()
            assert_bit_exact(dev["kv_cache"].get(), args["kv_cache"], what="kv_cache (untouched)", spec_id="TA.4.4")
            return
        got = p.results()
    finally:
        p.staging.close()
    kv_want = None if args["kv_cache"] is None else args["kv_cache"].copy()
    want = ops.function("tree_accept", variant)(**{**args, "kv_cache": kv_want})
    assert int(np.asarray(want.accept_len).sum()) >= 2, "the case accepts drafts (the commit moves rows)"
    for f in Accept.FIELDS:
        assert_bit_exact(to_host("cupy", getattr(got, f)), getattr(want, f), what=f, spec_id="TA.4.4")
    if kv_want is not None:
        assert_bit_exact(dev["kv_cache"].get(), kv_want, what="kv_cache (device, in place)", spec_id="TA.4.4")


@pytest.mark.spec("TA.4.4")
def test_tree_accept_deferred_checks_shapes_on_the_host(impl):
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_accept")
    cp = _lib(impl, "cupy")
    args = _accept_args(np.random.default_rng(23))
    dev = _on_device(cp, args)
    with pytest.raises(InputError, match="tokens: deferred checks take device arrays"):
        ops.prepare_deferred("tree_accept", variant, **{**dev, "tokens": args["tokens"]})
    with pytest.raises(InputError, match=r"target_tokens: shape \(3, 5\), expected \(3, 6\)"):
        ops.prepare_deferred("tree_accept", variant, **{**dev, "target_tokens": dev["target_tokens"][:, :5].copy()})
    with pytest.raises(InputError, match=r"max_depth: 33 is outside 0\.\.32"):
        ops.prepare_deferred("tree_accept", variant, **{**dev, "max_depth": 33})
    with pytest.raises(InputError, match="kv_cache: needs kv_cache, block_table, prefix_lens together"):
        ops.prepare_deferred("tree_accept", variant, **{**dev, "block_table": None})


@pytest.mark.spec("TA.4.5")
@pytest.mark.parametrize("state", ["clear", "refused", "flag_already_set"])
def test_tree_accept_advance_and_shared_flag(impl, state):
    """The step's advance: an accepted call moves prefix_lens to new_lens and the roots to bonus in place, after its
    commit; a refused call, or one whose shared flag another op already set, walks, commits and advances nothing,
    and the shared flag is never cleared."""
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_accept")
    cp = _lib(impl, "cupy")
    args = _accept_args(np.random.default_rng(29))
    if state == "refused":
        TA_DEFERRED_BAD["negative_target"][0](args)
    dev = _on_device(cp, args)
    roots = cp.asarray(np.array([11, 12, 13], np.int32))
    flag = cp.asarray(np.array([1 if state == "flag_already_set" else 0], np.uint32))
    p = ops.prepare_deferred("tree_accept", variant, **dev, error_flag=flag, advance_roots=roots)
    try:
        _replayed_once(p)
        p.sync()
        got = p.outputs()
    finally:
        p.staging.close()
    if state != "clear":
        assert int(flag.get()[0]) != 0, "the shared flag was cleared"
        for name, want in (("prefix_lens", args["prefix_lens"]), ("advance_roots", np.array([11, 12, 13], np.int32)),
                           ("kv_cache", args["kv_cache"])):  # fmt: skip
            x = roots if name == "advance_roots" else dev[name]
            assert_bit_exact(x.get(), want, what=f"{name} (refused: untouched)", spec_id="TA.4.5")
        return
    assert int(flag.get()[0]) == 0
    kv_want = args["kv_cache"].copy()
    want = ops.function("tree_accept", variant)(**{**args, "kv_cache": kv_want})
    for f in Accept.FIELDS:
        assert_bit_exact(to_host("cupy", getattr(got, f)), getattr(want, f), what=f, spec_id="TA.4.5")
    assert_bit_exact(dev["kv_cache"].get(), kv_want, what="kv_cache (the commit, before the advance)", spec_id="TA.4.5")
    assert_bit_exact(dev["prefix_lens"].get(), want.new_lens, what="prefix_lens (advanced)", spec_id="TA.4.5")
    assert_bit_exact(roots.get(), want.bonus, what="advance_roots (the bonus)", spec_id="TA.4.5")


@pytest.mark.spec("TA.4.5")
def test_tree_accept_advance_arguments_are_checked(impl):
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_accept")
    cp = _lib(impl, "cupy")
    args = _accept_args(np.random.default_rng(31))
    dev = _on_device(cp, args)
    with pytest.raises(InputError, match=r"advance_roots: shape \(2,\) dtype int32, expected int32 \[3\]"):
        ops.prepare_deferred("tree_accept", variant, **dev, advance_roots=cp.zeros(2, cp.int32))
    with pytest.raises(InputError, match=r"advance_roots: deferred checks take device arrays"):
        ops.prepare_deferred("tree_accept", variant, **dev, advance_roots=np.zeros(3, np.int32))
    walk_only = {k: v for k, v in dev.items() if k not in ("kv_cache", "block_table", "prefix_lens")}
    with pytest.raises(InputError, match=r"advance_roots: the advance moves prefix_lens, so it needs the commit"):
        ops.prepare_deferred("tree_accept", variant, **walk_only, advance_roots=cp.zeros(3, cp.int32))
    with pytest.raises(InputError, match=r"error_flag: shape \(2,\) dtype uint32, expected one int32 or uint32"):
        ops.prepare_deferred("tree_accept", variant, **dev, error_flag=cp.zeros(2, cp.uint32))


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


def _verify_case(Q_words=1):
    """Two requests, fp32, page size 16, 8 heads: request 0 a 1,500-key prefix (two splits by the header's rule, so
    the combine and the partial slots run) under a chain of Q nodes, request 1 a 3-key prefix under a binary tree of
    Q nodes; Q = 6, or 40 (two visibility words) with Q_words=2."""
    Q = 6 if Q_words == 1 else 40
    chain = np.arange(-1, Q - 1, dtype=np.int32)
    heap = np.array([-1, *((i - 1) // 2 for i in range(1, Q))], np.int32)
    return hh.paged_case(np.random.default_rng(31), np.float32, [chain, heap], [1500, 3], 16, 8)


def _vis_not_closure(a):  # chain row 4 loses its grandparent 2: not its parent's row plus itself
    a["visibility"][0, 4, 0] &= ~np.uint32(1 << 2)


# One bad value per check of TV.1.2-TV.1.3 the device makes: (what to change, the contract's error); max_context
# 4,096 unless the change sets it.
TV_DEFERRED_BAD = {
    "negative_prefix": (lambda a: a["prefix_lens"].__setitem__(1, -2), r"prefix_lens: .*negative"),
    "context": (lambda a: a["prefix_lens"].__setitem__(1, 262_144 - 2), r"prefix_lens: request 1: .*context limit"),
    "past_max_context": (lambda a: a.__setitem__("max_context", 1200), r"prefix_lens: request 0: .* max_context 1200"),
    "table_short": (lambda a: a["prefix_lens"].__setitem__(1, 1700), r"block_table: request 1 needs \d+ pages"),
    "page_index": (
        lambda a: a["block_table"].__setitem__((0, 7), a["kv_cache"].shape[0]),
        r"block_table: \[0, 7\] = \d+ is not a page index",
    ),
    "negative_page": (lambda a: a["block_table"].__setitem__((1, 0), -1), r"block_table: \[1, 0\] = -1 is not"),
    "vis_root": (lambda a: a["visibility"].__setitem__((0, 1, 0), 2), r"visibility: request 0 row 1 does not see the"),
    "vis_self": (lambda a: a["visibility"].__setitem__((1, 3, 0), 0b11), r"visibility: request 1 row 3 does not se"),
    "vis_later": (lambda a: a["visibility"].__setitem__((1, 2, 0), 0b1101), r"visibility: request 1 row 2 sees a lat"),
    "vis_not_closure": (_vis_not_closure, r"visibility: request 0 row 4 is not its parent's row plus itself"),
}


@pytest.mark.spec("TV.3.7")
@pytest.mark.parametrize("split_chunk", [None, 64])
@pytest.mark.parametrize("bad", [None, "wide", *TV_DEFERRED_BAD])
def test_tree_verify_deferred_checks(impl, bad, split_chunk):
    """The deferred path: a captured launch, planned on the device for a stated max_context, gives the checked call's
    bits; a bad value gets its named error when the results are read, and a request longer than max_context one
    naming it."""
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_verify")
    if bad not in (None, "wide") and split_chunk is not None:
        pytest.skip("the checks do not depend on the plan")
    cp = _lib(impl, "cupy")
    case = _verify_case(Q_words=2 if bad == "wide" else 1)
    args = {**case.args, "max_context": 4096}
    message = None
    if bad in TV_DEFERRED_BAD:
        change, message = TV_DEFERRED_BAD[bad]
        change(args)
        if bad != "past_max_context":  # the host-checked call names the same error
            with pytest.raises(InputError, match=message):
                ops.prepare("tree_verify", variant, **{k: v for k, v in args.items() if k != "max_context"}).finish()
    dev = _on_device(cp, args)
    p = ops.prepare_deferred("tree_verify", variant, **dev, split_chunk=split_chunk)
    got = _captured_results(p, message)
    if got is None:
        return
    want = ops.function("tree_verify", variant, split_chunk=split_chunk)(**case.args)
    for name in ("out", "lse"):
        assert_bit_exact(to_host("cupy", getattr(got, name)), getattr(want, name), what=name, spec_id="TV.3.7")


@pytest.mark.spec("TV.3.7")
def test_tree_verify_deferred_checks_shapes_on_the_host(impl):
    from kernels_cu import ops

    variant = _deferred_variant(impl, "tree_verify")
    cp = _lib(impl, "cupy")
    args = _verify_case().args
    dev = _on_device(cp, args)
    with pytest.raises(InputError, match="prefix_lens: deferred checks take device arrays"):
        ops.prepare_deferred("tree_verify", variant, **{**dev, "prefix_lens": args["prefix_lens"]}, max_context=4096)
    with pytest.raises(InputError, match=r"max_context: 5 is outside 6\.\.262144"):
        ops.prepare_deferred("tree_verify", variant, **dev, max_context=5)
    with pytest.raises(InputError, match=r"softmax_scale"):
        ops.prepare_deferred("tree_verify", variant, **{**dev, "softmax_scale": -1.0}, max_context=4096)
    with pytest.raises(InputError, match=r"visibility: shape \(2, 6, 2\)"):
        vis = cp.zeros((2, 6, 2), cp.uint32)
        ops.prepare_deferred("tree_verify", variant, **{**dev, "visibility": vis}, max_context=4096)


@pytest.mark.spec("DT.4.4")
@pytest.mark.parametrize("lib_name,dtype", [("cupy", "fp32"), ("torch", "fp32"), ("torch", "bf16")])
@pytest.mark.parametrize("V", [300, 5000])
def test_draft_topk_device_arrays(impl, lib_name, dtype, V):
    """One block per row (V 300) and the split and merge kernels (V 5,000): device logits in, device results out,
    the numpy call's bits."""
    lib = _lib(impl, lib_name)
    rng = np.random.default_rng(13)
    x = hh.logit_rows(rng, (2, 3, V), np.float32, "normal")
    x[0, 1, ::7] = -np.inf
    x = x.astype(BF16 if dtype == "bf16" else np.float32)
    want = run(impl, hh.topk_logits_case(x, 16))
    if dtype == "bf16":  # numpy hands bf16 over as raw 16-bit words
        dev = lib.from_numpy(x.view(np.int16)).cuda().view(lib.bfloat16)
    else:
        dev = to_dev(lib, lib_name, x)
    got = run(impl, hh.topk_logits_case(dev, 16))
    for f in TopK.FIELDS:
        y = getattr(got, f)
        assert type(y).__module__.split(".")[0] == lib_name, f"{f} came back as {type(y)}"
        assert_bit_exact(to_host(lib_name, y), getattr(want, f), what=f, spec_id="DT.4.4")
    bad = x.copy()
    bad[1, 2, V - 1] = np.inf
    bad_dev = (
        lib.from_numpy(bad.view(np.int16)).cuda().view(lib.bfloat16) if dtype == "bf16" else to_dev(lib, lib_name, bad)
    )
    with pytest.raises(InputError, match=rf"logits: \+inf at \[request 1, depth 2, token {V - 1}\]"):
        run(impl, hh.topk_logits_case(bad_dev, 16))


# One bad value per check of DT.1.2 the device makes (the first in C order is named, as on the host).
DT_DEFERRED_BAD = {
    "nan_split": ((1, 2, 4097), np.nan, r"logits: NaN at \[request 1, depth 2, token 4097\]"),
    "inf_first": ((0, 0, 0), np.inf, r"logits: \+inf at \[request 0, depth 0, token 0\]"),
    "inf_last": ((1, 2, -1), np.inf, r"logits: \+inf at \[request 1, depth 2, token {last}\]"),
}


@pytest.mark.spec("DT.4.5")
@pytest.mark.parametrize("V", [300, 5000])
@pytest.mark.parametrize("bad", [None, *DT_DEFERRED_BAD])
def test_draft_topk_deferred_checks(impl, V, bad):
    """The deferred path: a captured launch gives the checked call's bits (-inf is a masked token, not an
    error); a NaN or +inf logit gets the contract's error naming its index, raised when the results are read."""
    from kernels_cu import ops

    variant = _deferred_variant(impl, "draft_topk")
    cp = _lib(impl, "cupy")
    x = hh.logit_rows(np.random.default_rng(17), (2, 3, V), np.float32, "normal")
    x[0, 1, ::5] = -np.inf
    message = None
    if bad is not None:
        where, value, message = DT_DEFERRED_BAD[bad]
        if where[2] >= V:
            pytest.skip(f"token {where[2]} is past V={V}")
        x[where] = value
        message = message.format(last=V - 1)
        with pytest.raises(InputError, match=message):  # the host-checked call names the same error
            ops.prepare("draft_topk", variant, x, 16).finish()
    got = _captured_results(ops.prepare_deferred("draft_topk", variant, cp.asarray(x), 16), message)
    if got is None:
        return
    want = ops.function("draft_topk", variant)(x, 16)
    for f in TopK.FIELDS:
        assert_bit_exact(to_host("cupy", getattr(got, f)), getattr(want, f), what=f, spec_id="DT.4.5")


@pytest.mark.spec("DT.4.5")
def test_draft_topk_deferred_checks_shapes_on_the_host(impl):
    from kernels_cu import ops

    variant = _deferred_variant(impl, "draft_topk")
    cp = _lib(impl, "cupy")
    x = np.zeros((1, 2, 8), np.float32)
    with pytest.raises(InputError, match="logits: deferred checks take device arrays"):
        ops.prepare_deferred("draft_topk", variant, x, 4)
    with pytest.raises(InputError, match=r"K: 9 > V=8"):
        ops.prepare_deferred("draft_topk", variant, cp.asarray(x), 9)
    with pytest.raises(InputError, match=r"logits: shape \(8,\) has 1 dims, expected 3"):
        ops.prepare_deferred("draft_topk", variant, cp.asarray(x[0, 0]), 4)


@pytest.mark.spec("TV.3.7")
def test_tree_verify_deferred_replans_when_lengths_change(impl):
    """One captured deferred call, replayed after the caller changed its device lengths, plans the splits for the
    lengths it finds at each replay (the batch-invariant rule per request; the planned variant's schedule for the
    batch, which moves with it: on 132 SMs a target of 10, 8 and 19 key blocks a CTA for these three batches, the
    last two 2-tile requests of 40,006 keys filling one wave) and gives the checked call's bits for them. A plan
    kept from an earlier replay, counted on part of the batch, or a unit table missing a row tile, would give other
    splits or other rows, so other bits."""
    from kernels_cu import ops, runtime
    from kernels_cu.arrays import check, driver

    variant = _deferred_variant(impl, "tree_verify")
    torch = _lib(impl, "torch")
    chain = np.arange(-1, 5, dtype=np.int32)
    case = hh.paged_case(np.random.default_rng(37), BF16, [chain, chain], [40_000, 40_000], 64, 16)  # 2 row tiles

    def dev(a):  # numpy hands bf16 and uint32 over as raw words of the same width
        if a.dtype in (BF16, np.uint32):
            raw = torch.from_numpy(a.view(np.int16 if a.dtype == BF16 else np.int32)).cuda()
            return raw.view(torch.bfloat16 if a.dtype == BF16 else torch.uint32)
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()

    d = {k: dev(v) if isinstance(v, np.ndarray) else v for k, v in case.args.items()}
    p = ops.prepare_deferred("tree_verify", variant, **d, max_context=40_006)
    stream = p.staging.g.stream
    graph = runtime.capture_graph(stream, [p.launch])
    try:
        for lens in ([40_000, 700], [1_000, 30_000], [40_000, 40_000]):
            d["prefix_lens"].copy_(torch.tensor(lens, dtype=torch.int32))
            torch.cuda.synchronize()
            check(driver().cuGraphLaunch(graph[1], stream.handle))
            got = p.results()
            want = ops.function("tree_verify", variant)(**{**case.args, "prefix_lens": np.array(lens, np.int32)})
            for name in ("out", "lse"):
                x, w = getattr(got, name), getattr(want, name)
                h = x.view(torch.int16).cpu().numpy().view(BF16) if w.dtype == BF16 else x.cpu().numpy()
                assert_bit_exact(h, w, what=f"{name} at lengths {lens}", spec_id="TV.3.7")
    finally:
        runtime.destroy_graph(*graph)
        p.staging.close()

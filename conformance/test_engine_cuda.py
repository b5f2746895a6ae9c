"""The engine's CUDA backend (spec/engine.md EN.5): the same kernels as the harness's NVRTC build, bit for bit,
for every variant of every op; and greedy decoding on the GPU (dense layers by the engine's own kernels)
equal to AR greedy."""

from __future__ import annotations

import dataclasses
import pathlib

import ml_dtypes
import numpy as np
import pytest

import contract
import kdtr
from harness import decoding, engine, kernel_mutants
from harness.cases import fixture_args
from harness.compare import assert_bit_exact, assert_close
from harness.decoding import BUDGET, DEPTH, MAX_NEW, N_PROMPTS, NOISE, make_prompts
from harness.spec import clause
from kernels_cu import ops, specs

ROOT = pathlib.Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine_cuda():
    try:
        have = engine.cuda_variants()
    except Exception as e:  # the engine is not built: the conformance conftest's tools rule applies
        pytest.skip(f"kdtree-engine: {e}")
    if not have:
        pytest.fail("kdtree-engine was built without its CUDA backend")
    return have


def _chain_visibility(bs: int, Q: int) -> np.ndarray:
    W = (Q + 31) // 32
    vis = np.zeros((bs, Q, W), np.uint32)
    for i in range(Q):
        for j in range(i + 1):
            vis[:, i, j // 32] |= np.uint32(1 << (j % 32))
    return vis


def split_kv_case(dtype, seed: int = 0) -> dict:
    """A tree_verify call whose long request is split into several KV chunks (the combine kernel runs) and
    whose short one is not; pages shuffled."""
    rng = np.random.default_rng(seed)
    bs, Q, H, page = 2, 17, 8, 16
    prefix = np.array([3000, 40], np.int32)
    need = [(int(p) + Q + page - 1) // page for p in prefix]
    pages = rng.permutation(sum(need)).astype(np.int32)
    table = np.zeros((bs, max(need)), np.int32)
    table[0, : need[0]], table[1, : need[1]] = pages[: need[0]], pages[need[0] :]
    kv = rng.standard_normal((sum(need), page, 576)).astype(np.float32)
    q = (rng.standard_normal((bs, Q, H, 576)) * 0.5).astype(np.float32)
    if dtype == "bf16":
        kv, q = kv.astype(ml_dtypes.bfloat16), q.astype(ml_dtypes.bfloat16)
    return {
        "q": q,
        "kv_cache": kv,
        "block_table": table,
        "prefix_lens": prefix,
        "visibility": _chain_visibility(bs, Q),
        "softmax_scale": 192**-0.5,
    }


def cases(slug: str) -> list[tuple[str, dict]]:
    """Inputs for one op: its golden fixtures, and for tree_verify the split-KV cases."""
    out = [(p.stem, fixture_args(kdtr.load(p))) for p in sorted((ROOT / "fixtures" / slug).glob("*.kdtr"))]
    if slug == "tree_verify":
        out += [(f"split_{dt}", split_kv_case(dt)) for dt in ("fp32", "bf16")]
    return out


def nvrtc_outputs(spec: specs.KernelSpec, args: dict) -> dict[str, np.ndarray]:
    """The harness's NVRTC build of `spec` on a copy of args (the in-place commit's cache comes back too)."""
    c = contract.OPS[spec.slug]
    mine = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    fn = ops._module(spec.slug).bind(spec)  # this spec exactly (a mutant's patched one too)
    res = fn(**mine)
    out = {name: np.asarray(getattr(res, name)) for name in c.output_names}
    for name in c.in_place:
        if mine.get(name) is not None:
            out[name] = mine[name]
    return out


def engine_outputs(spec: specs.KernelSpec, args: dict) -> dict[str, np.ndarray]:
    c = contract.OPS[spec.slug]
    checked = c.validate(**args)
    return engine.run_op(spec.slug, c.kdtr_inputs(checked.args), device="cuda", variant=spec.variant)


def paired_outputs(spec: specs.KernelSpec, args: dict):
    """(name, NVRTC output, engine output) per output of one call, the NVRTC side viewed in the engine's
    dtype where only the type differs (bf16 as ml_dtypes on one side, raw 16-bit words on the other)."""
    want, got = nvrtc_outputs(spec, args), engine_outputs(spec, args)
    for name, w in want.items():
        g, w = np.asarray(got[name]), np.asarray(w)
        yield name, (w.view(g.dtype) if w.dtype != g.dtype and w.itemsize == g.itemsize else w), g


def differences(spec: specs.KernelSpec, args: dict) -> list[str]:
    return [n for n, w, g in paired_outputs(spec, args) if w.shape != g.shape or w.tobytes() != g.tobytes()]


@pytest.mark.spec("EN.5.1")
@pytest.mark.parametrize("name", [s.name for s in specs.SPECS])
def test_engine_cuda_variant_is_the_nvrtc_build_bit_for_bit(engine_cuda, name):
    spec = specs.get(*name.split(":"))
    if (spec.slug, spec.variant) not in engine_cuda:
        pytest.fail(f"{name} is in kernels_cu/specs.py but not compiled into the engine (make setup)")
    from harness import device

    if not spec.runs_on(device.probe().arch):
        pytest.skip(f"{name} is built for {', '.join(spec.archs)}, this GPU is {device.probe().arch}")
    for label, args in cases(spec.slug):
        for out_name, w, g in paired_outputs(spec, args):
            assert_bit_exact(g, w, what=out_name, spec_id="EN.5.1", context={"variant": name, "case": label})


@pytest.mark.spec("EN.5.1")
@pytest.mark.parametrize("mutant", ["k_tb_mask_without_self", "k_ta_bonus_from_root", "k_tv_tree_rows_shifted"])
def test_bit_identity_check_catches_a_broken_kernel(engine_cuda, mutant):
    """The comparison above fails when the two builds differ: the NVRTC side runs a deliberately broken kernel."""
    slug, old, new = kernel_mutants.MUTANTS[mutant]
    spec = specs.for_op(slug)[0]
    broken = dataclasses.replace(spec, patches=((old, new),))
    assert any(differences(broken, args) for _, args in cases(slug)), f"{mutant}: no output differed"


# --- EN.5.2 decoding on the GPU ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from reference.model import Config, Model

    path = tmp_path_factory.mktemp("model") / "model.kdtr"
    Model.random(Config(), seed=1).save(path)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("decode-cuda")


def cuda_decode(model_file, prompts, workdir, mode, max_new, **opts):
    return decoding.engine_decode(model_file, prompts, workdir, mode=mode, max_new=max_new, device="cuda", **opts)


@pytest.fixture(scope="module")
def cuda_ar(engine_cuda, model_file, work):
    return cuda_decode(model_file, make_prompts(N_PROMPTS), work / "ar", "ar", MAX_NEW, dump_cache=True)


@pytest.fixture(scope="module")
def cuda_tree(engine_cuda, model_file, work):
    opts = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE, "dump_cache": True}
    return cuda_decode(model_file, make_prompts(N_PROMPTS), work / "dd", "ddtree", MAX_NEW, **opts)


@pytest.mark.spec("EN.5.2")
def test_cuda_ar_equals_golden_ar(request, model_file, work, cuda_ar):
    prompts = make_prompts(N_PROMPTS)
    golden = decoding.golden_decode(model_file, prompts, work / "golden", mode="ar", max_new=MAX_NEW)

    def rerun(p, n):
        return (
            decoding.golden_decode(model_file, p, work / "golden2", mode="ar", max_new=n),
            cuda_decode(model_file, p, work / "ar2", "ar", n),
        )

    eq = decoding.greedy_equivalence(prompts, MAX_NEW, golden, cuda_ar, rerun)
    decoding.report(request, "engine-cuda ar vs golden ar", eq)
    assert not eq.failures, eq.summary()
    assert eq.compared >= N_PROMPTS * MAX_NEW


@pytest.mark.spec("EN.5.2")
def test_cuda_ddtree_equals_cuda_ar(request, model_file, work, cuda_ar, cuda_tree):
    def rerun(p, n):
        return (
            cuda_decode(model_file, p, work / "ar3", "ar", n),
            cuda_decode(model_file, p, work / "dd3", "ddtree", n, budget=BUDGET, depth=DEPTH, noise=NOISE),
        )

    eq = decoding.greedy_equivalence(make_prompts(N_PROMPTS), MAX_NEW, cuda_ar, cuda_tree, rerun)
    decoding.report(request, f"engine-cuda ddtree B={BUDGET} vs engine-cuda ar", eq)
    assert not eq.failures, eq.summary()
    assert eq.compared >= N_PROMPTS * MAX_NEW
    acc = cuda_tree["accept_lens"][cuda_tree["accept_lens"] >= 0]
    request.node.user_properties.append(("acceptance", {"B": BUDGET, "mean_accepted_drafts": float(acc.mean())}))
    assert acc.mean() >= 2.0, f"mean accepted drafts per round {acc.mean():.2f} < 2 at B={BUDGET}"


@pytest.mark.spec("EN.5.2")
def test_cuda_committed_cache_is_the_ar_cache(request, cuda_ar, cuda_tree):
    tol = clause("EN.5.2").tolerance()
    exact = compared = 0
    for b in range(N_PROMPTS):
        if not np.array_equal(cuda_tree["tokens"][b], cuda_ar["tokens"][b]):
            continue  # an allowed divergence: different tokens, different rows
        n = min(int(cuda_tree["lengths"][b]), int(cuda_ar["lengths"][b]))
        committed, ar = cuda_tree["committed"][:, b, :n], cuda_ar["cache"][:, b, :n]
        assert_close(
            committed.astype(np.float64), ar.astype(np.float64), what="committed rows", spec_id="EN.5.2",
            context={"request": b}, **tol,
        )  # fmt: skip
        # no committed row changes afterwards (the commit only copies rows)
        assert_bit_exact(cuda_tree["cache"][:, b, :n], committed, what="final cache", spec_id="EN.5.2")
        compared += 1
        exact += bool(np.array_equal(committed, ar))
    request.node.user_properties.append(("bit_exact_requests", f"{exact} of {compared}"))
    print(f"committed caches bit-exact with AR for {exact} of {compared} requests")
    assert compared >= N_PROMPTS // 2


# --- EN.5.3 the drafter's top-k by the draft_topk kernel, and the decode's traffic ------------------------------
@pytest.fixture(scope="module")
def cuda_tree_host_topk(engine_cuda, model_file, work):
    """The same DDTree decode with the drafter's top-k on the CPU (--host-topk: the path before the kernel)."""
    opts = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE, "host_topk": True}
    return cuda_decode(model_file, make_prompts(N_PROMPTS), work / "dd-host", "ddtree", MAX_NEW, **opts)


def per_round(run: dict) -> dict[str, dict[str, float]]:
    """Every phase's traffic per decode round (a round runs every unfinished request)."""
    rounds = int(run["rounds"].max())
    return {ph: {c: n / rounds for c, n in decoding.traffic(run, ph).items()} for ph in decoding.IO_PHASES}


@pytest.mark.spec("EN.5.3")
def test_cuda_drafter_topk_is_the_kernel(request, cuda_tree):
    """The draft_topk phase moves exactly the kernel path's bytes: each round one upload of its requests'
    perturbed logits and one download of their top-k, and waits for nothing else (the tiny model's rows take
    one split: no workspace)."""
    from reference.model import Config

    assert cuda_tree["metadata"]["draft_topk"].startswith("cuda draft_topk:"), cuda_tree["metadata"]
    V = Config().vocab
    K = min(BUDGET, V)
    request_rounds, rounds = int(cuda_tree["rounds"].sum()), int(cuda_tree["rounds"].max())
    want = {
        "h2d_bytes": request_rounds * DEPTH * V * 4,
        "d2h_bytes": request_rounds * DEPTH * K * 8,
        "h2d_copies": rounds,
        "d2h_copies": rounds,
        "syncs": 2 * rounds,
    }
    request.node.user_properties.append(("traffic_per_round", per_round(cuda_tree)))
    assert decoding.traffic(cuda_tree, "draft_topk") == want
    drafter = decoding.traffic(cuda_tree, "drafter")  # the top-k is inside it, beside the drafter's forwards
    assert all(drafter[c] >= n for c, n in want.items()) and drafter["syncs"] > want["syncs"]


@pytest.mark.spec("EN.5.3")
def test_cuda_host_topk_moves_nothing_for_the_topk(request, model_file, work, cuda_tree, cuda_tree_host_topk):
    """--host-topk (the path before) runs the CPU op: no traffic in its phase, the same tokens; both paths'
    traffic per round goes in the report."""
    before, after = cuda_tree_host_topk, cuda_tree
    assert before["metadata"]["draft_topk"] == "cpu"
    assert set(decoding.traffic(before, "draft_topk").values()) == {0}
    assert decoding.traffic(before, "decode")["syncs"] > 0  # the counters run on this path too

    def rerun(p, n):
        kw = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE}
        return (
            cuda_decode(model_file, p, work / "dd-host2", "ddtree", n, host_topk=True, **kw),
            cuda_decode(model_file, p, work / "dd-kernel2", "ddtree", n, **kw),
        )

    eq = decoding.greedy_equivalence(make_prompts(N_PROMPTS), MAX_NEW, before, after, rerun)
    decoding.report(request, "engine-cuda ddtree, draft_topk kernel vs --host-topk", eq)
    rates = {"before": per_round(before), "after": per_round(after)}
    request.node.user_properties.append(("traffic_per_round", rates))
    for name, r in rates.items():
        io, tk = r["decode"], r["draft_topk"]
        print(
            f"traffic per round, {name} (B={BUDGET}): H2D {io['h2d_bytes']:.0f} B in {io['h2d_copies']:.1f} copies, "
            f"D2H {io['d2h_bytes']:.0f} B in {io['d2h_copies']:.1f} copies, {io['syncs']:.1f} syncs; of which the "
            f"top-k H2D {tk['h2d_bytes']:.0f} B, D2H {tk['d2h_bytes']:.0f} B, {tk['syncs']:.1f} syncs"
        )
    assert not eq.failures, eq.summary()


@pytest.mark.spec("EN.5.3")
def test_cuda_ddtree_equals_cpu_ddtree(request, model_file, work, cuda_tree):
    """The GPU decode (the kernel's top-k) gives the CPU backend's DDTree tokens; the rounds whose acceptance
    is the same are reported (a log-prob within DT.2.4 but not the CPU's bits can change a tree, not a token)."""
    kw = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE}
    prompts = make_prompts(N_PROMPTS)
    cpu = decoding.engine_decode(model_file, prompts, work / "cpu-dd", mode="ddtree", max_new=MAX_NEW, **kw)

    def rerun(p, n):
        return (
            decoding.engine_decode(model_file, p, work / "cpu-dd2", mode="ddtree", max_new=n, **kw),
            cuda_decode(model_file, p, work / "dd4", "ddtree", n, **kw),
        )

    eq = decoding.greedy_equivalence(prompts, MAX_NEW, cpu, cuda_tree, rerun)
    decoding.report(request, "engine-cuda ddtree vs engine-cpu ddtree", eq)
    same = cpu["accept_lens"].shape == cuda_tree["accept_lens"].shape and bool(
        np.array_equal(cpu["accept_lens"], cuda_tree["accept_lens"])
    )
    request.node.user_properties.append(("same_acceptance_as_cpu", same))
    assert not eq.failures, eq.summary()

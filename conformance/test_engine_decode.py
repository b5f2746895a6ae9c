"""Decoding with the MLA + MoE model (spec/engine.md EN.4): the golden numpy model, the engine's AR and
DDTree greedy decoding through the three ops, their token-for-token and cache equivalence, acceptance."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from harness import decoding, kdtree_cpu, tools
from harness.compare import assert_bit_exact, assert_close
from harness.spec import clause
from reference import drafter
from reference.model import Config, Model, attend_latent, rmsnorm

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL_SEED = 1
N_PROMPTS, MAX_NEW, BUDGET, DEPTH, NOISE = (decoding.N_PROMPTS, decoding.MAX_NEW, decoding.BUDGET, decoding.DEPTH,
                                            decoding.NOISE)  # fmt: skip
make_prompts = decoding.make_prompts
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def engine_built(request):
    tools.required_binary(request.config, "kdtree-engine")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "model.kdtr"
    Model.random(Config(), seed=MODEL_SEED).save(path)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("decode")


@pytest.fixture(scope="module")
def engine_ar(engine_built, model_file, work):
    return decoding.engine_decode(
        model_file, make_prompts(N_PROMPTS), work / "ar", mode="ar", max_new=MAX_NEW, dump_cache=True
    )


def ddtree(model_file, prompts, workdir, max_new, budget, dump_cache=False):
    opts = {"budget": budget, "depth": DEPTH, "noise": NOISE, "dump_cache": dump_cache}
    return decoding.engine_decode(model_file, prompts, workdir, mode="ddtree", max_new=max_new, **opts)


# --- EN.4.1 the golden model ------------------------------------------------------------------------------
def non_absorbed_logits(model: Model, tokens: np.ndarray) -> np.ndarray:
    """Causal logits of a whole sequence with MLA written out per head (keys c_kv·W_UK ‖ k_pe, values
    c_kv·W_UV, attention in float64): the form the absorbed decode path must equal."""
    c, n = model.cfg, len(tokens)
    pos = np.arange(n)
    x = model.w["embed"][tokens]
    for layer in range(c.n_layers):
        h = rmsnorm(x, model.w_(layer, "attn_norm"), c.rms_eps)
        qa = rmsnorm(h @ model.w_(layer, "wq_a"), model.w_(layer, "q_norm"), c.rms_eps)
        q = (qa @ model.w_(layer, "wq_b")).reshape(n, c.n_heads, c.nope + c.rope)
        q_nope, q_pe = q[..., : c.nope].astype(np.float64), model.rope(q[..., c.nope :], pos).astype(np.float64)
        kv = h @ model.w_(layer, "wkv_a")
        c_kv = rmsnorm(kv[:, : c.kv_lora], model.w_(layer, "kv_norm"), c.rms_eps).astype(np.float64)
        k_pe = model.rope(kv[:, c.kv_lora :], pos).astype(np.float64)
        k_nope = np.einsum("tc,hkc->thk", c_kv, model.w_uk(layer))  # per-head keys
        v = np.einsum("tc,hcv->thv", c_kv, model.w_uv(layer))  # per-head values
        s = (np.einsum("ihk,thk->hit", q_nope, k_nope) + np.einsum("ihr,tr->hit", q_pe, k_pe)) * c.softmax_scale
        s = np.where(np.tril(np.ones((n, n), bool))[None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hit,thv->ihv", p, v).reshape(n, -1).astype(np.float32)
        x = model.ffn(layer, x + o @ model.w_(layer, "wo"))
    return model.logits(x)


def absorbed_logits(model: Model, tokens: np.ndarray) -> np.ndarray:
    """The same sequence through the model's own (absorbed, latent-cache) forward."""
    n, scale = len(tokens), model.cfg.softmax_scale

    def attend(layer, q, rows):
        return np.stack([attend_latent(q[i], rows[: i + 1], scale) for i in range(n)])

    return model.forward(tokens, np.arange(n), attend)


@pytest.mark.spec("EN.4.1")
def test_golden_absorbed_decode_is_mla(tmp_path):
    model = Model.random(Config(), seed=MODEL_SEED)
    tokens = np.array(make_prompts(1)[0] + list(range(100, 120)))
    tol = clause("EN.4.1").tolerance()
    want = non_absorbed_logits(model, tokens).astype(np.float64)
    assert_close(absorbed_logits(model, tokens).astype(np.float64), want, what="logits", spec_id="EN.4.1", **tol)
    model.save(tmp_path / "m.kdtr")
    back = Model.load(tmp_path / "m.kdtr")
    assert back.cfg == model.cfg and set(back.w) == set(model.w)
    for k, a in model.w.items():
        assert_bit_exact(back.w[k], a, what=k, spec_id="EN.4.1")


# --- EN.4.2 the reference ops compose; one drafter ------------------------------------------------------------
@pytest.mark.spec("EN.4.2")
def test_golden_ddtree_through_reference_ops_equals_golden_ar(request, engine_built, model_file, work):
    prompts = make_prompts(3, seed=5)
    kw = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE}
    tree = decoding.golden_decode(model_file, prompts, work / "g-dd", mode="ddtree", max_new=48, **kw)
    ar = decoding.golden_decode(model_file, prompts, work / "g-ar", mode="ar", max_new=48)

    def rerun(p, n):
        return (
            decoding.golden_decode(model_file, p, work / "g-ar2", mode="ar", max_new=n),
            decoding.golden_decode(model_file, p, work / "g-dd2", mode="ddtree", max_new=n, **kw),
        )

    eq = decoding.greedy_equivalence(prompts, 48, ar, tree, rerun)
    decoding.report(request, "golden ddtree vs golden ar", eq)
    assert not eq.failures, eq.summary()
    # the engine's drafter, tree build and walk make the same rounds as the numpy ones
    engine = ddtree(model_file, prompts, work / "e-dd3", 48, BUDGET)
    assert_bit_exact(engine["accept_lens"], tree["accept_lens"], what="accept_lens", spec_id="EN.4.2")


@pytest.mark.spec("EN.4.2")
def test_drafter_noise_is_the_same_bits_in_numpy_and_cpp(request):
    lib = kdtree_cpu.KdtreeCpu(tools.required_library(request.config, "kdtree_cpu"))
    for seed, P, d in [(0, 0, 1), (7, 123, 5), (2**63 - 1, 1000, 32), (12345, 1, 8)]:
        want = drafter.noise(seed, P, d, 600)
        assert_bit_exact(lib.draft_noise(seed, P, d, 600), want, what="noise", spec_id="EN.4.2")
    n = drafter.noise(3, 10, 2, 200_000)
    assert abs(n.mean()) < 0.01 and abs(n.var() - 1) < 0.02


# --- EN.4.3 engine AR = golden AR ----------------------------------------------------------------------------
@pytest.mark.spec("EN.4.3")
def test_engine_ar_equals_golden_ar(request, model_file, work, engine_ar):
    prompts = make_prompts(N_PROMPTS)
    golden = decoding.golden_decode(model_file, prompts, work / "golden", mode="ar", max_new=MAX_NEW)

    def rerun(p, n):
        return (
            decoding.golden_decode(model_file, p, work / "golden2", mode="ar", max_new=n),
            decoding.engine_decode(model_file, p, work / "ar2", mode="ar", max_new=n),
        )

    eq = decoding.greedy_equivalence(prompts, MAX_NEW, golden, engine_ar, rerun)
    decoding.report(request, "engine ar vs golden ar", eq)
    assert not eq.failures, eq.summary()
    assert eq.compared >= N_PROMPTS * MAX_NEW
    diverged = {b for b, _, _ in eq.allowed}
    tol = clause("EN.4.3").tolerance()
    for b in range(N_PROMPTS):
        if b in diverged:
            continue  # the caches hold different tokens after the divergence
        n = int(golden["lengths"][b])
        assert int(engine_ar["lengths"][b]) == n
        assert_close(
            engine_ar["cache"][:, b, :n].astype(np.float64),
            golden["cache"][:, b, :n].astype(np.float64),
            what=f"latent cache of request {b}",
            spec_id="EN.4.3",
            **tol,
        )


# --- EN.4.4-EN.4.6 engine DDTree = engine AR ------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine_tree(model_file, work, engine_built):
    return ddtree(model_file, make_prompts(N_PROMPTS), work / "dd", MAX_NEW, BUDGET, dump_cache=True)


@pytest.mark.spec("EN.4.4")
def test_engine_ddtree_equals_engine_ar(request, model_file, work, engine_ar, engine_tree):
    def rerun(p, n):
        return (
            decoding.engine_decode(model_file, p, work / "ar3", mode="ar", max_new=n),
            ddtree(model_file, p, work / "dd3", n, BUDGET),
        )

    eq = decoding.greedy_equivalence(make_prompts(N_PROMPTS), MAX_NEW, engine_ar, engine_tree, rerun)
    decoding.report(request, f"engine ddtree B={BUDGET} vs engine ar", eq)
    assert not eq.failures, eq.summary()
    assert eq.compared >= N_PROMPTS * MAX_NEW


@pytest.mark.spec("EN.4.4")
@pytest.mark.parametrize("budget", [4, 64])
def test_engine_ddtree_equals_engine_ar_other_budgets(request, model_file, work, engine_ar, budget):
    prompts = make_prompts(N_PROMPTS)[:4]
    tree = ddtree(model_file, prompts, work / f"dd{budget}", MAX_NEW, budget)
    ar = {k: engine_ar[k][:4] for k in ("tokens", "margins")}

    def rerun(p, n):
        return (
            decoding.engine_decode(model_file, p, work / f"ar{budget}", mode="ar", max_new=n),
            ddtree(model_file, p, work / f"dd{budget}b", n, budget),
        )

    eq = decoding.greedy_equivalence(prompts, MAX_NEW, ar, tree, rerun)
    decoding.report(request, f"engine ddtree B={budget} vs engine ar", eq)
    assert not eq.failures, eq.summary()


@pytest.mark.spec("EN.4.5")
def test_committed_cache_after_every_round_is_the_ar_cache(engine_ar, engine_tree):
    for b in range(N_PROMPTS):
        if not np.array_equal(engine_tree["tokens"][b], engine_ar["tokens"][b]):
            continue  # an allowed divergence (EN.4.4 reports it): different tokens, different rows
        n_tree, n_ar = int(engine_tree["lengths"][b]), int(engine_ar["lengths"][b])
        n = min(n_tree, n_ar)
        assert n_tree >= n_ar, f"request {b}: DDTree committed {n_tree} rows, AR {n_ar}"
        ctx = {"request": b}
        # each row as the round that committed it left it ...
        committed = engine_tree["committed"][:, b, :n_tree]
        assert_bit_exact(
            committed[:, :n], engine_ar["cache"][:, b, :n], what="committed rows", spec_id="EN.4.5", context=ctx
        )
        # ... and no committed row changed afterwards
        assert_bit_exact(
            engine_tree["cache"][:, b, :n_tree], committed, what="final cache", spec_id="EN.4.5", context=ctx
        )


@pytest.mark.spec("EN.4.6")
def test_acceptance_is_partial_and_branching(request, engine_tree):
    acc = engine_tree["accept_lens"]
    rounds = acc >= 0
    mean = float(acc[rounds].mean())
    off_branch = float((engine_tree["path_max_rank"][rounds] > 0).mean())
    request.node.user_properties.append(
        ("acceptance", {"B": BUDGET, "mean_accepted_drafts": mean, "off_first_branch_rounds": off_branch})
    )
    print(f"B={BUDGET}: mean accepted drafts {mean:.2f}, rounds leaving the first-ranked branch {off_branch:.0%}")
    assert mean >= 2.0, f"mean accepted drafts per round {mean:.2f} < 2 at B={BUDGET}"
    assert (acc[rounds] < DEPTH).any(), "every round accepted the whole depth: acceptance is not partial"
    assert off_branch >= 0.1, f"only {off_branch:.0%} of accepted paths leave the first-ranked branch"


@pytest.mark.spec("EN.5.3")
def test_cpu_decode_reports_its_topk_and_no_device_traffic(model_file, work, engine_ar, engine_tree):
    """The CPU backend's report: the drafter's top-k by the CPU op (`none` in AR mode), its time inside the
    drafter's, every traffic counter zero; --host-topk (the CPU op on any backend) changes nothing here."""
    assert engine_tree["metadata"]["draft_topk"] == "cpu" and engine_ar["metadata"]["draft_topk"] == "none"
    for run in (engine_ar, engine_tree):
        for phase in decoding.IO_PHASES:
            assert set(decoding.traffic(run, phase).values()) == {0}, phase
    assert 0 < float(engine_tree["time_draft_topk"]) <= float(engine_tree["time_drafter"])
    prompts = make_prompts(N_PROMPTS)[:3]
    kw = {"budget": BUDGET, "depth": DEPTH, "noise": NOISE}
    host = decoding.engine_decode(model_file, prompts, work / "host", mode="ddtree", max_new=16, host_topk=True, **kw)
    plain = decoding.engine_decode(model_file, prompts, work / "plain", mode="ddtree", max_new=16, **kw)
    for name in ("tokens", "accept_lens", "path_max_rank"):
        assert_bit_exact(host[name], plain[name], what=name, spec_id="EN.5.3")


@pytest.mark.spec("EN.1.2")
def test_decode_bad_inputs_are_named(engine_built, model_file, tmp_path):
    import subprocess

    exe = tools.binary("kdtree-engine")
    good = tmp_path / "p.kdtr"
    decoding.write_prompts(good, [[1, 2, 3]])
    bad_token = tmp_path / "bad-token.kdtr"
    decoding.write_prompts(bad_token, [[1, 512, 3]])
    base = ["decode", "--model", model_file, "--prompt", good, "--out", tmp_path / "o.kdtr", "--max-new", "4"]
    cases = [
        (base, 2, "--mode: required"),
        (base + ["--mode", "beam"], 2, "--mode: 'beam' is not ar or ddtree"),
        (base + ["--mode", "ar", "--budget", "4"], 2, "--budget: ar mode builds root-only trees"),
        (base + ["--mode", "ddtree"], 2, "--budget: required with --mode ddtree"),
        (base + ["--mode", "ar", "--noise", "nan"], 2, "--noise: 'nan' is not a finite number"),
        (base + ["--mode", "ddtree", "--budget", "4", "--depth", "33"], 2, "--depth: 33 is outside 1..32"),
        (base[:-1] + ["2000", "--mode", "ar"], 2, "past the model's max_pos 1024"),
        ([*base[:4], bad_token, *base[5:], "--mode", "ar"], 1, f"{bad_token}: tokens: [0, 1] = 512 is not a token id"),
        (["decode", "--model", good, *base[3:], "--mode", "ar"], 1, f"{good}: metadata model.vocab is missing"),
    ]
    for args, status, message in cases:
        out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)
        assert out.returncode == status and message in out.stderr, (args, out.returncode, out.stderr)
        assert not (tmp_path / "o.kdtr").exists()

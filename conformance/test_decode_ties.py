"""The golden model's discrete choices at their ties (spec/engine.md EN.4.7), in numpy and in the engine.

A model whose lm_head columns come in identical pairs (2i, 2i+1) ties its greedy choice at every step, and one
whose gate columns come in identical groups ({0, 1, 2}, {3, 4, 5}, {6, 7}) ties its top-2 routing at the
k-th place for most rows: random float32 weights never tie, so these ties are made. The spec's rule is the
lower index in both cases; a greedy token is then always even, and the engine (whose routing differs from
numpy's only in how it sorts) must give the golden model's tokens and cache. Each test also shows that the
rule matters on this model: the other tie rule gives other tokens, or a cache beyond the tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness import decoding, device, engine, tools
from harness.compare import assert_close, check_close
from harness.spec import clause
from reference import decode as golden
from reference import model as model_mod
from reference.model import Config, Model

GROUPS = ((0, 1, 2), (3, 4, 5), (6, 7))
ROUTE = model_mod.route  # the spec's rule (run_golden replaces the module's while it runs)
N, LENGTH, MAX_NEW = 4, 8, 24
pytestmark = pytest.mark.slow


def tied_model(seed: int = 3) -> Model:
    m = Model.random(Config(), seed=seed)
    m.w["lm_head"][:, 1::2] = m.w["lm_head"][:, 0::2]
    for layer in range(m.cfg.dense_layers, m.cfg.n_layers):
        gate = m.w_(layer, "gate")
        for g in GROUPS:
            gate[:, list(g[1:])] = gate[:, [g[0]]]
    return m


def prompts() -> list[list[int]]:
    rng = np.random.default_rng(11)
    return rng.integers(0, Config().vocab, (N, LENGTH)).tolist()


def run_golden(model: Model, route=None) -> tuple[list, np.ndarray, int]:
    """Golden AR on the prompts: runs, the logits of each generated token [N, MAX_NEW, V], and how many
    routed rows had a tie at the k-th place. `route` replaces the routing rule."""
    seen, ties = [], []
    orig_logits = model.logits

    def logits(x):
        seen.append(out := orig_logits(x))
        return out

    def counting_route(scores, k):
        s = -np.sort(-scores, axis=-1)
        ties.append(int(((s[:, k - 1] == s[:, k]) if scores.shape[1] > k else np.zeros(len(s), bool)).sum()))
        return (route or ROUTE)(scores, k)

    model.logits = logits
    model_mod.route = counting_route
    try:
        runs = golden.generate_ar(model, prompts(), MAX_NEW)
    finally:
        del model.logits
        model_mod.route = ROUTE
    return runs, np.stack(seen[LENGTH - 1 : LENGTH - 1 + MAX_NEW], axis=1), sum(ties)


def distinct_margin(logits: np.ndarray) -> np.ndarray:
    """Top logit minus the largest logit below it (the margin between tied pairs)."""
    top = logits.max(axis=-1, keepdims=True)
    return (top - np.where(logits < top, logits, -np.inf).max(axis=-1, keepdims=True))[..., 0]


@pytest.fixture(scope="module")
def model():
    m = tied_model()
    h = np.random.default_rng(0).standard_normal((64, m.cfg.hidden)).astype(np.float32)
    pairs = h @ m.w["lm_head"]
    gate = h @ m.w_(m.cfg.n_layers - 1, "gate")
    if not (np.array_equal(pairs[:, 0::2], pairs[:, 1::2]) and all(
        np.array_equal(gate[:, g[0]], gate[:, i]) for g in GROUPS for i in g
    )):  # fmt: skip
        pytest.skip("this BLAS gives identical columns different values: numpy cannot tie them")
    return m


@pytest.fixture(scope="module")
def model_file(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("ties") / "tied.kdtr"
    model.save(path)
    return path


@pytest.fixture(scope="module")
def golden_ar(model):
    return run_golden(model)


@pytest.fixture(scope="module")
def engine_built(request):
    return tools.required_binary(request.config, "kdtree-engine")


@pytest.mark.spec("EN.4.7")
def test_route_takes_the_lower_experts_at_a_tie():
    scores = np.array(
        [[0.5, 0.7, 0.7, 0.7], [0.9, 0.7, 0.7, 0.7], [0.6, 0.6, 0.6, 0.6], [0.1, 0.2, 0.9, 0.9]], np.float32
    )
    assert ROUTE(scores, 2).tolist() == [[1, 2], [0, 1], [0, 1], [2, 3]]


@pytest.mark.spec("EN.4.7")
def test_golden_greedy_takes_the_lower_token_at_every_tie(golden_ar):
    runs, logits, ties = golden_ar
    tokens = np.stack([r.tokens for r in runs])
    assert all((r.margins == 0).all() for r in runs), "every step must tie (the pairs)"
    assert (tokens % 2 == 0).all(), f"odd tokens chosen at ties: {tokens[tokens % 2 == 1]}"
    assert np.array_equal(tokens, logits.argmax(axis=-1))
    assert ties > N * MAX_NEW, f"only {ties} routed rows tied at the k-th place"
    # the other rule (the higher index) would pick the odd token of the pair at every step
    assert np.array_equal(logits.shape[-1] - 1 - logits[..., ::-1].argmax(axis=-1), tokens + 1)


@pytest.mark.spec("EN.4.7")
def test_engine_resolves_ties_as_the_golden_model(request, engine_built, model, model_file, golden_ar, tmp_path):
    """The engine's tokens are the golden model's, except where two different logits are within δ; its cache
    is the golden one within EN.4.3's tolerance. With the routing rule reversed in numpy, the caches differ
    beyond it: the routing rule is what this compares."""
    runs, logits, _ = golden_ar
    eng = decoding.engine_decode(model_file, prompts(), tmp_path / "ar", mode="ar", max_new=MAX_NEW, dump_cache=True)
    check_engine(eng, runs, logits, "EN.4.7")
    reversed_runs, _, _ = run_golden(model, route=lambda s, k: s.shape[1] - 1 - ROUTE(s[:, ::-1], k))
    tol = clause("EN.4.3").tolerance()
    moved = [
        b
        for b in range(N)
        if check_close(eng["cache"][:, b, : LENGTH - 1 + MAX_NEW], reversed_runs[b].cache, what="cache", **tol)
    ]
    assert moved, "reversing the routing tie rule changed no request's cache: the test cannot see the rule"


def check_engine(eng: dict, runs, logits: np.ndarray, spec_id: str) -> None:
    tokens = np.stack([r.tokens for r in runs])
    assert (eng["tokens"] % 2 == 0).all(), (
        f"the engine chose odd tokens at ties: {eng['tokens'][eng['tokens'] % 2 == 1]}"
    )
    margin = distinct_margin(logits)
    differ = eng["tokens"] != tokens
    first = [int(np.flatnonzero(d)[0]) if d.any() else MAX_NEW for d in differ]
    for b, i in enumerate(first):
        assert i == MAX_NEW or margin[b, i] < decoding.DELTA, (
            f"request {b} step {i}: engine {eng['tokens'][b, i]}, golden {tokens[b, i]} (margin {margin[b, i]})"
        )
        n = LENGTH - 1 + i  # the rows written before any divergence
        assert_close(
            eng["cache"][:, b, :n].astype(np.float64),
            runs[b].cache[:, :n].astype(np.float64),
            what=f"latent cache of request {b}",
            spec_id=spec_id,
            **clause("EN.4.3").tolerance(),
        )


@pytest.mark.spec("EN.4.7", "EN.4.4")
def test_ddtree_on_tied_drafts_equals_ar(engine_built, model_file, tmp_path):
    """Without noise the drafter's log-probs tie in pairs: tree_build ranks tied siblings by their rank, and
    the engine's DDTree tokens are its AR tokens exactly."""
    p = prompts()
    ar = decoding.engine_decode(model_file, p, tmp_path / "ar", mode="ar", max_new=MAX_NEW)
    tree = decoding.engine_decode(
        model_file, p, tmp_path / "dd", mode="ddtree", max_new=MAX_NEW, budget=16, depth=6, noise=0.0
    )
    assert np.array_equal(tree["tokens"], ar["tokens"])
    assert (tree["accept_lens"][tree["accept_lens"] >= 0] > 0).any(), "no draft was ever accepted"


@pytest.mark.spec("EN.4.7", "EN.4.2")
def test_golden_ddtree_on_tied_drafts_equals_golden_ar(model, golden_ar):
    runs, _, _ = golden_ar
    for b, prompt in enumerate(prompts()[:2]):
        tree = golden.generate_ddtree(model, prompt, MAX_NEW, budget=16, depth=6, noise_scale=0.0)
        assert np.array_equal(tree.tokens, runs[b].tokens), f"request {b}"


@pytest.mark.gpu
@pytest.mark.spec("EN.4.7", "EN.5.2", "EN.5.3")
def test_engine_cuda_resolves_ties_as_the_golden_model(request, engine_built, model_file, golden_ar, tmp_path):
    p = device.probe()
    if not p.ok:
        pytest.skip(f"GPU unavailable: {p.reason}")
    if not engine.cuda_variants():  # the conformance stage's engine may be the CPU build: engine_cuda's is not
        why = "the engine was built without its CUDA backend (tools/gpu_suite.sh OUT engine_cuda builds it)"
        tools.missing(request.config, why)
    runs, logits, _ = golden_ar
    kw = {"device": "cuda", "dump_cache": True}
    eng = decoding.engine_decode(model_file, prompts(), tmp_path / "ar", mode="ar", max_new=MAX_NEW, **kw)
    check_engine(eng, runs, logits, "EN.5.2")
    dd = {"mode": "ddtree", "max_new": MAX_NEW, "budget": 16, "depth": 6, "noise": 0.0, "device": "cuda"}
    tree = decoding.engine_decode(model_file, prompts(), tmp_path / "dd", **dd)
    assert np.array_equal(tree["tokens"], eng["tokens"])
    # the tied drafts' top-k came from the draft_topk kernel, which breaks the ties as the CPU op does (EN.5.3)
    assert tree["metadata"]["draft_topk"].startswith("cuda draft_topk:"), tree["metadata"]
    assert decoding.traffic(tree, "draft_topk")["h2d_copies"] == int(tree["rounds"].max())
    host = decoding.engine_decode(model_file, prompts(), tmp_path / "dd-host", host_topk=True, **dd)
    assert np.array_equal(host["tokens"], eng["tokens"])

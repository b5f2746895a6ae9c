"""The adapter layer for external implementations (adapters/, harness/external.py, harness/claims.py): the
protocol refuses a malformed declaration, the registry loads by module:attribute and by entry point, a case
outside a declaration is not claimed (never a bad input), and the example package's right implementation is
certified while its wrong one fails its clauses by ID in a real conformance run."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import contract
from adapters import Capabilities, Implementation, Op
from harness import claims, external, impls, reporting
from harness import strategies as hh

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "kdtree_example_impl"


def _verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    raise AssertionError("not called")


def _case(parents, page_size=16, dtype=np.float32, H=2):
    rng = np.random.default_rng(0)
    pars = [np.asarray(p, np.int32) for p in parents]
    return hh.paged_case(rng, dtype, pars, [5] * len(pars), page_size, H)


# --- the protocol -------------------------------------------------------------------------------------------
def test_protocol_accepts_a_declaration():
    caps = Capabilities(("bfloat16",), {"page_size": {64}}, "chains", batch_invariant=False)
    impl = Implementation("x", "1", {"tree_verify": Op(_verify, caps)})
    caps = impl.caps("tree_verify")
    assert caps.describe() == "dtypes bfloat16; page_size in {64}; trees: chains only; no batch-invariant promise"
    assert not caps.promises("batch_invariant") and caps.promises("deterministic")


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"ops": {"tree_verify": Op(lambda q, kv_cache: None)}}, "does not match the tree_verify contract"),
        ({"ops": {"tree_sort": Op(_verify)}}, "unknown op 'tree_sort'"),
        ({"ops": {"tree_verify": Op(_verify, Capabilities(dtypes=("float16",)))}}, "dtype 'float16'"),
        ({"ops": {"tree_verify": Op(_verify, Capabilities(dims={"heads": {64}}))}}, "dims names 'heads'"),
        ({"ops": {"tree_verify": Op(_verify, Capabilities(dims={"H": 64}))}}, "container of ints"),
        ({"ops": {"tree_verify": Op(_verify, Capabilities(trees="forests"))}}, "trees 'forests'"),
        ({"ops": {"tree_verify": Op(_verify)}, "arrays": "gpu"}, "arrays 'gpu'"),
        ({"ops": {"tree_verify": Op(_verify)}, "name": "has space"}, "letters, digits"),
        ({"ops": {}}, "no ops"),
    ],
    ids=["signature", "op", "dtype", "dim", "dim-not-container", "trees", "arrays", "name", "no-ops"],
)
def test_protocol_refuses_a_bad_declaration(kw, message):
    args = {"name": "x", "version": "1", **kw}
    with pytest.raises((TypeError, ValueError), match=message):
        Implementation(**args)


# --- claims -------------------------------------------------------------------------------------------------
def test_outside_names_what_is_not_declared():
    chains = Capabilities(("float32",), {"page_size": {16}, "H": range(1, 3)}, "chains")
    assert claims.outside(chains, _case([[-1, 0, 1]])) is None
    assert "not a chain" in claims.outside(chains, _case([[-1, 0, 0]]))
    assert "not a chain" in claims.outside(chains, _case([[-1, 0, 1], [-1, 0]]))  # a padded shorter chain
    assert claims.outside(chains, _case([[-1, 0, 1]], page_size=64)) == "page_size=64 (declared: {16})"
    assert claims.outside(chains, _case([[-1, 0, 1]], H=4)) == "H=4 (declared: 1..2)"
    assert "dtype bfloat16" in claims.outside(chains, _case([[-1, 0, 1]], dtype=contract.BF16))


def test_bad_input_is_never_not_claimed():
    """A case the contract refuses lies outside every declaration, yet every implementation must refuse it."""
    case = _case([[-1, 0, 0]], page_size=4)
    bad = case.with_args(q=case.q.astype(np.float16))
    assert claims.outside(Capabilities(("bfloat16",), {"page_size": {64}}, "chains"), bad) is None


def test_promises_name_their_clauses():
    from harness import spec

    assert set(claims.PROMISED_BY) <= set(spec.registry())
    caps = {"tree_verify": Capabilities(batch_invariant=False)}
    assert claims.unpromised(caps, ["TV.3.3"]) == "TV.3.3 needs the batch-invariant promise"
    assert claims.unpromised(caps, ["TV.3.2", "TB.4.2"]) is None  # deterministic; tree_build not declared


def test_every_op_has_its_promise_clauses():
    """Each op's determinism and batch-invariance clauses are in the promise table (draft_topk's too): an
    implementation promising neither gets them not claimed, never a pass."""
    from harness import spec

    titles = {c.id: c.title for c in spec.registry().values()}
    for op, prefix in (("tree_build", "TB"), ("tree_verify", "TV"), ("tree_accept", "TA"), ("draft_topk", "DT")):
        needing = {cid for cid, t in titles.items() if cid.startswith(prefix + ".") and
                   ("Determinism" in t or "Batch invariance" in t or "batch invariance" in t)}  # fmt: skip
        assert needing and needing <= set(claims.PROMISED_BY), (op, needing)
        none = {op: Capabilities(deterministic=False, batch_invariant=False)}
        assert all(claims.unpromised(none, [c]) for c in needing), needing


def test_draft_topk_strategies_draw_inside_a_declaration():
    """A bf16-only draft_topk with V <= 50 and K in {1, 2} gets only such cases from the property strategy."""
    from hypothesis import given, settings

    impl = impls.Impl("x", "external", None, {}, declaration={
        "draft_topk": Capabilities(dtypes=("bfloat16",), dims={"V": range(1, 51), "K": {1, 2}})})  # fmt: skip
    seen = []

    @settings(max_examples=40, database=None)
    @given(c=hh.logits_cases())
    def draw(c):
        seen.append((c.logits.dtype, c.logits.shape[2], c.K))

    token = claims.activate(impl)
    try:
        draw()
    finally:
        claims.deactivate(token)
    assert seen and all(dt == contract.BF16 and V <= 50 and K in (1, 2) and K <= V for dt, V, K in seen), seen


class _FakeDeviceArray:
    """Stands in for a torch CUDA tensor (numpy underneath) for validate_op on a machine without torch."""

    def __init__(self, a):
        self.a, self.shape = a, a.shape

    def is_contiguous(self):
        return self.a.flags.c_contiguous


def test_validate_op_checks_device_inputs_by_the_contract(monkeypatch):
    """torch_inputs.validate_op: the arrays the checks read are copied to the host (a NaN in them is found), the
    others are described by shape and dtype without a copy; the contract's error names the argument."""
    from adapters import torch_inputs

    fake = _FakeDeviceArray
    monkeypatch.setattr(torch_inputs, "is_torch_cuda", lambda x: isinstance(x, fake))
    monkeypatch.setattr(torch_inputs, "host", lambda x: x.a.copy())
    monkeypatch.setattr(torch_inputs, "np_dtype", lambda x: x.a.dtype)
    logits = np.zeros((1, 2, 8), contract.BF16)
    checked = torch_inputs.validate_op(contract.DRAFT_TOPK, fake(logits), 3)
    assert checked.dims["V"] == 8 and checked.args["logits"].dtype == contract.BF16
    logits[0, 1, 5] = np.nan
    with pytest.raises(contract.InputError, match=r"logits: NaN at \[request 0, depth 1, token 5\]"):
        torch_inputs.validate_op(contract.DRAFT_TOPK, fake(logits), 3)
    args = {k: fake(v) if isinstance(v, np.ndarray) else v for k, v in _case([[-1, 0, 1]]).args.items()}
    checked = torch_inputs.validate_op(contract.TREE_VERIFY, **args)
    assert isinstance(checked.args["kv_cache"], contract.ArrayInfo)  # the cache: no copy
    assert isinstance(checked.args["visibility"], np.ndarray)  # read: copied
    with pytest.raises(contract.InputError, match=r"^q: "):
        torch_inputs.validate_op(contract.TREE_VERIFY, **{**args, "q": fake(args["q"].a[..., :512])})
    # a caller's own ArrayInfo (the shape checks' stand-in for a tensor) has no values: refused by name, here and in
    # tree_verify's validate, while the tensors this module describes itself pass
    stand_in = contract.ArrayInfo(args["kv_cache"].a.shape, args["kv_cache"].a.dtype)
    with pytest.raises(contract.InputError, match=r"^kv_cache: expected a torch CUDA tensor, got a contract.ArrayInfo"):
        torch_inputs.validate_op(contract.TREE_VERIFY, **{**args, "kv_cache": stand_in})
    with pytest.raises(contract.InputError, match=r"^kv_cache: expected a torch CUDA tensor, got a contract.ArrayInfo"):
        torch_inputs.validate(**{**args, "kv_cache": stand_in})


def test_capabilities_refuse_an_empty_dtype_list():
    with pytest.raises(ValueError, match=r"dtypes=\(\) takes nothing"):
        Implementation("x", "1", {"tree_verify": Op(_verify, Capabilities(dtypes=()))})


def test_strategy_fitting_under_a_declaration():
    impl = impls.Impl("x", "external", None, {}, declaration={
        "tree_verify": Capabilities(dims={"page_size": {64}}, trees="chains")})  # fmt: skip
    token = claims.activate(impl)
    try:
        pars, page = hh.fit_to_declaration([np.array([-1, 0, 0]), np.array([-1])], 16)
        assert page == 64 and all((p == [-1, 0, 1]).all() for p in pars)
        assert hh.fit_to_declaration([np.array([-1])], 16, strict_pages=True)[1] == 16
    finally:
        claims.deactivate(token)
    assert hh.fit_to_declaration([np.array([-1, 0, 0])], 16)[1] == 16  # no declaration: untouched


# --- the registry -------------------------------------------------------------------------------------------
def test_registry_refuses_unknown_names():
    with pytest.raises(ValueError, match="cannot import no_such_module"):
        impls.expand(["no_such_module:IMPL"])
    with pytest.raises(ValueError, match="adapters has no attribute NOPE"):
        impls.expand(["adapters:NOPE"])
    with pytest.raises(ValueError, match=r"not an adapters\.Implementation"):
        impls.expand(["adapters:Op"])
    assert impls.expand(None) == impls.expand(list(impls.KINDS))  # externals are never in the default


def test_peer_adapters_load_everywhere():
    """The shipped peers import without torch or their packages and say why they cannot run here."""
    for name in ("adapters.flashmla:IMPLEMENTATION", "adapters.flashinfer_mla:IMPLEMENTATION",
                 "adapters.flashinfer_mla:FA2", "adapters.cascade:FLASHMLA_CASCADE"):  # fmt: skip
        ext = external.load(name)
        assert "tree_verify" in ext.ops and ext.arrays == "device"
        impl = impls.get(name)
        assert impl.on_gpu and (impl.why_not or impl.caps("tree_verify") is not None)


# --- the report ---------------------------------------------------------------------------------------------
def test_report_keeps_not_claimed_apart():
    rows = [
        {"clause": "TV.2.1", "impl": "x", "variant": "1", "status": "pass"},
        {"clause": "TV.2.2", "impl": "x", "variant": "1", "status": "not claimed"},
        {"clause": "TV.2.3", "impl": "x", "variant": "1", "status": "fail"},
        {"clause": "TV.2.3", "impl": "x", "variant": "1", "status": "pass"},
        {"clause": "TV.3.4", "impl": "-", "variant": "-", "status": "fail"},
    ]
    by = reporting.by_impl(rows, None)
    assert by == {"x 1": {"pass": ["TV.2.1"], "fail": ["TV.2.3"], "not claimed": ["TV.2.2"], "skip": [], "xfail": []}}
    md = "\n".join(reporting.impl_summary_markdown(by))
    assert "| x 1 | TV.2.1 | TV.2.3 | TV.2.2 | — | — |" in md


# --- the example package, for real --------------------------------------------------------------------------
def _conformance(tmp_path, *impl_names, files=("conformance",), extra=(), profile="quick"):
    """A conformance run of external implementations, as a user runs it: the whole selection by default (only
    the tests of the ops they provide, boundaries and fixtures included). Returns (process, by_impl)."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": profile}
    paths = [str(EXAMPLE), str(ROOT / "examples" / "kdtree_outsider"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *files,
           "--report-dir", str(tmp_path), *(f"--impl={n}" for n in impl_names), *extra]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    report = tmp_path / "conformance.json"
    assert report.is_file(), f"no report ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc, json.loads(report.read_text())["summary"]["by_impl"]


def test_example_package_right_certified_wrong_fails_by_clause(tmp_path):
    """The example's right implementation (which validates with CONTRACT.validate_host, as docs/ADAPTERS.md
    says) passes every clause it claims through the whole selection, boundary cases included; the wrong one
    fails the clause of each bug."""
    proc, by = _conformance(tmp_path, "kdtree_example_impl:CORRECT", "kdtree_example_impl:WRONG")
    assert proc.returncode == 1, proc.stdout[-2000:]  # the wrong one fails, so the run does
    right, wrong = by["example-correct"], by["example-wrong"]
    assert right["fail"] == [], f"the right implementation fails {right['fail']}"
    assert {"TV.1.1", "TA.1.1", "TB.1.1", "DT.1.1"} <= set(right["pass"]), "the boundary cases ran"
    assert {"TV.2.1", "TV.2.3", "TV.3.1", "TV.3.3", "TB.2.2", "TB.3.1", "TA.2.2", "TA.3.1"} <= set(right["pass"])
    assert {"TV.2.2", "TV.2.9"} <= set(right["not claimed"])  # declared float32 only
    assert "TV.2.3" in wrong["fail"], "a base-2 lse must fail the natural-log clause"
    assert "TA.2.2" in wrong["fail"], "walking siblings last-to-first must fail 'first matching sibling wins'"
    # ties re-ranked by token id: the tree's shape and scores are the same, but a node's token is no longer the
    # drafter's id at the node's rank
    assert "TB.2.6" in wrong["fail"], "ranking tied candidates by token id must fail 'tokens[i] = top_ids[d][r]'"
    assert "DT.2.1" in wrong["fail"], "tied logits to the higher token id must fail the draft_topk order"
    assert {"DT.2.1", "DT.2.4", "DT.3.2"} <= set(right["pass"])
    assert {"TV.1.1", "TB.1.1", "TA.1.1", "DT.1.1"} <= set(wrong["pass"])  # its bad-input refusals are intact
    assert {"TV.2.2", "TV.2.9"} <= set(wrong["not claimed"])
    assert not {"TB.1.4", "TA.1.4", "DT.1.3", "TV.3.2", "TB.4.1"} & set(wrong["fail"]), wrong["fail"]


def test_chains_only_declaration_draws_inside_it(tmp_path):
    """A chain-only, page-64, bf16 implementation that refuses anything else (the reference behind FlashMLA's
    declaration) passes every tree_verify test the suite claims for it: the strategies and the fixed-shape
    tests fitted their inputs; what they could not fit is not claimed, never failed."""
    proc, by = _conformance(tmp_path, "kdtree_example_impl:CHAINS_ONLY", files=("conformance/test_tree_verify.py",),
                            profile="dev")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    e = by["example-chains-only"]
    assert e["fail"] == []
    assert {"TV.1.1", "TV.2.2", "TV.2.5", "TV.2.7", "TV.2.9", "TV.3.1", "TV.3.2", "TV.3.5"} <= set(e["pass"])
    assert {"TV.2.1", "TV.2.3", "TV.3.3"} <= set(e["not claimed"])  # fp32 clauses; no batch-invariance promise
    assert e["ops_not_provided"] == ["tree_build", "tree_accept", "draft_topk"]


def test_example_package_entry_points(request, tmp_path):
    """Installed (tools/setup.sh installs it), the package's implementations are reached by name, and shown
    under the name they give themselves whichever way they were reached."""
    if "example-correct" not in external.entry_points():
        require = request.config.getoption("--require-tools")
        (pytest.fail if require else pytest.skip)("kdtree-example-impl is not installed (tools/setup.sh installs it)")
    assert impls.expand(["example-correct", "example-wrong"]) == ["example-correct", "example-wrong"]
    assert impls.report_columns("example-wrong") == ("example-wrong", "-")
    assert impls.report_columns("kdtree_example_impl:WRONG") == ("example-wrong", "-")
    assert impls.get("example-correct").caps("tree_verify").dtypes == ("float32",)


# --- the cascade's torch parts, on the CPU ------------------------------------------------------------------
def test_cascade_tree_pass_and_merge_match_the_oracle():
    """The cascade's gather, mask, tree pass and lse merge (with a plain torch prefix pass standing in for the
    peer) give tree_verify within the bf16 clause of the float64 oracle, on a bushy tree."""
    torch = pytest.importorskip("torch")
    from adapters import cascade
    from harness import spec
    from reference import tree_verify as ref

    case = hh.paged_case(np.random.default_rng(1), contract.BF16, [np.array([-1, 0, 0, 1, 1, 2], np.int32)] * 2,
                         [70, 0], 64, 4)  # fmt: skip
    a = case.args
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    q, kv = t(a["q"]), t(a["kv_cache"])
    bt, pre = torch.from_numpy(a["block_table"]), torch.from_numpy(a["prefix_lens"])
    Q = q.shape[1]
    bits = cascade.visibility_bits(torch.from_numpy(a["visibility"].view(np.int32)), Q)
    assert (bits.numpy() == contract.trees.unpack_visibility(a["visibility"], Q)).all()
    out, lse = cascade.tree_pass(q, cascade.tree_rows(kv, bt, pre, Q), bits, a["softmax_scale"])
    P = int(pre[0])  # request 0's prefix by a plain torch pass, request 1 has none
    keys = torch.stack([kv[int(bt[0, p // 64]), p % 64] for p in range(P)]).float()
    s = torch.einsum("qhd,kd->qhk", q[0].float(), keys) * a["softmax_scale"]
    pl = torch.logsumexp(s, -1)
    po = torch.einsum("qhk,kd->qhd", torch.exp(s - pl[..., None]), keys[:, :512])
    out[0], lse[0] = cascade.merge(po, pl, out[0], lse[0])
    o64, l64 = ref.tree_verify_float64(**a)
    got = out.to(torch.bfloat16).float().numpy()
    from harness.compare import assert_close

    assert_close(got.astype(np.float64), o64, what="out", spec_id="TV.2.2", **spec.clause("TV.2.2").tolerance())
    assert_close(lse.numpy().astype(np.float64), l64, what="lse", spec_id="TV.2.9", **spec.clause("TV.2.9").tolerance())
    wrong_bits = bits.clone()
    wrong_bits[:, 3, 2] = True  # row 3 also sees its uncle: the check above must notice a mask bug
    bad, _ = cascade.tree_pass(q, cascade.tree_rows(kv, bt, pre, Q), wrong_bits, a["softmax_scale"])
    assert not np.allclose(bad[1, 3].numpy(), out[1, 3].numpy(), atol=1e-3)


def test_staging_round_trips_bf16_on_the_cpu():
    torch = pytest.importorskip("torch")
    from harness import torch_staging

    a = np.arange(6, dtype=np.float32).astype(contract.BF16).reshape(2, 3)
    t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    back = torch_staging.to_host(t)
    assert back.dtype == contract.BF16 and (back.view(np.int16) == a.view(np.int16)).all()


class _FakeTensor:
    """Just enough of a torch tensor for to_device: numpy underneath, .cuda() a no-op."""

    def __init__(self, a):
        self.a = a

    def cuda(self):
        return self

    def view(self, dtype):
        return self

    def expand(self, shape):
        return _FakeTensor(np.broadcast_to(self.a, shape))


def test_staging_keeps_rank_and_broadcast_views(monkeypatch):
    """to_device stages what the implementation must see: a 0-d array stays 0-d (a rank check must see rank 0),
    and a broadcast view of any size is staged as its distinct values and expanded, never materialized (a
    boundary case's 4608 GiB cache of zeros must reach the implementation's own check, not the allocator)."""
    import types

    from harness import torch_staging

    fake = types.SimpleNamespace(from_numpy=_FakeTensor, bfloat16="bf16")
    fake.cuda = types.SimpleNamespace(mem_get_info=lambda: (80 << 30, 141 << 30))
    monkeypatch.setattr(torch_staging, "_torch", lambda: fake)
    assert torch_staging.to_device(np.array(7, np.int32)).a.shape == ()
    huge = np.broadcast_to(np.zeros((), contract.BF16), (1 << 22, 64, 576))
    t = torch_staging.to_device(huge)
    assert t.a.shape == huge.shape and t.a.base is not None and t.a.strides == (0, 0, 0)
    rows = np.broadcast_to(np.arange(3, dtype=np.int32)[:, None], (3, 1 << 40))
    assert (torch_staging.to_device(rows).a[:, 12345] == [0, 1, 2]).all()
    torch_staging.check_fits({"kv_cache": huge, "rows": rows})  # a few bytes staged
    from harness.boundaries.builders import reserved_zeros

    too_big = reserved_zeros((81 << 30,), np.uint8)  # address space only
    with pytest.raises(torch_staging.CannotStage, match=r"^kv_cache: 81 GiB cannot be staged"):
        torch_staging.check_fits({"kv_cache": too_big, "rows": rows})


# --- the peers' oracle check, on the CPU --------------------------------------------------------------------
def test_peer_check_catches_a_comparator_that_computes_something_else():
    """peers.check passes the oracle's own answer rounded to bf16 and fails a broken comparator: the same
    attention with the chain's causal mask dropped (every query sees every tree row)."""
    torch = pytest.importorskip("torch")
    from harness.bench import peers
    from harness.bench import verify_baselines as vb
    from reference import tree_verify as ref

    case = vb.make_case(2, 4, 8, 100, device="cpu", chain=True)
    h = lambda t: t.view(torch.int16).numpy().view(contract.BF16)
    args = (h(case.q), h(case.kv), case.block_table, case.prefix_lens, case.visibility, case.scale)
    o64, l64 = ref.tree_verify_float64(*args)
    good = peers.check(case, torch.from_numpy(o64).to(torch.bfloat16), torch.from_numpy(l64).float())
    assert good["ok"], good
    o_bad, l_bad = o64.copy(), l64.copy()  # the causal mask dropped: every query sees the whole chain
    for b in range(2):
        keys = contract.paged.cache_rows(args[1], case.block_table, b, np.arange(104)).astype(np.float64)
        s = np.einsum("qhd,kd->qhk", args[0][b].astype(np.float64), keys) * case.scale
        l_bad[b] = np.log(np.exp(s).sum(-1))
        o_bad[b] = np.einsum("qhk,kd->qhd", np.exp(s - l_bad[b][..., None]), keys[:, :512])
    bad = peers.check(case, torch.from_numpy(o_bad).to(torch.bfloat16), torch.from_numpy(l_bad).float())
    assert not bad["ok"] and bad["max_cos_diff"] > 1e-4, bad
    base2 = peers.check(case, torch.from_numpy(o64).to(torch.bfloat16), torch.from_numpy(l64 / np.log(2)).float())
    assert not base2["ok"], "an lse left in base 2 must be caught"


def test_bench_report_shows_peers_and_the_read_ceiling():
    """A tree_verify case with peers: the table has each peer's µs and the ratio to it, a peer that failed its
    oracle check reads `wrong`, and the kernel's fraction of the read ceiling is shown."""
    from harness.bench import record, report

    t = lambda us: {"median_us": us, "p10_us": us, "p90_us": us, "rel_spread": 0.0, "n": 5, "where": "device",
                    "method": "x"}  # fmt: skip
    info = record.build(
        op="tree_verify", impl="cuda:sm90a", shape={"H": 64, "Q": 2, "prefix": 8192, "bs": 1, "sweep": "chain"},
        time=t(60.0), bytes_moved=4_000_000_000 * 60 // 10**6, flops=10**9,
        ceilings={"copy_gbs": 4000.0, "read_gbs": 4400.0, "bf16_tflops": 800.0},
        comparators={"flashmla": record.comparator(t(30.0), check={"ok": True}),
                     "flashinfer_mla": record.comparator(error="wrong result against the float64 oracle: {...}")},
    )  # fmt: skip
    case = {**info, "impl": "cuda", "variant": "sm90a", "name": "x", "fullname": "x", "stage_file": "f"}
    lines = "\n".join(report.tree_verify_section([case], {}))
    assert "| flashmla µs | × vs flashmla |" in lines and "| 30 | 0.5 |" in lines
    assert "| wrong | — |" in lines
    assert f"{100 * info['fraction']['read']:.1f} %" in lines
    assert "- chain, sm90a: × vs the faster of FlashMLA and FlashInfer MLA (fa3) over 1 shapes: median 0.5" in lines
    assert "at least 1 at 0 of 1." in lines


def test_bench_report_shares_a_shapes_comparators_and_compares_trees_with_chains():
    """A shape's cascades, timed once beside portable, give sm90a's row its own ratio (same run only); the
    summary counts the cascades' aim (1.3) on trees, and a variant's tree time is set against its chain time."""
    from harness.bench import record, report

    t = lambda us: {"median_us": us, "p10_us": us, "p90_us": us, "rel_spread": 0.0, "n": 5, "where": "device",
                    "method": "x"}  # fmt: skip

    def case(variant, us, sweep, comparators=None, stage_file="a.json"):
        shape = {"H": 64, "Q": 16, "prefix": 8192, "bs": 1, **({"sweep": sweep} if sweep else {})}
        info = record.build(op="tree_verify", impl=f"cuda:{variant}", shape=shape, time=t(us), bytes_moved=10**6,
                            flops=10**9, comparators=comparators)  # fmt: skip
        return {**info, "impl": "cuda", "variant": variant, "name": variant, "fullname": variant,
                "stage_file": stage_file}  # fmt: skip

    cascade = {"flashmla_cascade": record.comparator(t(200.0), check={"ok": True})}
    rows = [case("portable", 400.0, None, cascade), case("sm90a", 100.0, None), case("sm90a", 95.0, "chain"),
            case("sm90a_elsewhere", 100.0, None, stage_file="b.json")]  # fmt: skip
    shared = report.share_comparators(rows)
    assert shared[1]["speedups"]["flashmla_cascade"] == 2.0 and "flashmla_cascade" not in rows[1]["speedups"]
    assert "flashmla_cascade" not in shared[3]["comparators"], "another run's comparators were borrowed"
    lines = "\n".join(report.tree_verify_section(rows, {}))
    assert "- grid (DDTree trees), sm90a: × vs the faster of the FlashMLA and FlashInfer MLA cascades over 1 " \
           "shapes: median 2, from 2 to 2; at least 1.3 at 1 of 1." in lines  # fmt: skip
    assert "- grid (DDTree trees), portable: " in lines and "at least 1.3 at 0 of 1." in lines
    assert "- sm90a: tree time / chain time at the same H, Q, prefix, bs over 1 shapes (chains from a.json): " \
           "median 1.05" in lines and "within 1.1 at 1 of 1." in lines  # fmt: skip


def test_bench_report_sets_planned_against_invariant_and_mixed_against_its_own_aim():
    """A planned row shows its time ÷ the invariant build's at the same shape of the same run (no other row does,
    and another run's invariant row is not used); the summary counts the invariant build within 1.15× of the planned
    one per set, and mixed-length batches are summarised apart from chains, against their aim of 1.2."""
    from harness.bench import record, report

    t = lambda us: {"median_us": us, "p10_us": us, "p90_us": us, "rel_spread": 0.0, "n": 5, "where": "device",
                    "method": "x"}  # fmt: skip
    peer = lambda us: {"flashmla": record.comparator(t(us), check={"ok": True})}

    def case(variant, us, sweep, Q=2, stage_file="a.json", comparators=None):
        shape = {"H": 64, "Q": Q, "prefix": 8192, "bs": 32, "sweep": sweep}
        info = record.build(op="tree_verify", impl=f"cuda:{variant}", shape=shape, time=t(us), bytes_moved=10**6,
                            flops=10**9, comparators=comparators)  # fmt: skip
        return {**info, "impl": "cuda", "variant": variant, "name": variant, "fullname": variant,
                "stage_file": stage_file}  # fmt: skip

    rows = [case("sm90a", 200.0, "chain", comparators=peer(110.0)), case("sm90a_planned", 100.0, "chain"),
            case("sm90a", 120.0, "chain", Q=4), case("sm90a_planned", 110.0, "chain", Q=4),
            case("sm90a_planned", 50.0, "chain", Q=16, stage_file="b.json"), case("sm90a", 10.0, "chain", Q=16),
            case("sm90a", 130.0, "mixed", comparators=peer(120.0)), case("sm90a_planned", 100.0, "mixed")]  # fmt: skip
    lines = report.tree_verify_section(rows, {})
    table = [x for x in lines if x.startswith("| chain |") or x.startswith("| mixed |")]
    cell = lambda row: row.split(" | ")[12]  # the planned ÷ invariant column
    assert [cell(x) for x in table] == ["—", "0.5", "—", "0.9167", "—", "—", "—", "0.7692"], table
    text = "\n".join(lines)
    assert "- chain: sm90a_planned ÷ sm90a over 2 shapes: median 0.708, from 0.5 to 0.917; sm90a within 1.15× of " \
           "sm90a_planned at 1 of 2." in text  # fmt: skip
    assert "- mixed: sm90a_planned ÷ sm90a over 1 shapes" in text
    assert "- mixed, sm90a_planned: × vs the faster of FlashMLA and FlashInfer MLA (fa3) over 1 shapes: median " \
           "1.2, from 1.2 to 1.2; at least 1.2 at 1 of 1." in text  # fmt: skip
    assert "- chain, sm90a_planned: × vs the faster of FlashMLA and FlashInfer MLA (fa3) over 1 shapes: median 1.1" \
           in text and "at least 1 at 1 of 1." in text  # fmt: skip


def test_peers_plot_drawn_for_chains(tmp_path):
    """The chains' peer-ratio plot is drawn when the run has chain cases with peers, and not otherwise."""
    pytest.importorskip("matplotlib")
    from harness.bench import plots

    case = {"op": "tree_verify", "impl": "cuda", "variant": "sm90a", "speedups": {"flashmla": 0.5},
            "shape": {"H": 64, "Q": 2, "prefix": 8192, "bs": 1, "sweep": "chain"}}  # fmt: skip
    plt = plots._plt()
    assert plots.tree_verify_peers([case], tmp_path, plt) == {"tree_verify_peers": "tree_verify_peers.png"}
    assert (tmp_path / "tree_verify_peers.png").stat().st_size > 0
    assert plots.tree_verify_peers([{**case, "shape": {**case["shape"], "sweep": "grid"}}], tmp_path, plt) == {}


# --- what a run reaches (harness/selection.py) ------------------------------------------------------------
def _collected(*args) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "examples" / "kdtree_outsider"),
                                                                      os.environ.get("PYTHONPATH")]))}  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", "conformance", "--collect-only", "-q", "-p", "no:cacheprovider",
           "-p", "no:xdist", *args]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return [ln for ln in proc.stdout.splitlines() if "::" in ln]


def test_an_external_implementation_reaches_only_its_ops_tests():
    """A tree_build-only implementation: only tests parametrized by it, of tree_build's clauses (the harness's own
    suites and the other ops' tests are deselected); --op narrows a run of several ops to one."""
    from harness import selection

    items = _collected("--impl", "kdtree_outsider:TB_DEEP_TIES")
    assert items and all("[impl=kdtree_outsider:TB_DEEP_TIES" in i for i in items), items[:5]
    files = {i.split("::")[0] for i in items}
    assert "conformance/test_kdtr.py" not in files and "conformance/test_kernels_build.py" not in files
    assert {"conformance/test_tree_build.py", "conformance/test_boundaries.py"} <= files
    assert not any("tree_verify" in i or "draft_topk" in i or "tree_accept" in i for i in items)
    right = _collected("--impl", "kdtree_outsider:RIGHT", "--op", "tree_accept")
    assert right and all("tree_build" not in i and "draft_topk" not in i and "tree_verify" not in i for i in right)
    assert selection.ops_of(["TB.2.1", "KDTR.1.1", "DT.4.1"]) == {"tree_build", "draft_topk"}

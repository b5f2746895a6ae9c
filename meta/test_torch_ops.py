"""The PyTorch operators (kdtree_torch) where no GPU is needed: their schemas, their fake implementations against the
references' outputs and the contract's shape errors (under FakeTensorMode, which makes fake CUDA tensors without a
GPU), a whole DDTree round traced by torch.export (dynamo, one graph: no graph break), a prepared call launched over
other tensors (arrays.launching, the operators' cache, with the kernels and the device stubbed), and the adapter that
puts them under `--impl torch-ops`. The operators on a GPU: conformance/test_torch_ops.py and the conformance suite
under --impl torch-ops (tools/torch_ops_gpu_check.sh)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import contract
from contract import InputError
from reference import draft_topk as ref_topk
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build
from reference import tree_verify as ref_verify

torch = pytest.importorskip("torch")
FakeTensorMode = pytest.importorskip("torch._subclasses.fake_tensor").FakeTensorMode

from kdtree_torch import ops  # noqa: E402  (registers torch.ops.kdtree.*; needs torch)

TORCH_OF = {np.dtype(np.float32): torch.float32, np.dtype(np.int32): torch.int32, np.dtype(np.uint32): torch.int32,
            np.dtype(np.float64): torch.float64, contract.BF16: torch.bfloat16,
            np.dtype(np.float16): torch.float16}  # fmt: skip


def _case(bs=2, L=3, V=50, K=5, B=12, H=2, page=16, seed=0):
    """A small valid round on the host: each op's arguments and its reference result."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((bs, L, V)).astype(np.float32)
    top = ref_topk.draft_topk(logits, K)
    roots = rng.integers(0, V, bs).astype(np.int32)
    prefix = rng.integers(0, 40, bs).astype(np.int32)
    tree = ref_build.tree_build(top.top_logp, top.top_ids, roots, B, prefix)
    D = 1 + B
    pages = -(-(int(prefix.max()) + D) // page)
    bt = rng.permutation(bs * pages).reshape(bs, pages).astype(np.int32)
    kv = rng.standard_normal((bs * pages, page, 576)).astype(np.float32)
    q = rng.standard_normal((bs, D, H, 576)).astype(np.float32)
    target = rng.integers(0, V, (bs, D)).astype(np.int32)
    args = {
        "draft_topk": {"logits": logits, "K": K},
        "tree_build": {"top_logp": top.top_logp, "top_ids": top.top_ids, "root_tokens": roots, "budget": B,
                       "prefix_lens": prefix},
        "tree_verify": {"q": q, "kv_cache": kv, "block_table": bt, "prefix_lens": prefix,
                        "visibility": tree.visibility, "softmax_scale": 0.05, "max_context": int(prefix.max()) + D},
        "tree_accept": {"tokens": tree.tokens, "first_child": tree.first_child, "next_sibling": tree.next_sibling,
                        "target_tokens": target, "max_depth": L},
    }  # fmt: skip
    args["tree_accept_commit"] = {**args["tree_accept"], "kv_cache": kv.copy(), "block_table": bt,
                                  "prefix_lens": prefix.copy(), "root_tokens": roots.copy()}  # fmt: skip
    want = {
        "draft_topk": top,
        "tree_build": tree,
        "tree_verify": ref_verify.tree_verify(q, kv, bt, prefix, tree.visibility, 0.05),
        "tree_accept": ref_accept.tree_accept(tree.tokens, tree.first_child, tree.next_sibling, target, max_depth=L),
        "tree_accept_commit": ref_accept.tree_accept(tree.tokens, tree.first_child, tree.next_sibling, target,
                                                     max_depth=L, kv_cache=kv.copy(), block_table=bt,
                                                     prefix_lens=prefix.copy()),
    }  # fmt: skip
    return args, want


def _fake_call(slug, args, device="cuda"):
    """The operator under FakeTensorMode on fake tensors of the arguments' shapes and dtypes."""
    with FakeTensorMode():
        named = {k: torch.empty(v.shape, dtype=TORCH_OF[v.dtype], device=device) if isinstance(v, np.ndarray) else v
                 for k, v in args.items()}  # fmt: skip
        flag = torch.zeros(1, dtype=torch.int32, device=device)
        call = {**named, "error_flag": flag}
        return getattr(torch.ops.kdtree, slug)(**call)


def test_schemas_and_mutated_arguments():
    for slug, mutates in ops.MUTATES.items():
        schema = getattr(torch.ops.kdtree, slug).default._schema
        assert str(schema) == f"kdtree::{slug}{ops.SCHEMAS[slug]}".replace("''", '""')
        written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        assert written == set(mutates), f"{slug} writes {written}, declares {mutates}"
        # torch 2.11 bumps a mutated argument's version by its schema position among the positional arguments
        # given: one left to a default was an IndexError on the GPU (reports/h100/2026-12-07 call 1)
        defaulted = {a.name for a in schema.arguments if a.name in written and a.has_default_value()}
        assert not defaulted, f"{slug}: mutated arguments with a default: {defaulted}"
        assert all(r.alias_info is None for r in schema.returns), f"{slug}: an output aliases an input"


SHAPES = {"small": {}, "budget0": {"B": 0}, "wide": {"bs": 1, "B": 40, "K": 8, "H": 1}}
FAKE_CASES = [(slug, name) for slug in ops.MUTATES for name in SHAPES] + [("draft_topk", "depth0")]
SHAPES["depth0"] = {"L": 0, "B": 3}  # draft_topk's edge (a tree needs a depth)


@pytest.mark.parametrize(("slug", "shape"), FAKE_CASES)
def test_fake_outputs_are_the_references(slug, shape):
    """Each operator's fake outputs have the shapes and dtypes of the reference's result (uint32 bits held in
    int32), on the inputs' device, in contract.<Result>.FIELDS order (tree_build without FULL_MASK)."""
    args, want = _case(**SHAPES[shape])
    got = _fake_call(slug, args[slug])
    fields = ops.OUTPUTS[slug.removesuffix("_commit")]
    assert len(got) == len(fields)
    for name, g in zip(fields, got):
        w = np.asarray(getattr(want[slug], name))
        assert tuple(g.shape) == w.shape, f"{slug}.{name}: shape {tuple(g.shape)}, the reference's {w.shape}"
        assert g.dtype == TORCH_OF[w.dtype], f"{slug}.{name}: dtype {g.dtype}, the reference's {w.dtype}"
        assert g.device == torch.device("cuda", 0)


def test_tree_verify_takes_tree_builds_visibility_as_int32():
    args, _ = _case()
    a = args["tree_verify"]
    got = _fake_call("tree_verify", {**a, "visibility": a["visibility"].view(np.int32)})
    assert tuple(got[0].shape) == a["q"].shape[:3] + (512,)


def _shape_error(slug, args) -> str:
    with pytest.raises(InputError) as e:
        _fake_call(slug, args)
    return str(e.value)


@pytest.mark.parametrize(
    ("slug", "change", "message"),
    [
        ("draft_topk", {"K": 200}, r"K: 200 > V=50"),
        ("draft_topk", {"logits": np.zeros((2, 3), np.float32)}, r"logits: shape \(2, 3\) has 2 dims"),
        ("tree_build", {"budget": 1025}, r"budget: 1025 is outside 0..1024"),
        ("tree_build", {"root_tokens": np.zeros(3, np.int32)}, r"root_tokens: shape \(3,\)"),
        ("tree_verify", {"q": np.zeros((2, 13, 2, 576), np.float16)}, r"q: dtype float16, expected float32 or"),
        ("tree_verify", {"max_context": 5}, r"max_context: 5 is outside 13\.\."),
        ("tree_accept", {"max_depth": -1}, r"max_depth: -1 is outside"),
        ("tree_accept_commit", {"root_tokens": np.zeros(3, np.int32)}, r"root_tokens: shape \(3,\) dtype"),
    ],
)
def test_fake_raises_the_contracts_error(slug, change, message):
    """Traced calls (torch.compile, torch.export) meet the contract's shape checks as the operator itself would."""
    args, _ = _case()
    with pytest.raises(InputError, match=message):
        _fake_call(slug, {**args[slug], **change})


def test_error_flag_is_checked_by_name():
    with FakeTensorMode():
        logits = torch.empty(2, 3, 50, device="cuda")
        with pytest.raises(InputError, match=r"error_flag: shape \(2,\) dtype torch.int32, expected an int32"):
            torch.ops.kdtree.draft_topk(logits, 4, torch.zeros(2, dtype=torch.int32, device="cuda"))


def ddtree_round(logits, q, target_tokens, kv_cache, block_table, prefix_lens, root_tokens, flag):
    """One DDTree round written with the operators (the README's)."""
    kd = torch.ops.kdtree
    top_logp, top_ids = kd.draft_topk(logits, 4, flag)
    tree = kd.tree_build(top_logp, top_ids, root_tokens, 12, prefix_lens, flag)
    _, _, _, tokens, _, _, visibility, _, first_child, next_sibling = tree
    out, lse = kd.tree_verify(q, kv_cache, block_table, prefix_lens, visibility, 0.04, 200, flag)
    accept = kd.tree_accept_commit(tokens, first_child, next_sibling, target_tokens, 3, kv_cache, block_table,
                                   prefix_lens, flag, root_tokens)  # fmt: skip
    return top_logp, top_ids, *tree, out, lse, *accept


class _Round(torch.nn.Module):
    def forward(self, *args):
        return ddtree_round(*args)


def test_a_round_traces_as_one_graph():
    """torch.export (dynamo, strict: a graph break is an error) traces the whole round on fake CUDA tensors: each
    operator one node, in step order, the outputs' shapes from the fake implementations."""
    i32, bf16 = torch.int32, torch.bfloat16
    with FakeTensorMode():
        e = lambda *shape, dtype=i32: torch.empty(shape, dtype=dtype, device="cuda")
        args = (e(2, 3, 100, dtype=bf16), e(2, 13, 2, 576, dtype=bf16), e(2, 13), e(10, 16, 576, dtype=bf16), e(2, 5),
                e(2), e(2), torch.zeros(1, dtype=i32, device="cuda"))  # fmt: skip
        ep = torch.export.export(_Round(), args, strict=True)
    called = [n.target for n in ep.graph.nodes if n.op == "call_function" and "kdtree" in str(n.target)]
    assert [str(t).split(".")[1] for t in called] == ["draft_topk", "tree_build", "tree_verify", "tree_accept_commit"]
    shapes = [tuple(n.meta["val"].shape) for n in ep.graph.output_node().args[0]]
    assert shapes[:2] == [(2, 3, 4)] * 2 and shapes[8] == (2, 13, 1) and shapes[12] == (2, 13, 2, 512)


def test_cpu_tensors_are_refused_by_name():
    with pytest.raises(InputError, match=r"logits: a tensor on cpu; the operators take CUDA tensors"):
        torch.ops.kdtree.draft_topk(torch.zeros(1, 2, 8), 2, torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize("slug", ["draft_topk", "tree_build", "tree_verify", "tree_accept"])
def test_an_array_stand_in_is_refused_by_name(slug):
    """The adapter hands an array argument given as a contract.ArrayInfo (which the shape-only checks accept as an
    array's stand-in) back with the contract's words, naming it, before any GPU work."""
    from kdtree_torch import adapter

    c = contract.OPS[slug]
    args, _ = _case()
    given = args["tree_accept_commit" if slug == "tree_accept" else slug]  # the commit's arrays too
    named = c.bind(**{a.name: given[a.name] for a in c.args if a.name in given})
    for a in c.args:
        if a.kind != "array" or named[a.name] is None:
            continue
        x = np.asarray(named[a.name])
        stand_in = {**named, a.name: contract.ArrayInfo(x.shape, x.dtype)}
        with pytest.raises(InputError, match=rf"{a.name}: expected a torch CUDA tensor, got a contract.ArrayInfo"):
            getattr(adapter, slug)(**stand_in)


def test_launching_replaces_pointer_arguments(monkeypatch):
    """A prepared call's launch inside arrays.launching goes to that stream with its pointer arguments (Python ints)
    moved; numpy scalars and unmoved addresses (scratch, null) stay."""
    import cuda.core

    from kernels_cu import arrays, runtime, specs

    seen = []
    monkeypatch.setattr(runtime, "load", lambda spec, shmem, entry=None: "kernel")
    monkeypatch.setattr(cuda.core, "launch", lambda stream, config, kernel, *args: seen.append((stream, args)))
    spec = specs.get("tree_accept", "pointer_jump")
    with arrays.launching("torch-stream", {0x1000: 0x5000, 0x2000: 0x1000}):
        arrays.launch_kernel(spec, 1, 0, 0x1000, np.int32(0x1000), 0x2000, 0x3000, 0, entry="e", block=32)
    assert seen == [("torch-stream", (0x5000, np.int32(0x1000), 0x1000, 0x3000, 0))]
    assert type(seen[0][1][1]) is np.int32


class _StubDeferred:
    """A prepared call without a GPU: its outputs are CPU tensors, its launch records where it went."""

    def __init__(self, slug, named, launches):
        self.slug, self.launches = slug, launches
        meta = ops.output_meta(slug, named)
        self.mine = [torch.empty(s, dtype=d) for _, s, d in meta]
        self.staging = types.SimpleNamespace(g=types.SimpleNamespace(stream=types.SimpleNamespace(sync=lambda: None)),
                                             close=lambda: None)  # fmt: skip

    def outputs(self):
        return types.SimpleNamespace(**dict(zip(ops.OUTPUTS[self.slug], self.mine)))

    def launch(self):
        from kernels_cu import arrays

        self.launches.append(arrays._ELSEWHERE.get())


def test_a_call_is_prepared_once_per_shape_and_launched_over_each_calls_tensors(monkeypatch):
    """The operators' cache: a second call of the same shapes prepares nothing and launches the first call's prepared
    launch with every tensor's address moved to this call's (inputs, error flag, fresh outputs), on torch's current
    stream; a call of another shape prepares again."""
    from kernels_cu import ops as kernel_ops

    prepared, launches = [], []

    def prepare_deferred(slug, variant, **kw):
        prepared.append((slug, variant))
        return _StubDeferred(slug, {**kw, "K": kw["K"]}, launches)

    monkeypatch.setattr(kernel_ops, "prepare_deferred", prepare_deferred)
    monkeypatch.setattr(ops, "variant_of", lambda slug, v: v or "default")
    monkeypatch.setattr(ops, "_device_of", lambda slug, tensors: torch.device("cpu"))
    monkeypatch.setattr(ops, "_stream", lambda handle: f"stream {handle}")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda dev=None: types.SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(ops, "PREPARED", ops._Prepared())
    flag1, flag2 = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    x1, x2 = torch.zeros(2, 3, 50), torch.ones(2, 3, 50)
    out1 = torch.ops.kdtree.draft_topk(x1, 4, flag1)
    out2 = torch.ops.kdtree.draft_topk(x2, 4, flag2)
    assert prepared == [("draft_topk", "default")]
    (stream1, moved1), (stream2, moved2) = launches
    assert stream1 == stream2 == "stream 7"
    entry = next(iter(ops.PREPARED.entries.values()))
    first = [x1.data_ptr(), flag1.data_ptr(), *(t.data_ptr() for t in entry.deferred.mine)]
    assert entry.addresses == tuple(first)
    assert moved1 == {a: b.data_ptr() for a, b in zip(first[2:], out1)}  # the first call's own outputs are fresh too
    assert moved2 == {a: b for a, b in zip(first, [x2.data_ptr(), flag2.data_ptr(), *(t.data_ptr() for t in out2)])}
    torch.ops.kdtree.draft_topk(x1, 5, flag1)  # another K: another prepared call
    torch.ops.kdtree.draft_topk(x1[:1].contiguous(), 4, flag1)  # another batch
    assert len(prepared) == 3
    assert set(ops.RECORDS.calls(flag1)) == {"draft_topk"}


def test_the_adapter_is_shipped_as_torch_ops():
    """`--impl torch-ops` names the adapter without installing the project (a GPU runner's checkout), the report
    shows it by that name, and its declaration leaves FULL_MASK cases not claimed."""
    from harness import claims, external, impls
    from harness.cases import Case
    from kdtree_torch import adapter

    assert external.load("torch-ops") is adapter.IMPLEMENTATION
    assert impls.expand(["torch-ops"]) == ["torch-ops"]
    assert impls.report_columns("torch-ops")[0] == "torch-ops"
    args, _ = _case()
    build = {k: v for k, v in args["tree_build"].items()}
    caps = adapter.IMPLEMENTATION.caps("tree_build")
    assert claims.outside(caps, Case("tree_build", {**build, "with_full_mask": True})) == (
        "with_full_mask=True (declared: {False})"
    )
    assert claims.outside(caps, Case("tree_build", build)) is None
    if not torch.cuda.is_available():
        assert "GPU" in impls.get("torch-ops").why_not


def test_staged_results_come_back_as_the_contracts_types(monkeypatch):
    """A device implementation's dataclass results (TopK, Tree, Accept) come back field by field as numpy, uint32 kept
    (harness/torch_staging.py)."""
    from harness import torch_staging

    monkeypatch.setattr(torch_staging, "check_fits", lambda arrays: None)
    monkeypatch.setattr(torch_staging, "to_device", lambda a: torch.from_numpy(np.ascontiguousarray(a)))

    def fn(logits, K):
        ids = torch.arange(K, dtype=torch.int32).view(1, 1, K)
        return contract.TopK(logits[..., :K].float(), ids.view(torch.uint32))

    got = torch_staging.staged(fn, "draft_topk")(np.zeros((1, 1, 5), np.float32), 3)
    assert isinstance(got, contract.TopK) and got.top_ids.dtype == np.uint32 and got.top_logp.shape == (1, 1, 3)

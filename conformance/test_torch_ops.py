"""The kernels as PyTorch operators (kdtree_torch, spec/step.md ST.3) on the GPU: torch.library.opcheck on each, a
DDTree round written with them captured in a torch.cuda.CUDAGraph and under torch.compile(fullgraph=True), each
against kernels_cu.step.Step bit for bit round after round, and a refused value named by kdtree_torch.check(). Each
op's own clauses run through the operators under `--impl torch-ops` (kdtree_torch/adapter.py); their fake
implementations without a GPU: meta/test_torch_ops.py."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from conformance.test_step import BUDGET, REFUSED, ROUNDS, SCALE, K, L, World
from contract import BF16, InputError
from contract.step import OPS as STEP_OPS
from reference import draft_topk as ref_topk
from reference import tree_build as ref_build

PREFIX, V = [5, 40, 1500], 300  # one request long enough for a multi-split plan


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA GPU")
    return torch


def _ops():
    from kdtree_torch import ops

    return ops


def ddtree_round(logits, q, target_tokens, kv_cache, block_table, prefix_lens, root_tokens, error_flag, max_context):
    """One DDTree round with the operators, as a serving engineer writes it (the README's)."""
    import torch

    kd = torch.ops.kdtree
    top_logp, top_ids = kd.draft_topk(logits, K, error_flag)
    tree = kd.tree_build(top_logp, top_ids, root_tokens, BUDGET, prefix_lens, error_flag)
    _, _, _, tokens, _, _, visibility, _, first_child, next_sibling = tree
    out, lse = kd.tree_verify(q, kv_cache, block_table, prefix_lens, visibility, SCALE, max_context, error_flag)
    accept = kd.tree_accept_commit(tokens, first_child, next_sibling, target_tokens, L, kv_cache, block_table,
                                   prefix_lens, error_flag, root_tokens)  # fmt: skip
    return {"draft_topk": (top_logp, top_ids), "tree_build": tree, "tree_verify": (out, lse), "tree_accept": accept}


def _state_args(w, flag):
    d = w.dev
    return {"kv_cache": d["kv_cache"], "block_table": d["block_table"], "prefix_lens": d["prefix_lens"],
            "root_tokens": d["root_tokens"], "error_flag": flag, "max_context": w.max_context}  # fmt: skip


def _bits(t):
    """A tensor's bits, as a same-width integer view (floats compared bit for bit, -inf and -0.0 included)."""
    import torch

    width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(width)


def _assert_same(got: dict, step, ctx: str) -> None:
    """The operators' round equals the step's, output by output, bit for bit (ST.3.2, ST.3.3)."""
    import torch

    want = step.outputs()
    ops = _ops()
    for slug in STEP_OPS:
        for name, g in zip(ops.OUTPUTS[slug], got[slug]):
            w = getattr(want[slug], name)
            assert tuple(g.shape) == tuple(w.shape), f"{ctx}: {slug}.{name} shape {tuple(g.shape)} vs {w.shape}"
            same = torch.equal(_bits(g), _bits(w))
            assert same, f"{ctx}: {slug}.{name} differs from the step's ({(_bits(g) != _bits(w)).sum()} elements)"


def _assert_same_state(a: World, b: World, ctx: str) -> None:
    import torch

    for k in ("kv_cache", "prefix_lens", "root_tokens"):
        assert torch.equal(_bits(a.dev[k]), _bits(b.dev[k])), f"{ctx}: {k} differs from the step's"


def _worlds(seed):
    return World("torch", BF16, PREFIX, seed, V), World("torch", BF16, PREFIX, seed, V)


@pytest.mark.gpu
@pytest.mark.spec("ST.3.1")
@pytest.mark.parametrize("slug", ["draft_topk", "tree_build", "tree_verify", "tree_accept", "tree_accept_commit"])
def test_opcheck(slug):
    """torch.library.opcheck: schema and declared mutations, the fake implementation against the real outputs, AOT
    dispatch with static and dynamic shapes, on one valid call."""
    torch = _torch()
    ops = _ops()
    w = World("torch", BF16, PREFIX, seed=3, V=V)
    inp = w.inputs(BF16, "normal")
    top = ref_topk.draft_topk(inp["logits"], K)
    tree = ref_build.tree_build(top.top_logp, top.top_ids, w.roots, BUDGET, w.prefix)
    d, flag = w.dev, ops.new_error_flag()
    walk = (w.up(tree.tokens), w.up(tree.first_child), w.up(tree.next_sibling), w.up(inp["target_tokens"]), L)
    args = {
        "draft_topk": (w.up(inp["logits"]), K, flag),
        "tree_build": (w.up(top.top_logp), w.up(top.top_ids), d["root_tokens"], BUDGET, d["prefix_lens"], flag),
        "tree_verify": (w.up(inp["q"]), d["kv_cache"], d["block_table"], d["prefix_lens"],
                        w.up(tree.visibility.view(np.int32)), SCALE, w.max_context, flag),
        "tree_accept": (*walk, flag),
        "tree_accept_commit": (*walk, d["kv_cache"], d["block_table"], d["prefix_lens"], flag, d["root_tokens"]),
    }  # fmt: skip
    got = torch.library.opcheck(getattr(torch.ops.kdtree, slug).default, args[slug])
    assert all(v == "SUCCESS" for v in got.values()), got
    ops.check(flag)


@pytest.mark.gpu
@pytest.mark.spec("ST.3.2", "ST.3.4")
def test_a_captured_round_is_the_step():
    """The round run once eagerly (the warm-up, on a side stream, where each call is prepared), then captured in a
    torch.cuda.CUDAGraph over static input buffers and replayed ROUNDS times; each round's outputs and the state after
    it equal Step's fed the same inputs from the same state. Then a NaN logit in the static buffer: check() names it,
    the replay committed and advanced nothing, and neither does the next (good) one until reset()."""
    torch = _torch()
    ops = _ops()
    a, b = _worlds(zlib.crc32(b"torch-ops-graph"))
    with a.step({}, "bfloat16") as step:
        flag = ops.new_error_flag()
        inp = a.inputs(BF16, "ties")
        static = b.up_all(inp)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = ddtree_round(**static, **_state_args(b, flag))
        torch.cuda.current_stream().wait_stream(side)
        step.round(**a.up_all(inp))
        a.check_round(step, inp, 0)
        ops.check(flag)
        _assert_same(got, step, "round 0 (eager)")
        _assert_same_state(a, b, "round 0 (eager)")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = ddtree_round(**static, **_state_args(b, flag))
        for r in range(1, ROUNDS + 1):
            inp = a.inputs(BF16, "ties" if r % 2 else "normal")
            for k, v in b.up_all(inp).items():
                static[k].copy_(v)
            graph.replay()
            step.round(**a.up_all(inp))
            a.check_round(step, inp, r)
            ops.check(flag)
            _assert_same(captured, step, f"round {r} (replay)")
            _assert_same_state(a, b, f"round {r} (replay)")
        before = {k: b.dev[k].clone() for k in ("kv_cache", "prefix_lens", "root_tokens")}
        static["logits"][1, 2, 7] = float("nan")
        for _ in range(2):  # the refused replay, then a good one: neither commits nor advances
            graph.replay()
            with pytest.raises(InputError, match=r"logits: NaN at \[request 1, depth 2, token 7\]"):
                ops.check(flag)
            for k, v in before.items():
                assert torch.equal(_bits(b.dev[k]), _bits(v)), f"[ST.3.4] a refused replay changed {k}"
            static["logits"][1, 2, 7] = 0.0
        ops.reset(flag)
        graph.replay()
        ops.check(flag)
        assert (b.dev["prefix_lens"] > before["prefix_lens"]).all(), "[ST.3.4] after reset() a replay advances"
        del graph


@pytest.mark.gpu
@pytest.mark.spec("ST.3.3")
def test_a_compiled_round_is_the_step():
    """torch.compile(fullgraph=True) of the round (a graph break is an error), ROUNDS rounds on fresh input tensors:
    each round's outputs and the state after it equal Step's."""
    torch = _torch()
    ops = _ops()
    torch._dynamo.reset()
    compiled = torch.compile(ddtree_round, fullgraph=True)
    a, b = _worlds(zlib.crc32(b"torch-ops-compile"))
    with a.step({}, "bfloat16") as step:
        flag = ops.new_error_flag()
        for r in range(ROUNDS):
            inp = a.inputs(BF16, "ties" if r % 2 else "normal")
            got = compiled(**b.up_all(inp), **_state_args(b, flag))
            step.round(**a.up_all(inp))
            a.check_round(step, inp, r)
            ops.check(flag)
            _assert_same(got, step, f"round {r} (compiled)")
            _assert_same_state(a, b, f"round {r} (compiled)")


@pytest.mark.gpu
@pytest.mark.spec("ST.3.4")
@pytest.mark.parametrize("op", list(REFUSED))
def test_a_refused_value_is_named_and_stops_the_commit(op):
    """Eager rounds of the operators: a value `op` refuses in round 2 makes check() raise its named error, and that
    round and the next (good) one commit and advance nothing; after reset() and the value undone, rounds advance."""
    torch = _torch()
    ops = _ops()
    change, message = REFUSED[op]
    w = World("torch", BF16, [3, 30, 200], seed=7, V=V)
    flag = ops.new_error_flag()
    for _ in range(2):
        ddtree_round(**w.up_all(w.inputs(BF16, "normal")), **_state_args(w, flag))
        ops.check(flag)
    saved = {k: w.dev[k].clone() for k in ("prefix_lens", "root_tokens")}
    inp = w.inputs(BF16, "normal")
    change(w, inp)
    changed = {k: w.dev[k].clone() for k in ("kv_cache", "prefix_lens", "root_tokens")}
    for _ in range(2):  # the refused round, then a good one
        ddtree_round(**w.up_all(inp), **_state_args(w, flag))
        with pytest.raises(InputError, match=message):
            ops.check(flag)
        for k, v in changed.items():
            assert torch.equal(_bits(w.dev[k]), _bits(v)), f"[ST.3.4] a refused round changed {k}"
        inp = w.inputs(BF16, "normal")
    for k, v in saved.items():
        w.dev[k].copy_(v)
    ops.reset(flag)
    ddtree_round(**w.up_all(inp), **_state_args(w, flag))
    ops.check(flag)
    assert (w.dev["prefix_lens"] > saved["prefix_lens"]).all(), "[ST.3.4] after reset() a round advances"

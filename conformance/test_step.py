"""One DDTree step on the device, replayed from one CUDA graph (spec/step.md): every round against the reference ops
composed round by round, a round without host synchronisation, and a refused round that stops the step."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from contract import BF16, Accept, InputError, TopK, Tree
from contract.step import OPS as STEP_OPS
from harness import device, host_syncs, topk
from harness import spec as clauses
from harness import strategies as hh
from harness.boundaries import step as host_checks
from harness.compare import assert_bit_exact, assert_close, assert_cosine
from reference import draft_topk as ref_topk
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build
from reference import tree_verify as ref_verify

ROUNDS = 8
L, K, BUDGET, H, PAGE, SCALE = 4, 4, 12, 2, 16, 0.0417
D = 1 + BUDGET


def _variants(impl) -> dict:
    """The impl's variants for the ops of the step it has (the others run the step's defaults)."""
    if impl.kind != "cuda" or not set(STEP_OPS) & set(impl.loaders):
        pytest.skip(f"{impl.name}: the step is the CUDA library's (kernels_cu.step)")
    return {slug: impl.variant for slug in STEP_OPS if slug in impl.loaders}


class World:
    """The host's copy of what a step changes (cache, prefix lengths, root tokens) and the device arrays it runs on,
    over a paged cache with room for every round (finite rows everywhere: the tree rows are read as they are)."""

    def __init__(self, lib_name, kv_dtype, prefix, seed, V):
        self.lib_name, self.lib = lib_name, device.array_library(lib_name)
        self.rng = np.random.default_rng(seed)
        self.V, self.kv_dtype = V, kv_dtype
        self.prefix = np.asarray(prefix, np.int32)
        self.roots = self.rng.integers(0, V, len(prefix)).astype(np.int32)
        self.max_context = int(self.prefix.max()) + (ROUNDS + 4) * (L + 1) + D
        pages = -(-(self.max_context + D) // PAGE)  # a request past max_context still has its pages (REFUSED)
        bs = len(prefix)
        perm = self.rng.permutation(bs * pages + 3)
        self.bt = perm[: bs * pages].reshape(bs, pages).astype(np.int32)
        kv = self.rng.standard_normal((len(perm), PAGE, 576)) * 0.5
        self.kv = kv.astype(np.float32).astype(kv_dtype)
        self.dev = {"kv_cache": self.up(self.kv), "block_table": self.up(self.bt),
                    "prefix_lens": self.up(self.prefix), "root_tokens": self.up(self.roots)}  # fmt: skip

    def up(self, a):
        a = np.ascontiguousarray(a)
        if self.lib_name == "cupy":
            return self.lib.asarray(a)
        if a.dtype == BF16:
            return self.lib.from_numpy(a.view(np.int16)).cuda().view(self.lib.bfloat16)
        return self.lib.from_numpy(a).cuda()

    def up_all(self, arrays: dict) -> dict:
        """A round's inputs on the device."""
        return {k: self.up(v) for k, v in arrays.items()}

    def down(self, x, dtype=None):
        if self.lib_name == "cupy":
            return x.get()
        if str(x.dtype) == "torch.bfloat16":
            return x.view(self.lib.int16).cpu().numpy().view(BF16)
        h = x.cpu().numpy()
        return h.view(dtype) if dtype is not None and h.dtype.itemsize == np.dtype(dtype).itemsize else h

    def step(self, variants, logits_dtype):
        from kernels_cu.step import Step

        return Step(**self.dev, L=L, V=self.V, K=K, budget=BUDGET, H=H, softmax_scale=SCALE,
                    max_context=self.max_context, logits_dtype=logits_dtype, variants=variants)  # fmt: skip

    def inputs(self, logits_dtype, style):
        """A round's logits, queries and target tokens; the targets follow a random path of the reference's tree for
        this round (so acceptance lengths vary from 0 to L), and are random elsewhere."""
        bs = len(self.prefix)
        logits = hh.logit_rows(self.rng, (bs, L, self.V), logits_dtype, style)
        q = (self.rng.standard_normal((bs, D, H, 576))).astype(np.float32).astype(self.kv_dtype)
        top = ref_topk.draft_topk(logits, K)
        tree = ref_build.tree_build(top.top_logp, top.top_ids, self.roots, BUDGET, self.prefix)
        target = self.rng.integers(0, self.V, (bs, D)).astype(np.int32)
        for b in range(bs):
            u = 0
            for _ in range(int(self.rng.integers(0, L + 1))):
                kids = []
                c = int(tree.first_child[b, u])
                while c >= 0:
                    kids.append(c)
                    c = int(tree.next_sibling[b, c])
                if not kids:
                    break
                child = int(self.rng.choice(kids))
                target[b, u] = tree.tokens[b, child]
                u = child
        return {"logits": logits, "q": q, "target_tokens": target}

    def check_round(self, step, inp, r):
        """The round's outputs against the reference ops fed the previous op's device outputs, and the state after
        it (ST.2.1); then the host state advances."""
        out = step.results()
        ctx = f"(round {r})"
        got_top = TopK(self.down(out["draft_topk"].top_logp), self.down(out["draft_topk"].top_ids))
        topk.assert_matches_oracle(got_top, inp["logits"], K, context=ctx)
        want_tree = ref_build.tree_build(got_top.top_logp, got_top.top_ids, self.roots, BUDGET, self.prefix)
        got_tree = out["tree_build"]
        for f in Tree.FIELDS:
            if f == "full_mask":
                continue
            w = getattr(want_tree, f)
            assert_bit_exact(self.down(getattr(got_tree, f), w.dtype), w, what=f"tree {f}", spec_id="ST.2.1",
                             context=ctx)  # fmt: skip
        vis = self.down(got_tree.visibility, np.uint32)
        o64, l64 = ref_verify.tree_verify_float64(inp["q"], self.kv, self.bt, self.prefix, vis, SCALE)
        oc, lc = ("TV.2.1", "TV.2.3") if self.kv_dtype == np.float32 else ("TV.2.2", "TV.2.9")
        got_out = self.down(out["tree_verify"].out).astype(np.float64)
        assert_close(got_out, o64, what=f"verify out {ctx}", spec_id=oc, **clauses.clause(oc).tolerance())
        assert_close(self.down(out["tree_verify"].lse).astype(np.float64), l64, what=f"verify lse {ctx}",
                     spec_id=lc, **clauses.clause(lc).tolerance())  # fmt: skip
        for b in range(len(self.prefix)):
            assert_cosine(got_out[b], o64[b], what=f"verify out[{b}] {ctx}", spec_id="TV.2.7")
        tokens, fc, ns = (self.down(getattr(got_tree, f)) for f in ("tokens", "first_child", "next_sibling"))
        # (the reference commits into the host's cache in place)
        want = ref_accept.tree_accept(tokens, fc, ns, inp["target_tokens"], max_depth=L, kv_cache=self.kv,
                                      block_table=self.bt, prefix_lens=self.prefix)  # fmt: skip
        for f in Accept.FIELDS:
            assert_bit_exact(self.down(getattr(out["tree_accept"], f)), getattr(want, f), what=f"accept {f}",
                             spec_id="ST.2.1", context=ctx)  # fmt: skip
        self.prefix, self.roots = want.new_lens.astype(np.int32), want.bonus.astype(np.int32)
        self.assert_state(ctx)
        return want

    def refuse(self, step, change, message, ctx) -> None:
        """A round whose inputs carry `change` (a value the op refuses): check() raises the op's named error, and the
        step advanced nothing (the caller's own change to prefix_lens or root_tokens is undone here)."""
        saved = {k: self.dev[k].clone() for k in ("prefix_lens", "root_tokens")}
        inp = self.inputs(BF16, "normal")
        change(self, inp)
        step.round(**self.up_all(inp))
        with pytest.raises(InputError, match=message):
            step.check()
        for k in saved:
            self.dev[k].copy_(saved[k])
        self.assert_state(ctx)

    def assert_state(self, ctx):
        """The device's cache, prefix lengths and root tokens equal the host's, bit for bit."""
        assert_bit_exact(self.down(self.dev["kv_cache"]), self.kv, what="kv_cache", spec_id="ST.2.1", context=ctx)
        assert_bit_exact(self.down(self.dev["prefix_lens"]), self.prefix, what="prefix_lens", spec_id="ST.2.1",
                         context=ctx)  # fmt: skip
        assert_bit_exact(self.down(self.dev["root_tokens"]), self.roots, what="root_tokens", spec_id="ST.2.1",
                         context=ctx)  # fmt: skip


# (library, cache dtype, logits dtype, logits style, prefix lengths, vocabulary): a bf16 cache with bf16 logits full
# of exact ties (torch: cupy has no bf16), an fp32 one on cupy; one request long enough for a multi-split plan
CONFIGS = {
    "torch-bf16-ties": ("torch", BF16, BF16, "ties", [5, 40, 1500], 300),
    "cupy-fp32": ("cupy", np.float32, np.float32, "normal", [0, 17, 3000], 1000),
}


@pytest.mark.gpu
@pytest.mark.spec("ST.2.1", "ST.2.2")
@pytest.mark.parametrize("config", list(CONFIGS))
def test_replays_equal_the_reference_round_by_round(impl, config):
    variants = _variants(impl)
    lib_name, kv_dtype, logits_dtype, style, prefix, V = CONFIGS[config]
    w = World(lib_name, kv_dtype, prefix, seed=zlib.crc32(config.encode()), V=V)
    with w.step(variants, np.dtype(logits_dtype).name) as step:
        accepted = []
        for r in range(ROUNDS):
            inp = w.inputs(logits_dtype, style)
            dev = w.up_all(inp)
            with host_syncs.counting() as counts:  # ST.2.2: device inputs, one graph launch, nothing waits
                step.round(**dev)
            assert host_syncs.blocking(counts) == 0 and counts["kernel_launch"] == 0, (
                f"[ST.2.2] round {r} made the host wait or launched outside the graph: {dict(counts)}"
            )
            assert counts["graph_launch"] == 1, f"[ST.2.2] round {r}: {dict(counts)}"
            accepted.append(w.check_round(step, inp, r).accept_len)
    acc = np.concatenate(accepted)
    assert acc.min() == 0 and acc.max() >= 2, f"the rounds should accept 0 to L drafts, got {acc.tolist()}"


def _nan_logit(w, inp):
    inp["logits"][1, 2, 7] = np.nan


def _negative_root(w, inp):
    w.dev["root_tokens"][2] = -3


def _past_max_context(w, inp):
    w.dev["prefix_lens"][0] = w.max_context - 2


def _negative_target(w, inp):
    inp["target_tokens"][0, 0] = -5


def _inf_logit(w, inp):
    inp["logits"][0, 0, 0] = np.inf


# One refused value per op, injected in a round: (change, the op's named error)
REFUSED = {
    "draft_topk": (_nan_logit, r"logits: NaN at \[request 1, depth 2, token 7\]"),
    "tree_build": (_negative_root, r"root_tokens: .*negative"),
    "tree_verify": (_past_max_context, r"prefix_lens: request 0: .* exceeds max_context"),
    "tree_accept": (_negative_target, r"target_tokens: .*negative"),
}


@pytest.mark.gpu
@pytest.mark.spec("ST.2.3")
@pytest.mark.parametrize("op", list(REFUSED))
def test_a_refused_round_stops_the_step(impl, op):
    """Round 2 carries a value `op` refuses: check() names it, that round and the next (good inputs) commit and
    advance nothing; after reset() and the value undone, rounds go on as the reference's."""
    variants = _variants(impl)
    w = World("torch", BF16, [3, 30, 200], seed=7, V=300)
    change, message = REFUSED[op]
    with w.step(variants, "bfloat16") as step:
        for r in range(2):
            inp = w.inputs(BF16, "normal")
            step.round(**w.up_all(inp))
            w.check_round(step, inp, r)
        w.refuse(step, change, message, "(the refused round 2)")
        step.round(**w.up_all(w.inputs(BF16, "normal")))  # a good round 3
        with pytest.raises(InputError, match=message):
            step.check()
        w.assert_state("(round 3, after the refused round 2)")
        step.reset()
        for r in range(3, 5):
            inp = w.inputs(BF16, "normal")
            step.round(**w.up_all(inp))
            w.check_round(step, inp, r)


# Every refused value of ST.2.4's sweep: (the op that refuses it, change, the op's named error)
REFUSED_VALUES = {
    **{f"{op}-{change.__name__.lstrip('_')}": (op, change, message) for op, (change, message) in REFUSED.items()},
    "draft_topk-inf_logit": ("draft_topk", _inf_logit, r"logits: \+inf at \[request 0, depth 0, token 0\]"),
}


def _combinations(impl, op):
    """Every combination of the step's variants on this GPU in which impl's own op runs impl's variant (the _99k
    twins included: what an sm_120 GPU runs), as {op: variant} dicts."""
    from kernels_cu import runtime, specs

    arch = runtime.gpu().arch
    axes = {slug: [impl.variant] if slug in impl.loaders else
            [s.variant for s in specs.for_op(slug) if s.runs_on(arch)] for slug in STEP_OPS}  # fmt: skip
    combos = [{}]
    for slug, names in axes.items():
        combos = [{**c, slug: v} for c in combos for v in names]
    return combos


@pytest.mark.gpu
@pytest.mark.spec("ST.2.4")
@pytest.mark.parametrize("case", list(REFUSED_VALUES))
def test_a_refused_round_leaves_the_step_and_the_device_usable(impl, case):
    """A value the step's op refuses, first in round 0 (the ops after it read the zeroed set-up buffers) and again
    after a good round (they read that round's outputs), under every combination of the other ops' variants: each
    refused round raises the op's named error and faults nothing, and after reset() a good round on the same Step
    gives the reference's bits. Each case runs under the variants of the op that refuses it (the others skip), so
    every (case, combination) runs once; under compute-sanitizer memcheck on a GPU runner (tools/gpu_suite.sh)."""
    op, change, message = REFUSED_VALUES[case]
    _variants(impl)
    if op not in impl.loaders:
        pytest.skip(f"{impl.name}: the {case} case is swept under {op}'s variants")
    for variants in _combinations(impl, op):
        w = World("torch", BF16, [3, 30, 200], seed=zlib.crc32(f"{case}{sorted(variants.items())}".encode()), V=300)
        with w.step(variants, "bfloat16") as step:
            for r in range(2):  # round 0 refused before any good round, round 1 good, round 2 refused, round 3 good
                w.refuse(step, change, message, f"(refused round {2 * r}, variants {variants})")
                step.reset()
                inp = w.inputs(BF16, "normal")
                step.round(**w.up_all(inp))
                w.check_round(step, inp, f"{2 * r + 1}, after a refused round, variants {variants}")


@pytest.mark.gpu
@pytest.mark.spec("ST.1.1")
def test_set_up_arguments_are_checked_by_name(impl):
    variants = _variants(impl)
    from kernels_cu.step import Step

    w = World("torch", BF16, [3, 30], seed=3, V=300)
    base = dict(w.dev, L=L, V=300, K=K, budget=BUDGET, H=H, softmax_scale=SCALE, max_context=w.max_context,
                logits_dtype="bfloat16", variants=variants)  # fmt: skip
    bad = {
        "L": ({"L": 0}, r"L: 0 is outside 1\.\.32"),
        "K": ({"K": 301}, r"K: 301 is outside 1\.\.300"),
        "budget": ({"budget": 2000}, r"budget: 2000 is outside"),
        "logits_dtype": ({"logits_dtype": "int8"}, r"logits_dtype: 'int8'"),
        "variants": ({"variants": {"tree_build": "nope"}}, r"variants: tree_build has no variant 'nope'"),
        "host_prefix": ({"prefix_lens": w.prefix}, r"prefix_lens: deferred checks take device arrays"),
        "prefix_dtype": (
            {"prefix_lens": w.dev["prefix_lens"].long()},
            r"prefix_lens: shape \(2,\) dtype int64, "
            r"expected int32 \[bs\]",
        ),
        "roots_length": (
            {"root_tokens": w.dev["root_tokens"][:1]},
            r"root_tokens: shape \(1,\) dtype int32, "
            r"expected int32 \[2\]",
        ),
        "max_context": ({"max_context": 3}, r"max_context: 3 is outside"),
        "heads": ({"H": 129}, r"H: 129 is outside 1\.\.128"),
    }
    before = {k: w.down(v) for k, v in w.dev.items()}
    for change, message in bad.values():
        with pytest.raises(InputError, match=message):
            Step(**{**base, **change})
    for k, v in before.items():
        assert_bit_exact(w.down(w.dev[k]), v, what=k, spec_id="ST.1.1")
    with Step(**base) as step:  # and the process and device stay usable
        inp = w.inputs(BF16, "normal")
        step.round(**w.up_all(inp))
        w.check_round(step, inp, 0)


# The step's own host checks and the advance's precondition (harness/boundaries/step.py): no GPU needed.
@pytest.mark.spec("ST.1.1", "TA.4.5")
@pytest.mark.parametrize("case", list(host_checks.REFUSED))
def test_the_steps_own_arguments_are_checked_on_the_host(case):
    """Each refusal of the step's set-up, variants and round inputs (and the advance without a commit) names its
    argument and the problem."""
    call, message = host_checks.REFUSED[case]
    with pytest.raises(InputError, match=message):
        call()


@pytest.mark.spec("ST.1.1", "TA.4.5")
def test_the_steps_own_good_arguments_pass_on_the_host():
    got = host_checks.ACCEPTED[0]()
    assert got["logits_dtype"] == BF16 and (got["L"], got["K"]) == (4, 4)
    for call in host_checks.ACCEPTED[1:]:
        call()

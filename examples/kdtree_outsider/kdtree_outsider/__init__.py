"""An outsider's implementation of the four ops, written from docs/ADAPTERS.md alone (its own numpy code: it
imports the contract, never the project's references or harness), and six copies of it, each with one bug a
kernel author might plant. meta/test_planted.py certifies each and checks that exactly the bug's own clauses
fail, each row naming the failing test and case.

    pytest conformance --impl kdtree_outsider:RIGHT        (PYTHONPATH=examples/kdtree_outsider)
    pytest conformance --impl kdtree_outsider:TB_DEEP_TIES --op tree_build

- RIGHT: all four ops, every capability the contract allows.
- TB_DEEP_TIES (tree_build): candidates tied in score below depth 8 pop by the higher token id.
- TA_ONE_SHORT (tree_accept): the walk stops one short of the last depth (max_depth).
- DT_LSE_TOP1024 (draft_topk): the log-sum-exp over the top 1,024 logits of each row only.
- DT_NEG_ZERO_FIRST (draft_topk): -0.0 ranked before +0.0 (the sign bit kept in the sort key).
- TV_MASK_BIT31 (tree_verify): bit 31 of every visibility word ignored.
- DT_BF16_VIA_FP16 (draft_topk, declared bf16 only): the bf16 logits computed through float16.
"""

from adapters import Capabilities, Implementation, Op

from . import ops

__version__ = "0.1.0"


def _impl(name: str, bugs: ops.Bugs, only: str | None = None, caps: Capabilities | None = None) -> Implementation:
    fns = {"tree_build": ops.tree_build, "tree_verify": ops.tree_verify, "tree_accept": ops.tree_accept,
           "draft_topk": ops.draft_topk}  # fmt: skip
    chosen = [only] if only else list(fns)
    return Implementation(
        name=name,
        version=__version__,
        ops={op: Op(fns[op](bugs), caps or Capabilities()) for op in chosen},
        description=f"kdtree_outsider ({bugs.describe()})",
    )


RIGHT = _impl("outsider", ops.Bugs())
TB_DEEP_TIES = _impl("outsider-tb-deep-ties", ops.Bugs(deep_ties=True), "tree_build")
TA_ONE_SHORT = _impl("outsider-ta-one-short", ops.Bugs(accept_one_short=True), "tree_accept")
DT_LSE_TOP1024 = _impl("outsider-dt-lse-top1024", ops.Bugs(lse_top1024=True), "draft_topk")
DT_NEG_ZERO_FIRST = _impl("outsider-dt-neg-zero-first", ops.Bugs(neg_zero_first=True), "draft_topk")
TV_MASK_BIT31 = _impl("outsider-tv-mask-bit31", ops.Bugs(mask_bit31=True), "tree_verify")
DT_BF16_VIA_FP16 = _impl(
    "outsider-dt-bf16-via-fp16", ops.Bugs(bf16_via_fp16=True), "draft_topk", Capabilities(dtypes=("bfloat16",))
)
PLANTED = {
    "TB_DEEP_TIES": TB_DEEP_TIES,
    "TA_ONE_SHORT": TA_ONE_SHORT,
    "DT_LSE_TOP1024": DT_LSE_TOP1024,
    "DT_NEG_ZERO_FIRST": DT_NEG_ZERO_FIRST,
    "TV_MASK_BIT31": TV_MASK_BIT31,
    "DT_BF16_VIA_FP16": DT_BF16_VIA_FP16,
}

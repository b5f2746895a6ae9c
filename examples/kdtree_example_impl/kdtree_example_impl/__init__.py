"""An example of a user's own package under test (docs/ADAPTERS.md): two implementations of all four ops.

- CORRECT: tree_build, tree_accept and draft_topk wrap the project's numpy references; tree_verify is this package's
  own float64 numpy attention, declared for float32 inputs only (so the bf16 clauses are *not claimed*).
- WRONG: the same with one plausible bug per op, each of which a clause must catch:
  tree_build sorts every top-k row by (log-prob, token id) first, so tied candidates lose the drafter's rank
  order (TB.2.x); tree_accept builds each sibling list by pushing to the front, so the walk takes the last
  matching sibling instead of the first (TA.2.2); tree_verify keeps its log-sum-exp in base 2, as
  exp2-based kernels compute it, and forgets to convert it to the natural log (TV.2.3); draft_topk takes its top
  K from the end of an ascending stable sort, so tied logits come out highest token id first (DT.2.1).

- CHAINS_ONLY: tree_verify alone, the reference behind the declaration a causal decode kernel makes (bf16,
  pages of 64, chains only, no batch-invariance promise), refusing anything else: the suite must draw its
  inputs inside that declaration and report the rest as not claimed.

Reach them with `pytest conformance --impl kdtree_example_impl:CORRECT` or, once installed
(`pip install examples/kdtree_example_impl`), `--impl example-correct`.
"""

from adapters import Capabilities, Implementation, Op

from . import ops

__version__ = "0.1.0"

_FP32 = Capabilities(dtypes=("float32",))


def _all_ops(name: str, build, verify, accept, topk, description: str) -> Implementation:
    return Implementation(
        name=name,
        version=__version__,
        ops={
            "tree_build": Op(build),
            "tree_verify": Op(verify, _FP32),
            "tree_accept": Op(accept),
            "draft_topk": Op(topk),
        },
        description=description,
    )


CORRECT = _all_ops(
    "example-correct", ops.tree_build, ops.tree_verify, ops.tree_accept, ops.draft_topk,
    "the references for tree_build/tree_accept/draft_topk, an own float64 numpy attention for tree_verify",
)  # fmt: skip
WRONG = _all_ops(
    "example-wrong", ops.tree_build_id_ties, ops.tree_verify_base2_lse, ops.tree_accept_pushed_front,
    ops.draft_topk_reversed_ascending,
    "CORRECT with one plausible bug per op (ties by token id, last matching sibling, base-2 lse, ties to the "
    "higher id)",
)  # fmt: skip
CHAINS_ONLY = Implementation(
    name="example-chains-only",
    version=__version__,
    ops={
        "tree_verify": Op(
            ops.tree_verify_chains_only,
            Capabilities(dtypes=("bfloat16",), dims={"page_size": {64}}, trees="chains", batch_invariant=False),
        )
    },
    description="the tree_verify reference behind a FlashMLA-like declaration, refusing anything outside it",
)

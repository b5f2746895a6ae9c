"""Contract of tree_verify: MLA absorb tree-verify attention over a paged latent cache (spec/tree_verify.md)."""

from __future__ import annotations

import dataclasses

from . import checks as c
from . import limits, paged, trees
from .op import Arg, Bound, OpContract, Output, Symbol


class Verified(tuple):
    """(out, lse): out [bs, Q, H, 512] in q's dtype, lse float32 [bs, Q, H] (natural log)."""

    __slots__ = ()
    FIELDS = ("out", "lse")

    def __new__(cls, out, lse):
        return super().__new__(cls, (out, lse))

    out = property(lambda self: self[0])
    lse = property(lambda self: self[1])


def _check_shapes(a: dict, dims: dict) -> None:
    """What the cache's shape alone must meet (validate_shapes(): the deferred path, TV.3.7)."""
    paged.check_cache_shape(a["kv_cache"].shape)


def _check_values(a: dict, dims: dict) -> None:
    pre = a["prefix_lens"]
    _check_shapes(a, dims)
    c.non_negative("prefix_lens", pre, "length")
    paged.check_context(pre, dims["Q"], "tree rows")
    paged.check_pages(a["kv_cache"].shape, a["block_table"], pre, dims["Q"])
    trees.check_visibility("visibility", a["visibility"], dims["Q"])


CONTRACT = OpContract(
    slug="tree_verify",
    summary="tree-verify attention in MLA absorb form over a paged latent cache, under the tree's visibility mask",
    args=(
        Arg(
            "q",
            "array",
            "absorbed q_nope (512) ‖ q_pe (64) per query and head",
            ("float32", "bfloat16"),
            ("bs", "Q", "H", limits.HEAD_DIM),
            dtype_symbol="T",
        ),
        dataclasses.replace(paged.KV_CACHE, dtype_symbol="T"),
        paged.BLOCK_TABLE,
        paged.PREFIX_LENS,
        Arg(
            "visibility",
            "array",
            "tree_build's bitmask: query i sees tree row j iff bit j of row i",
            ("uint32",),
            ("bs", "Q", "W"),
            reads_values=True,
        ),
        Arg("softmax_scale", "real", "applied to the logits; its float32 value must be finite and > 0"),
    ),
    symbols=(
        Symbol("bs", 1, limits.MAX_BATCH, "batch size"),
        Symbol("Q", 1, limits.MAX_TREE, "queries (tree width)"),
        Symbol("H", 1, limits.MAX_HEADS, "heads"),
        *paged.SYMBOLS,
        Symbol("W", 1, (limits.MAX_TREE + 31) // 32, "visibility words"),
    ),
    outputs=(
        Output("out", "T", ("bs", "Q", "H", limits.LATENT), "attention output, in the input dtype"),
        Output("lse", "float32", ("bs", "Q", "H"), "natural-log sum of exp of the scaled logits"),
    ),
    result=Verified,
    check_values=_check_values,
    check_shapes=_check_shapes,
    bounds=(
        Bound("kv_cache.cache_rows", "kv_cache", "cache_rows", "TV.1.1"),
        Bound("prefix_lens.at_least_0", "prefix_lens", "at_least", "TV.1.2", value=0),
        Bound("prefix_lens.context", "prefix_lens", "context", "TV.1.2", rows="Q"),
        Bound("block_table.pages_needed", "block_table", "pages_needed", "TV.1.2", rows="Q"),
        Bound("block_table.page_index", "block_table", "page_index", "TV.1.2", rows="Q"),
        Bound("visibility.closure", "visibility", "visibility", "TV.1.3"),
    ),
    derived={"W": lambda d: (d["Q"] + 31) // 32},
    errors=(
        "a dtype, rank or shape is wrong (q and kv_cache share one dtype), or a dimension is outside its limit;",
        "softmax_scale is not a real number, or its float32 value is not finite and > 0;",
        "prefix_lens is negative or prefix_len + Q exceeds the context limit; a needed page is missing or out of "
        "range;",
        "visibility is not a tree's ancestor closure (cyclic, non-prefix, bits beyond Q).",
    ),
)

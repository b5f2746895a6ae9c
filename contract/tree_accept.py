"""Contract of tree_accept: greedy walk of the verified tree and the latent-KV commit (spec/tree_accept.md)."""

from __future__ import annotations

import dataclasses

import numpy as np

from . import checks as c
from . import limits, paged, trees
from .op import Arg, Bound, OpContract, Output, Symbol


@dataclasses.dataclass
class Accept:
    accept_len: np.ndarray  # int32 [bs]
    accept_path: np.ndarray  # int32 [bs, 1 + max_depth]
    emitted: np.ndarray  # int32 [bs, 1 + max_depth]
    bonus: np.ndarray  # int32 [bs]
    new_lens: np.ndarray  # int32 [bs] = prefix_len + 1 + accept_len

    FIELDS = ("accept_len", "accept_path", "emitted", "bonus", "new_lens")


def _check_shapes(a: dict, dims: dict) -> None:
    """What the commit needs of the cache beyond its shape symbols, none of it values (validate_shapes(): the
    deferred path, TA.4.4)."""
    kv = a["kv_cache"]
    if kv is None:
        return
    flags = kv.flags if isinstance(kv, np.ndarray) else kv  # an ArrayInfo for a device cache
    if not (flags.writeable and flags.c_contiguous):
        c.fail("kv_cache", "must be a writeable C-contiguous array (the commit is in place)")
    paged.check_cache_shape(kv.shape)


def _check_values(a: dict, dims: dict) -> None:
    c.non_negative("tokens", a["tokens"], "token id")
    c.non_negative("target_tokens", a["target_tokens"], "token id")
    trees.check_links("first_child", a["first_child"], "next_sibling", a["next_sibling"])
    depth = trees.depths_from_parents(trees.parents_from_links(a["first_child"], a["next_sibling"]))
    L = a["max_depth"]
    if (depth > L).any():
        b, u = c.first_bad(depth > L)
        c.fail("first_child", f"request {b} node {u} is at depth {int(depth[b, u])} > max_depth {L}")
    kv = a["kv_cache"]
    if kv is None:
        return
    _check_shapes(a, dims)
    pre = a["prefix_lens"]
    c.non_negative("prefix_lens", pre, "length")
    D = dims["D"]
    paged.check_context(pre, D, "tree rows")
    paged.check_pages(kv.shape, a["block_table"], pre, D)
    paged.check_distinct_rows(a["block_table"], kv.shape[1], pre, D)


CONTRACT = OpContract(
    slug="tree_accept",
    summary="greedy walk of the verified tree (accepted path, bonus token) and the in-place latent-KV commit",
    args=(
        Arg(
            "tokens",
            "array",
            "draft token per node (tree_build's tokens), >= 0",
            ("int32",),
            ("bs", "D"),
            reads_values=True,
        ),
        Arg(
            "first_child",
            "array",
            "first child per node, -1 = none; links point forward",
            ("int32",),
            ("bs", "D"),
            reads_values=True,
        ),
        Arg(
            "next_sibling",
            "array",
            "next sibling per node, -1 = none; siblings ascending",
            ("int32",),
            ("bs", "D"),
            reads_values=True,
        ),
        Arg(
            "target_tokens",
            "array",
            "the target's greedy token at each node, >= 0",
            ("int32",),
            ("bs", "D"),
            reads_values=True,
        ),
        Arg(
            "max_depth",
            "int",
            "L: no node is deeper; paths are padded to 1 + L",
            lo=0,
            hi=limits.MAX_DEPTH,
            keyword_only=True,
        ),
        # the commit: all three or none
        *(
            dataclasses.replace(a, default=None, keyword_only=True, group="commit")
            for a in (paged.KV_CACHE, paged.BLOCK_TABLE, paged.PREFIX_LENS)
        ),
    ),
    symbols=(
        Symbol("bs", 1, limits.MAX_BATCH, "batch size"),
        Symbol("D", 1, limits.MAX_TREE, "tree width"),
        *paged.SYMBOLS,
    ),
    outputs=(
        Output("accept_len", "int32", ("bs",), "accepted drafts, root excluded"),
        Output("accept_path", "int32", ("bs", "1+L"), "node indices, root first, -1 padded"),
        Output("emitted", "int32", ("bs", "1+L"), "accepted draft tokens then the bonus token, -1 padded"),
        Output("bonus", "int32", ("bs",), "target token at the last accepted node (the next root)"),
        Output("new_lens", "int32", ("bs",), "prefix_len + 1 + accept_len (prefix_len 0 without a commit)"),
    ),
    result=Accept,
    check_values=_check_values,
    check_shapes=_check_shapes,
    bounds=(
        Bound("tokens.at_least_0", "tokens", "at_least", "TA.1.1", value=0),
        Bound("tokens.at_most_max_token", "tokens", "at_most", "TA.1.1", value=limits.MAX_TOKEN),
        Bound("target_tokens.at_least_0", "target_tokens", "at_least", "TA.1.1", value=0),
        Bound("target_tokens.at_most_max_token", "target_tokens", "at_most", "TA.1.1", value=limits.MAX_TOKEN),
        Bound("links.tree", "first_child", "links", "TA.1.2"),
        Bound("first_child.max_depth", "first_child", "max_depth", "TA.1.2"),
        Bound("kv_cache.writeable", "kv_cache", "writeable", "TA.1.1"),
        Bound("kv_cache.cache_rows", "kv_cache", "cache_rows", "TA.1.1"),
        Bound("prefix_lens.at_least_0", "prefix_lens", "at_least", "TA.1.3", value=0),
        Bound("prefix_lens.context", "prefix_lens", "context", "TA.1.3", rows="D"),
        Bound("block_table.pages_needed", "block_table", "pages_needed", "TA.1.3", rows="D"),
        Bound("block_table.page_index", "block_table", "page_index", "TA.1.3", rows="D"),
        Bound("block_table.distinct_rows", "block_table", "distinct_rows", "TA.1.3", rows="D"),
    ),
    in_place=("kv_cache",),
    errors=(
        "a dtype, rank or shape is wrong, or a dimension is outside its limit; only part of the commit is given;",
        "a token or target token is negative; links are cyclic, point backwards, give a node two parents, give the "
        "root a sibling, or reach deeper than max_depth;",
        "the cache is not writeable and C-contiguous; page_size is 0; prefix_lens is negative or prefix_len + D "
        "exceeds the context limit; a needed page is missing or out of range; two requests' tree rows share a "
        "physical cache row.",
    ),
)


def check_advance(*, has_commit: bool) -> None:
    """The step's advance (TA.4.5, the deferred path's `advance_roots`) moves prefix_lens: it needs the commit."""
    if not has_commit:
        c.fail("advance_roots", "the advance moves prefix_lens, so it needs the commit (kv_cache, block_table, "
               "prefix_lens)")  # fmt: skip

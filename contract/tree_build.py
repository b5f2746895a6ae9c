"""Contract of tree_build: the DDTree best-first draft tree and its layouts (spec/tree_build.md)."""

from __future__ import annotations

import dataclasses

import numpy as np

from . import checks as c
from . import limits, paged
from .op import Arg, Bound, OpContract, Output, Symbol


@dataclasses.dataclass
class Tree:
    """Outputs of tree_build; every array is [bs, 1+B] except where noted."""

    n_nodes: np.ndarray  # int32 [bs], including the root
    parents: np.ndarray  # int32, root and pads -1
    depths: np.ndarray  # int32, root and pads 0
    tokens: np.ndarray  # int32, root = root token, pads = root token
    ranks: np.ndarray  # int32, rank at the node's own depth; root and pads -1
    scores: np.ndarray  # float64, root 0.0, pads -inf
    visibility: np.ndarray  # uint32 [bs, 1+B, ceil((1+B)/32)], bit j of row i: j is i or an ancestor of i
    positions: np.ndarray  # int32, prefix_len + depth
    first_child: np.ndarray  # int32, -1 = none
    next_sibling: np.ndarray  # int32, -1 = none; siblings in ascending index
    full_mask: np.ndarray  # bool, flat: per request a row-major [1+B, prefix_len + 1+B] block; empty unless asked

    FIELDS = (
        "n_nodes",
        "parents",
        "depths",
        "tokens",
        "ranks",
        "scores",
        "visibility",
        "positions",
        "first_child",
        "next_sibling",
        "full_mask",
    )


def _defaults(args: dict) -> None:
    # prefix_lens is optional: without it every request's tree starts at position 0
    roots = args["root_tokens"]
    if args["prefix_lens"] is None and type(roots) is np.ndarray and roots.ndim == 1:
        args["prefix_lens"] = np.zeros(roots.shape, np.int32)


def full_mask_bytes(prefix_lens: np.ndarray, D: int) -> int:
    """Size of the FULL_MASK layout: D rows of prefix_len + D columns per request."""
    return int(D * (int(np.sum(prefix_lens, dtype=np.int64)) + len(prefix_lens) * D))


def _dims(a: dict, dims: dict) -> None:
    B = a["budget"]
    dims.update(B=B, D=1 + B, W=(B + 32) // 32, K=min(B, dims["K_in"]))


def _check_shapes(a: dict, dims: dict) -> None:
    """validate_shapes(): the FULL_MASK size reads prefix_lens' values, so deferred checks refuse it."""
    _dims(a, dims)
    if a["with_full_mask"]:
        c.fail("with_full_mask", "the FULL_MASK size depends on prefix_lens' values: deferred checks need False")
    dims["F"] = 0


def _check_values(a: dict, dims: dict) -> None:
    lp, ids = a["top_logp"], a["top_ids"]
    _dims(a, dims)
    if np.isnan(lp).any():
        c.fail("top_logp", f"NaN at {c.first_bad(np.isnan(lp))}")
    if (lp > 0).any():
        c.fail("top_logp", f"log-prob > 0 at {c.first_bad(lp > 0)} (values must be <= 0 or -inf)")
    if lp.shape[2] > 1 and (lp[:, :, 1:] > lp[:, :, :-1]).any():
        b, d, r = c.first_bad(lp[:, :, 1:] > lp[:, :, :-1])
        c.fail("top_logp", f"row [{b}, {d}] is not non-increasing at rank {r + 1}")
    c.non_negative("top_ids", ids, "token id")
    if ids.shape[2] > 1:
        s = np.sort(ids, axis=-1)
        dup = s[:, :, 1:] == s[:, :, :-1]
        if dup.any():
            b, d, _ = c.first_bad(dup)
            c.fail("top_ids", f"row [{b}, {d}] has duplicate token ids")
    c.non_negative("root_tokens", a["root_tokens"], "token id")
    c.non_negative("prefix_lens", a["prefix_lens"], "length")
    paged.check_context(a["prefix_lens"], dims["D"], "tree rows")
    dims["F"] = full_mask_bytes(a["prefix_lens"], dims["D"]) if a["with_full_mask"] else 0
    if dims["F"] > limits.MAX_FULL_MASK_BYTES:
        c.fail(
            "with_full_mask",
            f"the FULL_MASK layout would take {dims['F']} bytes (D·(prefix_len + D) per request), more than "
            f"{limits.MAX_FULL_MASK_BYTES}; use the visibility bitmask",
        )


CONTRACT = OpContract(
    slug="tree_build",
    summary="the DDTree best-first draft tree from per-depth top-k log-probs, with its layouts",
    args=(
        Arg(
            "top_logp",
            "array",
            "per-depth top-k log-probs, rows non-increasing, <= 0 or -inf, no NaN",
            ("float32",),
            ("bs", "L", "K_in"),
            reads_values=True,
        ),
        Arg(
            "top_ids",
            "array",
            "their token ids, distinct per row, >= 0",
            ("int32",),
            ("bs", "L", "K_in"),
            reads_values=True,
        ),
        Arg(
            "root_tokens",
            "array",
            "each request's root token (the last committed token), >= 0",
            ("int32",),
            ("bs",),
            reads_values=True,
        ),
        Arg("budget", "int", "B, non-root nodes per tree (the root is not counted)", lo=0, hi=limits.MAX_BUDGET),
        Arg(
            "prefix_lens",
            "array",
            "committed length per request; positions = prefix_len + depth (default 0)",
            ("int32",),
            ("bs",),
            default=None,
            reads_values=True,
        ),
        Arg(
            "with_full_mask",
            "flag",
            "also make SGLang's FULL_MASK layout (D·(prefix_len + D) bytes per request)",
            default=False,
            keyword_only=True,
        ),
    ),
    symbols=(
        Symbol("bs", 1, limits.MAX_BATCH, "batch size"),
        Symbol("L", 0, limits.MAX_DEPTH, "depth"),
        Symbol("K_in", 0, limits.MAX_TOPK, "top-k"),
    ),
    outputs=(
        Output("n_nodes", "int32", ("bs",), "nodes per tree, root included"),
        Output("parents", "int32", ("bs", "D"), "parent index; root and pads -1"),
        Output("depths", "int32", ("bs", "D"), "depth; root and pads 0"),
        Output("tokens", "int32", ("bs", "D"), "draft token; root and pads: the root token"),
        Output("ranks", "int32", ("bs", "D"), "rank at the node's depth; root and pads -1"),
        Output("scores", "float64", ("bs", "D"), "path log-prob sum; root +0.0, pads -inf"),
        Output("visibility", "uint32", ("bs", "D", "W"), "bit j of row i: j is i or an ancestor of i"),
        Output("positions", "int32", ("bs", "D"), "prefix_len + depth"),
        Output("first_child", "int32", ("bs", "D"), "-1 = none"),
        Output("next_sibling", "int32", ("bs", "D"), "-1 = none; siblings in ascending index"),
        Output("full_mask", "bool", ("F",), "FULL_MASK rows [D, prefix_len + D] per request; empty unless asked"),
    ),
    result=Tree,
    check_values=_check_values,
    check_shapes=_check_shapes,
    bounds=(
        Bound("top_logp.no_nan", "top_logp", "no_nan", "TB.1.3"),
        Bound("top_logp.at_most_0", "top_logp", "at_most", "TB.1.3", value=0.0),
        Bound("top_logp.non_increasing", "top_logp", "non_increasing", "TB.1.3"),
        Bound("top_ids.at_least_0", "top_ids", "at_least", "TB.1.3", value=0),
        Bound("top_ids.at_most_max_token", "top_ids", "at_most", "TB.1.3", value=limits.MAX_TOKEN),
        Bound("top_ids.distinct", "top_ids", "distinct", "TB.1.3"),
        Bound("root_tokens.at_least_0", "root_tokens", "at_least", "TB.1.2", value=0),
        Bound("root_tokens.at_most_max_token", "root_tokens", "at_most", "TB.1.2", value=limits.MAX_TOKEN),
        Bound("prefix_lens.at_least_0", "prefix_lens", "at_least", "TB.1.2", value=0),
        Bound("prefix_lens.context", "prefix_lens", "context", "TB.1.2", rows="D"),
        Bound("with_full_mask.bytes", "with_full_mask", "full_mask_bytes", "TB.1.2"),
    ),
    fill_defaults=_defaults,
    errors=(
        "a dtype, rank or shape is wrong, or a dimension is outside its limit;",
        "top_logp holds NaN, a value > 0 or an unsorted row; top_ids has a negative or duplicate id in a row;",
        "root_tokens or prefix_lens is negative, or prefix_len + 1 + budget exceeds the context limit;",
        "with_full_mask asks for a FULL_MASK layout over MAX_FULL_MASK_BYTES.",
    ),
)

"""Input validation shared by the references and the CUDA wrappers.

Every op checks its inputs here before any work (and before anything reaches the GPU), raising
`InputError` (a ValueError) whose message starts with the argument name. The CUDA wrappers call the same
functions on host copies of small index arrays, so both implementations reject the same inputs with the
same messages (spec clauses TB.1.*, TV.1.*, TA.1.*).
"""

from __future__ import annotations

import numpy as np

# Limits of the contract (the CUDA kernels are sized for them).
MAX_BATCH = 1024
MAX_BUDGET = 1024
MAX_DEPTH = 32
MAX_TOPK = 1024
LATENT = 512
ROPE = 64
HEAD_DIM = LATENT + ROPE


class InputError(ValueError):
    """Bad input to an op. The message names the argument and what is wrong."""


def fail(arg: str, problem: str):
    raise InputError(f"{arg}: {problem}")


def array(arg: str, a, dtypes: tuple, ndim: int | None = None) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        fail(arg, f"expected a numpy array, got {type(a).__name__}")
    if a.dtype not in [np.dtype(d) for d in dtypes]:
        fail(arg, f"dtype {a.dtype}, expected {' or '.join(str(np.dtype(d)) for d in dtypes)}")
    if ndim is not None and a.ndim != ndim:
        fail(arg, f"shape {a.shape} has {a.ndim} dims, expected {ndim}")
    return a


def shape(arg: str, a: np.ndarray, want: tuple) -> None:
    if a.shape != tuple(want):
        fail(arg, f"shape {a.shape}, expected {tuple(want)}")


def integer(arg: str, v, lo: int, hi: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        fail(arg, f"expected an integer, got {type(v).__name__}")
    if not lo <= int(v) <= hi:
        fail(arg, f"{int(v)} is outside {lo}..{hi}")
    return int(v)


def first_bad(mask: np.ndarray) -> tuple:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def paged_rows(kv_shape: tuple, block_table: np.ndarray, prefix_lens: np.ndarray, rows: int) -> None:
    """Every page that positions 0 .. prefix_len + rows - 1 of each request need is in its block-table row
    and is an index into the cache (the cache's shape is enough: device caches are not copied)."""
    num_pages, page_size = kv_shape[0], kv_shape[1]
    need = (prefix_lens.astype(np.int64) + rows + page_size - 1) // page_size
    if (need > block_table.shape[1]).any():
        b = int(np.argmax(need > block_table.shape[1]))
        fail(
            "block_table",
            f"request {b} needs {int(need[b])} pages for prefix {int(prefix_lens[b])} + {rows} rows, "
            f"the table has {block_table.shape[1]}",
        )
    for b in range(len(prefix_lens)):
        used = block_table[b, : need[b]]
        bad = (used < 0) | (used >= num_pages)
        if bad.any():
            j = int(np.argmax(bad))
            fail("block_table", f"[{b}, {j}] = {int(used[j])} is not a page index in 0..{num_pages - 1}")


def tree_links(arg_fc: str, first_child: np.ndarray, arg_ns: str, next_sibling: np.ndarray) -> None:
    """first_child/next_sibling [bs, D] must describe a forest hanging off node 0 in which every link
    points to a larger index (parents before children, siblings ascending) and no node has two incoming
    links; nodes with no incoming link (pads) are allowed, the root must have none."""
    bs, D = first_child.shape
    idx = np.arange(D)[None, :]
    for arg, a in ((arg_fc, first_child), (arg_ns, next_sibling)):
        bad = (a != -1) & ((a <= idx) | (a >= D))
        if bad.any():
            b, u = first_bad(bad)
            fail(
                arg,
                f"[{b}, {u}] = {int(a[b, u])} must be -1 or an index in {u + 1}..{D - 1} (cyclic or non-prefix tree)",
            )
    for b in range(bs):
        links = np.concatenate([first_child[b][first_child[b] >= 0], next_sibling[b][next_sibling[b] >= 0]])
        counts = np.bincount(links, minlength=D)
        if (counts > 1).any():
            fail(
                arg_fc,
                f"request {b}: node {int(np.argmax(counts > 1))} has more than one incoming link "
                f"(first_child/next_sibling do not form a tree)",
            )

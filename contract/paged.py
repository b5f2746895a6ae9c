"""Paged latent-cache addressing, shared by the contracts and the references.

Request b's logical position p lives at page block_table[b, p // page_size], row p % page_size; its
physical row index is page * page_size + row.
"""

from __future__ import annotations

import numpy as np

from . import limits
from .checks import fail
from .op import Arg, Symbol

# The paged cache's dimensions.
SYMBOLS = (
    Symbol("num_pages", 1, limits.MAX_CACHE_ROWS, "pages"),
    Symbol("page_size", 1, limits.MAX_PAGE_SIZE, "page size"),
    Symbol("max_pages", 1, limits.MAX_CONTEXT, "block-table width"),
)

# The paged-cache arguments tree_verify and tree_accept share (tree_accept takes them keyword-only, as its
# optional commit: dataclasses.replace there).
KV_CACHE = Arg(
    "kv_cache",
    "array",
    "latent cache rows c_kv (512) ‖ k_pe (64); values = the first 512 columns",
    ("float32", "bfloat16"),
    ("num_pages", "page_size", limits.HEAD_DIM),
)
BLOCK_TABLE = Arg(
    "block_table",
    "array",
    "page of each request's logical page; entries past its need are not read",
    ("int32",),
    ("bs", "max_pages"),
    reads_values=True,
)
PREFIX_LENS = Arg(
    "prefix_lens",
    "array",
    "committed length per request; the tree's rows follow it",
    ("int32",),
    ("bs",),
    reads_values=True,
)


def check_context(prefix_lens: np.ndarray, rows: int, what: str) -> None:
    """prefix_len + rows (the tree's own rows) fits the context limit, for every request."""
    total = prefix_lens.astype(np.int64) + rows
    if (total > limits.MAX_CONTEXT).any():
        b = int(np.argmax(total > limits.MAX_CONTEXT))
        fail(
            "prefix_lens",
            f"request {b}: prefix {int(prefix_lens[b])} + {rows} {what} = {int(total[b])} exceeds the context limit "
            f"{limits.MAX_CONTEXT}",
        )


def check_cache_shape(kv_shape: tuple) -> None:
    if kv_shape[0] * kv_shape[1] > limits.MAX_CACHE_ROWS:
        fail("kv_cache", f"{kv_shape[0]} pages of {kv_shape[1]} rows exceed {limits.MAX_CACHE_ROWS} rows")


def pages_needed(prefix_lens: np.ndarray, rows: int, page_size: int) -> np.ndarray:
    return (prefix_lens.astype(np.int64) + rows + page_size - 1) // page_size


def check_pages(kv_shape: tuple, block_table: np.ndarray, prefix_lens: np.ndarray, rows: int) -> None:
    """Every page that positions 0 .. prefix_len + rows - 1 of each request need is in its block-table row
    and is an index into the cache (the cache's shape is enough: device caches are not copied). Entries
    past what a request needs are never read and may hold anything."""
    num_pages, page_size = kv_shape[0], kv_shape[1]
    need = pages_needed(prefix_lens, rows, page_size)
    if (need > block_table.shape[1]).any():
        b = int(np.argmax(need > block_table.shape[1]))
        fail(
            "block_table",
            f"request {b} needs {int(need[b])} pages for prefix {int(prefix_lens[b])} + {rows} rows, "
            f"the table has {block_table.shape[1]}",
        )
    used = np.arange(block_table.shape[1])[None, :] < need[:, None]
    bad = used & ((block_table < 0) | (block_table >= num_pages))
    if bad.any():
        b, j = (int(i) for i in np.argwhere(bad)[0])
        fail("block_table", f"[{b}, {j}] = {int(block_table[b, j])} is not a page index in 0..{num_pages - 1}")


def physical_rows(block_table: np.ndarray, page_size: int, b: int, positions: np.ndarray) -> np.ndarray:
    """Physical row indices (page * page_size + row) of request b's logical positions."""
    positions = np.asarray(positions, np.int64)
    return block_table[b, positions // page_size].astype(np.int64) * page_size + positions % page_size


def check_distinct_rows(block_table: np.ndarray, page_size: int, prefix_lens: np.ndarray, rows: int) -> None:
    """The rows prefix_len .. prefix_len + rows - 1 of every request are distinct physical rows, within a
    request and across requests (the commit reads and writes exactly these: an alias makes the result depend
    on request order, and on a GPU it is a race). Prefix rows may be shared (prefix caching)."""
    bs = len(prefix_lens)
    pos = prefix_lens.astype(np.int64)[:, None] + np.arange(rows)[None, :]  # [bs, rows]
    phys = block_table[np.arange(bs)[:, None], pos // page_size].astype(np.int64) * page_size + pos % page_size
    flat = phys.reshape(-1)
    order = np.argsort(flat, kind="stable")
    dup = np.flatnonzero(flat[order][1:] == flat[order][:-1])
    if len(dup):
        first, second = sorted((int(order[dup[0]]), int(order[dup[0] + 1])))
        (b1, j1), (b2, j2) = divmod(first, rows), divmod(second, rows)
        fail(
            "block_table",
            f"request {b1} position {int(prefix_lens[b1]) + j1} and request {b2} position {int(prefix_lens[b2]) + j2} "
            f"map to the same cache row {int(flat[first])} (the commit's rows must not alias)",
        )


def cache_rows(kv_cache: np.ndarray, block_table: np.ndarray, b: int, positions: np.ndarray) -> np.ndarray:
    """Request b's cache rows at the given logical positions, [len(positions), 576]."""
    positions = np.asarray(positions, np.int64)
    page_size = kv_cache.shape[1]
    return kv_cache[block_table[b, positions // page_size], positions % page_size]

"""How to make a valid case of each op for given parameters (a tree, a paged cache): the one thing the boundary
generator knows per op. Also shape-only cases and arrays larger than the machine, for cases refused by their
shape before any value is read."""

from __future__ import annotations

import mmap
from collections.abc import Callable

import numpy as np

import contract
from contract.op import REQUIRED, OpContract
from harness import strategies as hh

from .core import TooLarge


# Each builder makes a valid case of its op for the parameters given (symbols by name, int and flag arguments
# by name, "dtype", "prefix_lens" as a list, each argument group's name (False: left out), and a few of its
# own), choosing whatever else keeps the case valid and its oracle cheap. Unknown parameters are an error: a
# generator asking for what a builder cannot do must not get a silently different case.
def _take(p: dict, known: set[str]) -> dict:
    unknown = set(p) - known
    if unknown:
        raise TypeError(f"builder has no parameter {sorted(unknown)}")
    return p


def builder(*params: str):
    """Marks a builder with the parameters it takes (`fn.params`), and checks each call against them."""

    def wrap(fn):
        def build(p: dict) -> dict:
            _take(p, set(params))
            return fn(p)

        build.params = frozenset(params)  # type: ignore[attr-defined]
        build.__doc__, build.__name__ = fn.__doc__, fn.__name__
        return build

    return wrap


@builder("bs", "L", "K_in", "budget", "prefix_lens", "with_full_mask", "seed")
def build_tree_build(p: dict) -> dict:
    """tree_build: strictly decreasing log-prob rows (no ties), distinct even ids >= 10, roots 500 + b."""
    bs, B = p.get("bs", 2), p.get("budget", 6)
    # the brute-force oracle enumerates sum_d min(B, K_in)^d candidates: keep that small at every edge
    if "L" in p and "K_in" not in p:
        L, K = p["L"], 1 if p["L"] > 8 else 2
    elif "K_in" in p and "L" not in p:
        L, K = 1, p["K_in"]
    else:
        L, K = p.get("L", 2 if B > 84 else 3), p.get("K_in", 32 if B > 84 else 4)
    rng = np.random.default_rng(p.get("seed", 0))
    steps = rng.uniform(0.05, 1.0, (bs, L, K)).astype(np.float32)
    lp = (-(0.25 + np.cumsum(steps, axis=-1, dtype=np.float64))).astype(np.float32)
    ids = (10 + 2 * np.argsort(rng.random((bs, L, K)), axis=-1)).astype(np.int32)
    args = {
        "top_logp": lp,
        "top_ids": ids,
        "root_tokens": (500 + np.arange(bs)).astype(np.int32),
        "budget": B,
        "prefix_lens": np.asarray(p.get("prefix_lens", [5] * bs), np.int32),
    }
    if "with_full_mask" in p:
        args["with_full_mask"] = p["with_full_mask"]
    return args


def tree_parents(n: int, shape: str, cap: int | None = None) -> np.ndarray:
    """Parents of an n-node tree: "heap" (i -> (i-1)//2), "chain", "star", or "capped" (a chain down to depth
    `cap`, the other nodes children of the root; with cap 0 they are pads, parent -1)."""
    i = np.arange(n)
    if shape == "heap":
        par = (i - 1) // 2
    elif shape == "chain":
        par = i - 1
    elif shape == "star":
        par = np.zeros(n, np.int64)
    else:
        par = np.where(i <= cap, i - 1, 0 if cap else -1)
    par[0] = -1
    return par.astype(np.int32)


def paged_layout(prefix, rows: int, page_size: int, num_pages=None, max_pages=None, spare: int = 2):
    """A block table for requests with `prefix` committed rows and `rows` tree rows each: the pages holding
    tree rows are distinct across all requests (the commit's rows never alias), the pages holding prefix rows
    only share one page (allowed), and `spare` pages at the end are used by nobody. With fewer `num_pages`
    every page index is taken modulo num_pages. Entries past a request's need hold FlashMLA's dead index.
    Returns (block_table, num_pages, need per request)."""
    need = [(int(pr) + rows + page_size - 1) // page_size for pr in prefix]
    first_tree = [int(pr) // page_size for pr in prefix]
    tree_pages = sum(n - f for n, f in zip(need, first_tree, strict=True))
    n_pages = num_pages if num_pages is not None else 1 + tree_pages + spare
    width = max_pages if max_pages is not None else max(need) + 2
    bt = np.full((len(prefix), width), 2_147_480_000, np.int64)
    nxt = 1  # page 0 holds every prefix-only page
    for b, (n, f) in enumerate(zip(need, first_tree, strict=True)):
        for j in range(min(n, width)):
            if j < f:
                bt[b, j] = 0
            else:
                bt[b, j] = nxt
                nxt += 1
    used = bt[:, :] < 2_147_480_000
    bt[used] %= max(n_pages, 1)
    return bt.astype(np.int32), n_pages, need


def _cache(rng, num_pages: int, page_size: int, dtype) -> np.ndarray:
    if num_pages * page_size * 576 * 4 > 1 << 30:
        raise TooLarge(f"a cache of {num_pages} pages of {page_size} rows is over 1 GiB")
    return (rng.standard_normal((num_pages, page_size, 576)) * 0.5).astype(np.float32).astype(dtype)


@builder("bs", "Q", "H", "page_size", "num_pages", "max_pages", "prefix_lens", "dtype", "tree", "softmax_scale")
def build_tree_verify(p: dict) -> dict:
    """tree_verify: one tree shape for every request, a paged cache whose rows no request reads are
    NaN-poisoned (they must not matter), q from a seeded normal."""
    bs, Q, H = p.get("bs", 1), p.get("Q", 3), p.get("H", 2)
    prefix = list(p.get("prefix_lens", [5] * bs))
    ps = p.get("page_size", 1024 if max(prefix) > 1 << 16 else 4)  # long prefixes: few block-table entries
    if p.get("max_pages") == 1 or p.get("num_pages") == 1:  # one page holds everything a request reads
        prefix, ps = [0] * bs, p.get("page_size", max(ps, Q))
    dtype = np.dtype(p.get("dtype", np.float32))
    rng = np.random.default_rng(3)
    bt, n_pages, _ = paged_layout(prefix, Q, ps, p.get("num_pages"), p.get("max_pages"))
    kv = _cache(rng, n_pages, ps, dtype)
    used = np.zeros((n_pages, ps), bool)
    for b in range(bs):
        pos = np.arange(prefix[b] + Q)
        used[bt[b, pos // ps], pos % ps] = True
    hh.poison(kv, ~used)
    par = np.tile(tree_parents(Q, p.get("tree", "heap")), (bs, 1))
    from reference.tree_build import layouts  # the reference's layout of a parent array

    depths = np.stack([hh.depths_of(r) for r in par])
    vis = layouts(par, depths, np.full(bs, Q, np.int32), np.asarray(prefix, np.int32))[0]
    scale = p.get("softmax_scale", 0.130861)
    q = rng.standard_normal((bs, Q, H, 576)).astype(np.float32)
    if float(scale) > 1e30:  # 0 · scale stays 0: the largest scale, without logits that overflow float32
        q[:] = 0
    return {
        "q": q.astype(dtype),
        "kv_cache": kv,
        "block_table": bt,
        "prefix_lens": np.asarray(prefix, np.int32),
        "visibility": vis,
        "softmax_scale": scale,
    }


@builder("bs", "D", "max_depth", "commit", "page_size", "num_pages", "max_pages", "prefix_lens", "dtype", "tree")
def build_tree_accept(p: dict) -> dict:
    """tree_accept: each request a chain down to depth max_depth (default 3) with the other nodes on the root
    (or a "chain" or "star" tree), the targets walking the chain (request 1 leaves it at once), and the
    commit on a paged cache whose tree pages are distinct (commit=False: no commit arguments)."""
    bs = p.get("bs", 2)
    cap = p.get("max_depth", 3)
    D = p.get("D", max(5, cap + 1))
    par = tree_parents(D, p.get("tree", "capped"), min(cap, D - 1))
    real = 1 + int((par[1:] >= 0).sum())  # the nodes in the tree; the rest are pads (capped at depth 0)
    depth = int(hh.depths_of(par[:real]).max())
    max_depth = p.get("max_depth", max(3, depth))
    tokens = np.tile((100 + np.arange(D)).astype(np.int32), (bs, 1))
    target = np.full((bs, D), 3, np.int32)
    for u in range(depth):
        target[:, u] = tokens[0, u + 1]
    if bs > 1 and depth < D - 1:
        target[1, 0] = tokens[1, depth + 1]  # a root's child off the chain
    fc, ns = hh.links_of(par[:real], D)
    args = {
        "tokens": tokens,
        "first_child": np.tile(fc, (bs, 1)),
        "next_sibling": np.tile(ns, (bs, 1)),
        "target_tokens": target,
        "max_depth": max_depth,
    }
    if not p.get("commit", True):
        return args
    prefix = list(p.get("prefix_lens", [1] * bs))
    ps = p.get("page_size", 4)
    if p.get("max_pages") == 1 or p.get("num_pages") == 1:  # one page holds a request's rows
        bs_args = {k: v[:1] for k, v in args.items() if isinstance(v, np.ndarray)}
        args.update(bs_args)
        prefix, ps = [0], p.get("page_size", max(ps, D))
    bt, n_pages, _ = paged_layout(prefix, D, ps, p.get("num_pages"), p.get("max_pages"))
    rng = np.random.default_rng(11)
    args["kv_cache"] = _cache(rng, n_pages, ps, np.dtype(p.get("dtype", np.float32)))
    args["block_table"] = bt
    args["prefix_lens"] = np.asarray(prefix, np.int32)
    return args


@builder("bs", "L", "V", "K", "dtype")
def build_draft_topk(p: dict) -> dict:
    """draft_topk: seeded normal logits in the dtype (rounded to it, so bf16 rows carry ties), a -inf in
    every row with V > 2 (masked tokens are ordinary input); V defaults to max(12, K), K to min(4, V)."""
    bs, L = p.get("bs", 2), p.get("L", 3)
    V = p.get("V", max(12, p.get("K", 0)))
    K = p.get("K", min(4, V))
    dtype = np.dtype(p.get("dtype", np.float32))
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((bs, L, V)) * 3).astype(np.float32)
    if V > 2:
        x[:, :, 1] = -np.inf
    return {"logits": x.astype(dtype), "K": K}


BUILDERS: dict[str, Callable[[dict], dict]] = {
    "tree_build": build_tree_build,
    "tree_verify": build_tree_verify,
    "tree_accept": build_tree_accept,
    "draft_topk": build_draft_topk,
}
# the dims of a shape-only case (arrays of zeros that fail a structural check before any value is read)
DEFAULT_DIMS = {
    "bs": 2,
    "L": 3,
    "K_in": 4,
    "Q": 3,
    "H": 2,
    "D": 5,
    "num_pages": 4,
    "page_size": 4,
    "max_pages": 3,
    "V": 8,
}


def _zeros(shape, dtype) -> np.ndarray:
    """A plain ndarray of zeros of any shape without its memory (a broadcast view: read-only, values 0)."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def shaped(c: OpContract, dims: dict) -> dict:
    """A shape-only case: every argument given (groups complete), arrays of zeros shaped by `dims` (defaults
    for the rest), ints, reals and flags at an ordinary value."""
    d = {**DEFAULT_DIMS, **dims}
    for sym, fn in c.derived.items():
        d.setdefault(sym, fn(d))
    out = {}
    for a in c.args:
        if a.kind == "array":
            shape = [d[s] if isinstance(s, str) else s for s in a.shape]
            out[a.name] = _zeros(shape, contract.BF16 if a.dtypes[0] == "bfloat16" else a.dtypes[0])
        elif a.kind == "int":
            out[a.name] = min(max(3, a.lo), a.hi)
        elif a.kind == "real":
            out[a.name] = 0.125
        elif a.default is REQUIRED:
            out[a.name] = False
    return out


def reserved_zeros(shape, dtype) -> np.ndarray:
    """A writeable C-contiguous plain ndarray of zeros of any size, backed by address space the kernel only
    pages in when touched (mmap MAP_NORESERVE): for caches larger than the machine that a check must refuse
    by their shape. TooLarge where the system refuses the mapping."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    try:
        m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)  # 0x4000: MAP_NORESERVE
    except OSError as e:
        raise TooLarge(f"cannot reserve {n / 2**40:.1f} TiB of address space for a shape-only array: {e}") from e
    return np.frombuffer(m, dtype).reshape(shape)

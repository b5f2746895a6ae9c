"""Hypothesis strategies shared by the suites (the array-api-tests `hh` module)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from . import claims
from .cases import Case

# ------------------------------------------------------------------------------------------- KDTR
KDTR_DTYPES = [
    np.dtype(d)
    for d in (
        np.bool_,
        np.uint8,
        np.int8,
        "<u2",
        "<i2",
        "<u4",
        "<i4",
        "<u8",
        "<i8",
        "<f2",
        ml_dtypes.bfloat16,
        "<f4",
        "<f8",
        "<c8",
        "<c16",
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e5m2,
    )
]
NAME_CHARS = "".join(chr(c) for c in range(0x21, 0x7F))


def kdtr_names(max_size: int = 12):
    return st.text(NAME_CHARS, min_size=1, max_size=max_size)


@st.composite
def kdtr_array(draw):
    dt = draw(st.sampled_from(KDTR_DTYPES), label="dtype")
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=8, min_side=0, max_side=3), label="shape")
    n = int(np.prod(shape)) if shape else 1
    raw = draw(st.binary(min_size=n * dt.itemsize, max_size=n * dt.itemsize), label="bytes")
    a = np.frombuffer(raw, np.uint8).view(dt) if dt.kind != "b" else np.frombuffer(raw, np.uint8).astype(bool)
    return a.reshape(shape)


def kdtr_contents():
    tensors = st.dictionaries(kdtr_names(), kdtr_array(), max_size=6)
    values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
    metadata = st.dictionaries(kdtr_names().filter(lambda k: not k.startswith("kdtr.")), values, max_size=4)
    return st.tuples(tensors, metadata, st.sampled_from([6, 7, 12]))


# ------------------------------------------------------------------------------------------- tree_build
def logp_rows(rng: np.random.Generator, shape, style: str, inf_frac: float) -> np.ndarray:
    """Sorted (non-increasing) log-prob rows. 'bf16' and 'coarse' make ties common; 'ranks' (rank r costs r/2 at
    every depth, rank 0 certain) ties every rank tuple of one rank sum, at every depth down to L."""
    raw = -rng.exponential(2.0, shape)
    if style == "ranks":
        raw = np.broadcast_to(-0.5 * np.arange(shape[-1]), shape).copy()
    if style == "bf16":
        raw = raw.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    elif style == "coarse":
        raw = np.round(raw * 2) / 2
    elif style == "wide":  # log-probs spanning > 53 bits of magnitude, where float64 rounding shows
        raw = -np.exp(rng.uniform(-25, 5, shape))
    lp = -np.sort(-raw.astype(np.float32), axis=-1)
    if shape[-1] and rng.random() < 0.25:  # a certain token: log-prob exactly 0.0 or -0.0 at rank 0
        lp[..., 0] = np.where(rng.random(shape[:-1]) < 0.5, np.float32(-0.0), np.float32(0.0))
    if inf_frac and shape[-1]:
        cut = rng.integers(0, shape[-1] + 1, shape[:-1])
        cut = np.where(rng.random(shape[:-1]) < inf_frac, cut, shape[-1])
        lp = np.where(np.arange(shape[-1]) >= cut[..., None], -np.inf, lp).astype(np.float32)
    return np.where(lp > 0, np.float32(0), lp).astype(np.float32)  # keeps -0.0 (np.minimum may not)


@st.composite
def topk_inputs(draw, max_bs=4, max_L=4, max_K=4, max_B=24, max_candidates=None, max_prefix=70):
    """tree_build cases. With `max_candidates` (a brute-force oracle's bound), the depth is cut until the tree's
    candidates at its effective top-k K = min(B, K_in) fit: deep trees come with small K or small budgets."""
    if claims.declared("tree_build") is None:
        bs = draw(st.integers(1, max_bs), label="bs")
        B = draw(st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, max_B)), label="B")
    else:  # inside the declaration of the implementation under test (batch size and budget)
        bs = draw(st.sampled_from(claims.fit("tree_build", "bs", range(1, max_bs + 1))), label="bs")
        B = draw(st.sampled_from(claims.fit("tree_build", "budget", range(0, max_B + 1))), label="B")
    L = draw(st.integers(0, max_L), label="L")
    K_in = draw(st.integers(0 if L == 0 else 1, max_K), label="K_in")
    if max_candidates is not None:
        K = max(1, min(B, K_in))
        while L > 1 and sum(K**d for d in range(1, L + 1)) > max_candidates:
            L -= 1
    style = draw(st.sampled_from(["bf16", "coarse", "continuous", "wide", "ranks"]), label="style")
    inf_frac = draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]), label="inf_frac")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    lp = logp_rows(rng, (bs, L, K_in), style, inf_frac)
    vocab = max(K_in, draw(st.sampled_from([K_in, 50, 150_000]), label="vocab"))
    ids = (
        np.stack(
            [
                np.stack([rng.choice(vocab, K_in, replace=False) for _ in range(L)])
                if L
                else np.zeros((0, K_in), np.int64)
                for _ in range(bs)
            ]
        )
        .astype(np.int32)
        .reshape(bs, L, K_in)
    )
    roots = rng.integers(0, vocab + 1, bs).astype(np.int32)
    prefix = rng.choice([0, 1, 5, 63, 64, 65, max_prefix], bs).astype(np.int32)
    if claims.declared("tree_build") is None:
        full = draw(st.booleans(), label="with_full_mask")
    else:  # inside the declaration (the operators make no FULL_MASK: kdtree_torch)
        full = draw(st.sampled_from(claims.fit("tree_build", "with_full_mask", [False, True])), label="with_full_mask")
    return topk_case(lp, ids, roots, B, prefix, with_full_mask=full)


def topk_case(top_logp, top_ids, root_tokens, budget, prefix_lens=None, **kw) -> Case:
    """A tree_build case from its arguments (the contract's names)."""
    args = {"top_logp": top_logp, "top_ids": top_ids, "root_tokens": root_tokens, "budget": budget}
    if prefix_lens is not None:
        args["prefix_lens"] = prefix_lens
    return Case("tree_build", {**args, **kw})


def distinct_ids(rng: np.random.Generator, shape) -> np.ndarray:
    """Distinct token ids per row (a permutation of a random range)."""
    return np.argsort(rng.random(shape), axis=-1).astype(np.int32) + np.int32(rng.integers(0, 1000))


def unstable_chain_rows(rng: np.random.Generator, shape) -> np.ndarray:
    """Log-prob rows [..., K] whose sibling chains the select kernels' shortcut s_r = t_0 + lp[r] gets wrong: rank 0
    a tiny log-prob with a full mantissa, ranks 1.. near -1000 in steps of 20-30, crossing binades (1024, 2048)."""
    steps = rng.uniform(20.0, 30.0, shape)
    steps[..., 0] = 0.0
    wide = -(1000.0 + np.cumsum(steps, axis=-1) - steps[..., :1])
    wide[..., 0] = -rng.uniform(1e-9, 2e-9, shape[:-1])
    return wide.astype(np.float32)


def select_fallback_cases() -> dict[str, Case]:
    """tree_build inputs on which the select-then-verify kernel (kernels_cu/tree_build.cu) must replay:
    'unstable_chains': rank 0 of each row a tiny log-prob with a full mantissa, ranks 1.. near -1000 and
    crossing binades (1024, 2048), so the shortcut s_r = t_0 + lp[r] of a sibling chain misses the
    recursion (t_0's low bits are rounded away at rank 1, and ties round to even at the binade crossings);
    'all_ties': every log-prob 0.0, so every score ties and rank tuples alone pick the B nodes out of a tie
    group larger than the kernel's candidate capacity (it overflows)."""
    rng = np.random.default_rng(20261203)
    shape = (6, 4, 64)
    wide = unstable_chain_rows(rng, shape)
    ties = np.zeros(shape, np.float32)
    roots = np.arange(shape[0], dtype=np.int32)
    return {
        "unstable_chains": topk_case(wide, distinct_ids(rng, shape), roots, 64),
        "all_ties": topk_case(ties, distinct_ids(rng, shape), roots, 64),
    }


# ------------------------------------------------------------------------------------------- draft_topk
LOGIT_DTYPES = (ml_dtypes.bfloat16, np.float16, np.float32)
# How a row's logits are drawn: each style hunts one boundary of spec/draft_topk.md (ties in the dtype, ±0.0,
# -inf tails shorter and longer than K, rows of -inf only, values at the dtype's largest, one finite logit).
LOGIT_STYLES = ("normal", "ties", "signed_zeros", "inf_tail", "all_inf", "huge", "one_finite", "subnormal")


def dtype_max(dtype) -> float:
    """The dtype's largest finite value (bf16's from ml_dtypes)."""
    return float(_finfo(dtype).max)


def _finfo(dtype):
    dt = np.dtype(dtype)
    return ml_dtypes.finfo(dt) if dt.name == "bfloat16" else np.finfo(dt)


def subnormal_pool(dtype) -> np.ndarray:
    """Values of `dtype` around its subnormal range (float64, exact in the dtype): the smallest subnormals and a
    few multiples of them (both signs), the largest subnormal, the smallest normal, ±0 and two ordinary values."""
    fi = _finfo(dtype)
    tiny, normal = float(fi.smallest_subnormal), float(fi.smallest_normal)
    return np.array([tiny, -tiny, 2 * tiny, 3 * tiny, -5 * tiny, 100 * tiny, normal - tiny, normal, -normal, 0.0, -0.0,
                     1.0, -1.0])  # fmt: skip


def logit_rows(rng: np.random.Generator, shape, dtype, style: str) -> np.ndarray:
    """Logits [bs, L, V] in `dtype` drawn by `style` (LOGIT_STYLES), every row on its own."""
    V = shape[-1]
    big = dtype_max(dtype)
    x = rng.standard_normal(shape) * 4
    if style == "ties":  # a few values only: long runs of equal logits, in every dtype
        x = rng.integers(-2, 3, shape) * 0.5
    elif style == "signed_zeros":
        x = np.where(rng.random(shape) < 0.5, -0.0, 0.0) - (rng.random(shape) < 0.2)
    elif style == "inf_tail":  # per row: finite logits at a random count 0..V of random places
        keep = rng.integers(0, V + 1, shape[:-1])
        ranks = np.argsort(rng.random(shape), axis=-1)
        x = np.where(ranks < keep[..., None], x, -np.inf)
    elif style == "all_inf":  # rows of -inf only beside ordinary ones
        x = np.where(rng.random(shape[:-1] + (1,)) < 0.5, -np.inf, x)
    elif style == "huge":  # the dtype's largest values and their halves, both signs, beside small ones
        x = rng.choice([big, -big, big / 2, -big / 2, 1.0, 0.0, -np.inf], shape)
    elif style == "subnormal":  # the dtype's subnormals beside ±0, its smallest normals and ordinary values
        x = rng.choice(subnormal_pool(dtype), shape)
    elif style == "one_finite":  # one finite logit per row, anywhere in the dtype's range, -inf elsewhere
        x = np.full(shape, -np.inf)
        where = rng.integers(0, V, shape[:-1])
        np.put_along_axis(x, where[..., None], rng.uniform(-big, big, shape[:-1] + (1,)), axis=-1)
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float32).astype(dtype)


@st.composite
def logits_cases(draw, max_bs=3, max_L=3, max_V=300):
    """draft_topk cases: a dtype, a style (LOGIT_STYLES), V from 1 (with K = V and K = 1 common), a seed; under a
    declaration, only the dtypes, bs, L, V and K it takes (harness/claims.py)."""
    style = draw(st.sampled_from(LOGIT_STYLES), label="style")
    if claims.declared("draft_topk") is None:
        dtype = draw(st.sampled_from(LOGIT_DTYPES), label="dtype")
        bs = draw(st.integers(1, max_bs), label="bs")
        L = draw(st.integers(0, max_L), label="L")
        V = draw(st.one_of(st.sampled_from([1, 2, 3, 8, 33]), st.integers(1, max_V)), label="V")
        K = draw(st.one_of(st.sampled_from([1, V]), st.integers(1, min(V, 64))), label="K")
    else:  # inside the declaration of the implementation under test
        caps = claims.declared("draft_topk")
        taken = [d for d in LOGIT_DTYPES if caps.dtypes is None or claims.dtype_name(d) in caps.dtypes]
        dtype = draw(st.sampled_from(taken), label="dtype")  # a declaration names at least one (adapters.protocol)
        bs = draw(st.sampled_from(claims.fit("draft_topk", "bs", range(1, max_bs + 1))), label="bs")
        L = draw(st.sampled_from(claims.fit("draft_topk", "L", range(0, max_L + 1))), label="L")
        Ks = claims.fit("draft_topk", "K", range(1, 65), "K in 1..64")
        Vs = claims.fit("draft_topk", "V", range(min(Ks), max_V + 1), f"V in {min(Ks)}..{max_V}")
        V = draw(st.sampled_from(Vs), label="V")
        K = draw(st.sampled_from(claims.fit("draft_topk", "K", [k for k in Ks if k <= V] or [V])), label="K")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    return topk_logits_case(logit_rows(rng, (bs, L, V), dtype, style), K)


def topk_logits_case(logits, K) -> Case:
    """A draft_topk case from its arguments (the contract's names)."""
    return Case("draft_topk", {"logits": logits, "K": K})


# ------------------------------------------------------------------------------------------- trees
@st.composite
def parent_arrays(draw, min_nodes=1, max_nodes=40):
    """Parent arrays with parent[i] < i (parent[0] = -1) in varied shapes; small ones shrink well."""
    n = draw(st.integers(min_nodes, max_nodes), label="n_nodes")
    shape = draw(st.sampled_from(["random", "path", "star", "binary", "seeded"]), label="shape")
    if shape == "path":
        par = np.arange(-1, n - 1)
    elif shape == "star":
        par = np.zeros(n, np.int64)
    elif shape == "binary":
        par = (np.arange(n) - 1) // 2
    elif shape == "seeded":
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        par = (rng.random(n) * np.arange(n)).astype(np.int64)
    else:
        par = np.array([0] + [draw(st.integers(0, i - 1)) for i in range(1, n)], np.int64)
    par[0] = -1
    return par.astype(np.int32)


def depths_of(par: np.ndarray) -> np.ndarray:
    d = np.zeros(len(par), np.int32)
    for i in range(1, len(par)):
        d[i] = d[par[i]] + 1
    return d


def links_of(par: np.ndarray, D: int) -> tuple[np.ndarray, np.ndarray]:
    """first_child / next_sibling for parents of the first len(par) slots of a D-slot tree."""
    fc, ns, last = np.full(D, -1, np.int32), np.full(D, -1, np.int32), {}
    for i in range(1, len(par)):
        p = int(par[i])
        if p in last:
            ns[last[p]] = i
        else:
            fc[p] = i
        last[p] = i
    return fc, ns


def accept_case(parents, n_nodes, tokens, first_child, next_sibling, target, max_depth, **commit) -> Case:
    """A tree_accept case; the parents and node counts behind the links travel as info for oracles."""
    args = {
        "tokens": tokens,
        "first_child": first_child,
        "next_sibling": next_sibling,
        "target_tokens": target,
        "max_depth": max_depth,
        **commit,
    }
    return Case("tree_accept", args, {"parents": parents, "n_nodes": n_nodes})


@st.composite
def accept_cases(draw, max_bs=4, max_nodes=33, vocab=None):
    """Trees padded to one width D, tokens from a small vocabulary (duplicate siblings happen), and target
    tokens with planted matches so walks go deep."""
    if claims.declared("tree_accept") is None:
        bs = draw(st.integers(1, max_bs), label="bs")
    else:  # inside the declaration of the implementation under test
        bs = draw(st.sampled_from(claims.fit("tree_accept", "bs", range(1, max_bs + 1))), label="bs")
    pars = [draw(parent_arrays(1, max_nodes)) for _ in range(bs)]
    D = max(len(p) for p in pars) + draw(st.integers(0, 3), label="pad")
    V = vocab or draw(st.sampled_from([3, 8, 1000]), label="vocab")
    plant = draw(st.sampled_from([0.0, 0.5, 0.9, 1.0]), label="plant")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    parents = np.full((bs, D), -1, np.int32)
    tokens = rng.integers(0, V, (bs, D)).astype(np.int32)
    fc = np.full((bs, D), -1, np.int32)
    ns = np.full((bs, D), -1, np.int32)
    target = rng.integers(0, V, (bs, D)).astype(np.int32)
    n_nodes = np.array([len(p) for p in pars], np.int32)
    L = 0
    for b, par in enumerate(pars):
        parents[b, : len(par)] = par
        fc[b], ns[b] = links_of(par, D)
        L = max(L, int(depths_of(par).max()))
        for u in range(len(par)):
            kids = np.flatnonzero(par == u)
            if len(kids) and rng.random() < plant:
                target[b, u] = tokens[b, rng.choice(kids)]
    L = L + draw(st.integers(0, 2), label="extra_depth")
    return accept_case(parents, n_nodes, tokens, fc, ns, target, min(L, 32))


# ------------------------------------------------------------------------------------------- paged caches
def verify_case(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, parents=None, n_nodes=None) -> Case:
    """A tree_verify case; the parents behind the mask travel as info for the branch-decomposition oracle."""
    args = {
        "q": q,
        "kv_cache": kv_cache,
        "block_table": block_table,
        "prefix_lens": prefix_lens,
        "visibility": visibility,
        "softmax_scale": softmax_scale,
    }
    info = {} if parents is None else {"parents": parents, "n_nodes": n_nodes}
    return Case("tree_verify", args, info)


def poison(a: np.ndarray, mask) -> None:
    """Fill rows with a NaN whose payload is recognisable (0x7fc0dead in fp32; bf16 quiet NaN)."""
    nan = np.array([0x7FC0DEAD], np.uint32).view(np.float32)[0] if a.dtype == np.float32 else np.nan
    a[mask] = nan


def build_paged_cache(rng, dtype, prefix_lens, Q, page_size, H, *, spare_pages=2, q_scale=1.0):
    """A random block table over a shuffled page pool; unreferenced pages and rows past each request's
    length are NaN-poisoned. Returns (q, kv_cache, block_table)."""
    bs = len(prefix_lens)
    pages = [(int(p) + Q + page_size - 1) // page_size for p in prefix_lens]
    max_pages = max(pages) + 1
    total = sum(pages) + spare_pages
    perm = rng.permutation(total)
    kv = (rng.standard_normal((total, page_size, 576)) * 0.5).astype(np.float32)
    bt = np.full((bs, max_pages), 2_147_480_000, np.int32)  # dead entries hold a huge index, as FlashMLA's tests do
    used = np.zeros((total, page_size), bool)
    k = 0
    for b in range(bs):
        bt[b, : pages[b]] = perm[k : k + pages[b]]
        k += pages[b]
        n = int(prefix_lens[b]) + Q
        for p in range(n):
            used[bt[b, p // page_size], p % page_size] = True
    kv = kv.astype(dtype)
    poison(kv, ~used)
    q = (rng.standard_normal((bs, Q, H, 576)) * q_scale).astype(np.float32).astype(dtype)
    return q, kv, bt


@st.composite
def paged_cases(
    draw,
    dtype=np.float32,
    heads=(1, 8, 16, 64, 128),
    max_bs=3,
    max_nodes=12,
    prefixes=(0, 1, 63, 64, 65, 300),
    page_sizes=(1, 16, 64),
):
    if claims.declared("tree_verify") is None:  # the built-ins (and any implementation declaring nothing)
        bs = draw(st.integers(1, max_bs), label="bs")
        H = draw(st.sampled_from(heads), label="H")
        page_size = draw(st.sampled_from(page_sizes), label="page_size")
        pars = [draw(parent_arrays(1, max_nodes)) for _ in range(bs)]
    else:  # inside the declaration of the implementation under test (harness/claims.py)
        claims.need_dtype("tree_verify", dtype)
        bs = draw(st.sampled_from(claims.fit("tree_verify", "bs", range(1, max_bs + 1))), label="bs")
        H = draw(st.sampled_from(claims.fit("tree_verify", "H", heads)), label="H")
        page_size = draw(st.sampled_from(_page_sizes(page_sizes)), label="page_size")
        sizes = claims.fit("tree_verify", "Q", range(1, max_nodes + 1), f"trees of 1..{max_nodes} nodes")
        if claims.chains_only():  # one chain length for the whole batch (a causal kernel's s_q)
            n = draw(st.sampled_from(sizes), label="n_nodes")
            pars = [np.arange(-1, n - 1, dtype=np.int32)] * bs
        else:
            pars = [draw(parent_arrays(min(sizes), max(sizes))) for _ in range(bs)]
    prefix = [draw(st.sampled_from(prefixes), label="prefix") for _ in range(bs)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    q_scale = draw(st.sampled_from([1.0, 1.0, 8.0]), label="q_scale")
    scale = draw(st.sampled_from([0.130861, 192**-0.5, 576**-0.5, 0.144680]), label="softmax_scale")
    return paged_case(rng, dtype, pars, prefix, page_size, H, q_scale=q_scale, scale=scale)


def _page_sizes(wanted) -> list[int]:
    """The page sizes the implementation under test takes among `wanted`, else the ones it declares."""
    caps = claims.declared("tree_verify")
    allowed = caps.dims.get("page_size") if caps is not None else None
    if allowed is None:
        return list(wanted)
    kept = [p for p in wanted if p in allowed]
    return kept or [_declared_page_size(allowed)]


def _declared_page_size(allowed) -> int:
    return next(p for p in (64, 16, 32, 128, 8, 1, *range(2, 1025)) if p in allowed)


def fit_to_declaration(pars, page_size, *, strict_pages=False):
    """Trees and page size for the implementation under test: chains of the batch's widest tree where it
    takes chains only; a page size it takes where the one asked for is not (unless `strict_pages`: the test
    is about that page size, and the case is then not claimed)."""
    if claims.chains_only():
        Q = max(len(p) for p in pars)
        pars = [np.arange(-1, Q - 1, dtype=np.int32)] * len(pars)
    caps = claims.declared("tree_verify")
    allowed = caps.dims.get("page_size") if caps is not None else None
    if allowed is not None and page_size not in allowed and not strict_pages:
        page_size = _declared_page_size(allowed)
    return pars, page_size


def shaped_parents(rng, n, shape="random") -> np.ndarray:
    """A parent array of n nodes: 'random' (parents anywhere earlier), 'bushy' (parents among the first four
    nodes), 'chain'."""
    if shape == "chain":
        return np.arange(-1, n - 1, dtype=np.int32)
    if shape == "bushy":
        par = rng.integers(0, np.maximum(1, np.minimum(np.arange(n), 4)))
    else:
        par = (rng.random(n) * np.arange(n)).astype(np.int64)
    par[0] = -1
    return par.astype(np.int32)


def paged_case(rng, dtype, pars, prefix, page_size, H, *, q_scale=1.0, scale=0.130861, strict_pages=False) -> Case:
    """One tree_verify case: request b's tree is the parent array pars[b] (padded to the longest with pad
    slots), prefix[b] prefix keys, a shuffled paged cache (build_paged_cache). Under a declaration that
    takes chains only or other page sizes, the trees and page size are fitted first (fit_to_declaration)."""
    from reference.tree_build import layouts

    pars, page_size = fit_to_declaration(pars, page_size, strict_pages=strict_pages)
    bs = len(pars)
    Q = max(len(p) for p in pars)
    prefix = np.asarray(prefix, np.int32)
    parents = np.full((bs, Q), -1, np.int32)
    depths = np.zeros((bs, Q), np.int32)
    n_nodes = np.array([len(p) for p in pars], np.int32)
    for b, p in enumerate(pars):
        parents[b, : len(p)] = p
        depths[b, : len(p)] = depths_of(p)
    vis = layouts(parents, depths, n_nodes, prefix)[0]
    q, kv, bt = build_paged_cache(rng, dtype, prefix, Q, page_size, H, q_scale=q_scale)
    return verify_case(q, kv, bt, prefix, vis, scale, parents, n_nodes)

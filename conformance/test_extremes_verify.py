"""tree_verify at the edges of what each variant takes, against the float64 oracle (spec/tree_verify.md):

- every page-size class, from one place (kernels_cu/tree_verify_ops.page_size_classes: the sizes sm90a serves
  itself, 8, 16, 32 and multiples of 64 up to the contract's largest, and sizes it hands to portable, which
  takes any size: 1, odd ones, the largest it does not take), for every implementation;
- more than 32 KV splits (the combine kernel's warp loops over splits more than once per lane), by the default
  rule at long prefixes and forced (33 to 2703 splits), with q × 100 so that logits reach ≈ 600 after the
  scale and every exp in the combine would overflow without its max subtraction;
- a KV pool past 2^31 bytes (8 GiB and a little: past 2^31 and 2^32 bytes, and 2^31 elements of either dtype,
  2^32 of bf16), with the requests' pages around those offsets and at the pool's end, so that any 32-bit
  offset arithmetic reads another page (another request's keys, a NaN page, or a fault: it cannot pass);
- the largest Q·H of one request (Q = 1025, H = 128: 131,200 rows, 2050 row tiles), sampled rows against the
  oracle.

The last two take GBs and minutes on a CPU, so they run on GPU implementations only (each says why it skips
elsewhere); their oracle sees only what it needs: the pages the requests read (28 of the pool's 58,710 or
117,419 pages, copied into a small pool: the same requests, the same keys) or 48 sampled queries (every head).
Host memory: the pool is zero pages the host never writes but for about 50 (a few MB), its device copy
8.06 GiB; the Q·H case 0.3 GB (fp32 q). GPU time: seconds per test, most of it copying the pool to the device.
The other cases are small enough for the reference and engine-cpu; the largest context (262,144 keys) is
marked slow.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from contract import limits
from contract.paged import cache_rows
from contract.trees import unpack_visibility
from harness import spec as clauses
from harness import strategies as hh
from harness import tools, tree_results
from harness.cases import function, run
from harness.compare import assert_bit_exact, assert_close, assert_cosine
from harness.verdict import clause, expect
from reference import oracles
from reference import tree_verify as ref
from reference.tree_build import layouts

BF16 = ml_dtypes.bfloat16
DTYPES = [pytest.param(np.float32, id="fp32"), pytest.param(BF16, id="bf16")]
SCALE = 0.130861  # Kimi-K2's


def tol(clause_id):
    return clauses.clause(clause_id).tolerance()


def out_clause(dtype):
    return "TV.2.1" if np.dtype(dtype) == np.float32 else "TV.2.2"


def lse_clause(dtype):
    return "TV.2.3" if np.dtype(dtype) == np.float32 else "TV.2.9"


def shaped(dtype, trees, prefix, page_size, H, *, seed, q_scale=1.0):
    rng = np.random.default_rng(seed)
    pars = [hh.shaped_parents(rng, n, shape) for n, shape in trees]
    # the page size is each test's subject: never fitted to a declaration (an implementation that does not take
    # it reports the case as not claimed)
    return hh.paged_case(rng, dtype, pars, prefix, page_size, H, q_scale=q_scale, scale=SCALE, strict_pages=True)


def check(case, got, o64, l64, *, oc, lc, what=""):
    """out and lse against the float64 oracle with the given clauses, and each request's cosine (TV.2.7)."""
    q = case.q
    tree_results.check_verified_shapes(q, got, oc, lc)
    assert_close(got.out.astype(np.float64), o64, what=f"out{what}", spec_id=oc, **tol(oc))
    assert_close(got.lse.astype(np.float64), l64, what=f"lse{what}", spec_id=lc, **tol(lc))
    for b in range(q.shape[0]):
        assert_cosine(got.out[b].astype(np.float64), o64[b], what=f"out[{b}]{what}", spec_id="TV.2.7")


def gpu_only(impl, why):
    """Skip, saying why, unless `impl` runs on the GPU with arrays handed over in memory (a cuda variant or an
    external device implementation: engine-cuda takes its inputs through KDTR files, GBs here)."""
    function(impl, "tree_verify")  # an implementation without the op skips here, before anything is built
    if not impl.on_gpu or impl.kind == "engine-cuda":
        pytest.skip(f"{impl.name}: {why}; GPU implementations with in-memory arrays only")


# --- every page-size class ------------------------------------------------------------------------------------
def _page_classes() -> dict[int, str]:
    from kernels_cu import geometry, tree_verify_ops

    try:
        return tree_verify_ops.page_size_classes()
    except geometry.GeometryError as e:  # no C++ compiler: the tests say so instead of failing collection
        return {0: str(e)}


PAGE_CLASSES = _page_classes()


@functools.cache
def page_case(page_size, dtype):
    """Three requests over several pages of `page_size`: prefix 0, a tree crossing a page boundary, and a prefix
    of two pages and a part; trees of 40 (two visibility words), 17 and 33 nodes."""
    prefix = [0, max(page_size - 3, 1), 2 * page_size + 61]
    case = shaped(dtype, [(40, "random"), (17, "chain"), (33, "bushy")], prefix, page_size, 4, seed=page_size)
    return case, *ref.tree_verify_float64(**case.args)


@pytest.mark.spec("TV.1.2", "TV.2.1", "TV.2.2", "TV.2.3", "TV.2.7", "TV.2.9")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page_size", [pytest.param(p, id=f"page{p}") for p in PAGE_CLASSES])
def test_every_page_size_class(impl, request, dtype, page_size):
    """Each page-size class sm90a serves itself (several pages per 64-key block, a page in 64-row pieces up to the
    largest page) and each it hands to portable, within tolerance of the oracle, with the default split and with
    200-key splits (which start inside pages and blocks)."""
    function(impl, "tree_verify")  # an implementation without the op skips before the case is built
    if page_size == 0:
        tools.missing(request.config, PAGE_CLASSES[0])
    case, o64, l64 = page_case(page_size, dtype)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 200]):
        with clause("TV.1.2"):  # every page size class is accepted
            got = run(impl, case, split_chunk=chunk)
        what = f" (page_size={page_size}: {PAGE_CLASSES[page_size]}; split_chunk={chunk})"
        check(case, got, o64, l64, oc=out_clause(dtype), lc=lse_clause(dtype), what=what)


# --- more than 32 splits, logits near 600 ------------------------------------------------------------------------
# name -> (prefixes, slow). By the default rule 40,008 keys split 63-74 ways, 19,008 keys 33-36 ways (the rule's
# most splits of >= 512 keys, rounded up to whole key blocks: the fewest past 32 on every variant's tiles), the
# largest context 128 ways.
LONG = {
    "prefix-40000-and-19000": ([40_000, 19_000], False),
    "largest-context": ([limits.MAX_CONTEXT - 8, 7], True),
}
LONG_MARKS = [pytest.mark.slow, pytest.mark.full]  # full: the quick profile runs it on GPU implementations only
LONG_Q, LONG_H = 8, 4  # Q·H = 32 rows: one row tile of every variant but the 99 KB fp32 one (16 rows, two tiles)
FORCED = [None, 480, 97]  # None: the default rule; 480 and 97 keys: 84 / 40 and 413 / 196 splits


@functools.cache
def long_case(name, dtype):
    case = shaped(dtype, [(LONG_Q, "random"), (LONG_Q, "chain")], LONG[name][0], 64, LONG_H, seed=8, q_scale=100.0)
    return case, *ref.tree_verify_float64(**case.args)


def planned_splits(impl, case, chunk) -> list[int] | None:
    """Splits per request as a cuda variant plans them (kernels_cu/tree_verify_ops.split_plan), None for the
    others."""
    if impl.kind != "cuda":
        return None
    from kernels_cu import specs
    from kernels_cu import tree_verify_ops as tvo

    Q, H = case.q.shape[1:3]
    dt = "bf16" if case.q.dtype == BF16 else "fp32"
    spec = tvo.served_by(specs.get("tree_verify", impl.variant), dt, case.kv_cache.shape[1])
    kernel = tvo.SM90A if spec.variant == tvo.SM90A else dt
    chunks = tvo.split_plan(case.prefix_lens, Q, H, kernel, chunk, budget=tvo.budget(spec))[0]
    return [-(-(int(p) + Q) // int(c)) for p, c in zip(case.prefix_lens, chunks)]


@pytest.mark.spec("TV.2.8", "TV.2.2", "TV.2.7")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=LONG_MARKS if s else []) for n, (_, s) in LONG.items()])
def test_more_than_32_splits_with_large_logits(impl, dtype, name):
    """q × 100 over 19,000 to 262,144 keys: logits reach ≈ 600, each split's partial lse differs from the
    others' by up to hundreds, and the combine merges 33 to 2703 of them (every lane of its warp takes several):
    out and lse finite and within TV.2.8 of the float64 oracle (bf16 out: TV.2.2, as in test_tree_verify)."""
    function(impl, "tree_verify")
    case, o64, l64 = long_case(name, dtype)
    oc = "TV.2.8" if np.dtype(dtype) == np.float32 else "TV.2.2"
    for chunk in impl.knob_values("tree_verify", "split_chunk", FORCED):
        splits = planned_splits(impl, case, chunk)
        if splits is not None:  # the case does what it says on every variant's tiles
            assert max(splits) > 32 and (chunk is not None or name == "largest-context" or min(splits) > 32), splits
        got = run(impl, case, split_chunk=chunk)
        what = f" ({name}, split_chunk={chunk}, splits {splits})"
        expect(
            np.isfinite(got.out.astype(np.float32)).all() and np.isfinite(got.lse).all(), "TV.2.8", f"overflow{what}"
        )
        check(case, got, o64, l64, oc=oc, lc="TV.2.8", what=what)


# --- a KV pool past 2^31 bytes -------------------------------------------------------------------------------------
POOL_BYTES = 2**33 + 2**26  # 8.06 GiB: past 2^31 and 2^32 bytes, 2^31 elements of fp32, 2^32 of bf16
POOL_PAGE = 64
OFFSETS = (2**31, 2**32, 2**33)  # bytes: a page around each holds a row across it


def wrapped_pages(page, page_bytes, itemsize, num_pages) -> set[int]:
    """The pages a 32-bit offset (signed or unsigned, of bytes or of elements) of `page`'s rows would reach
    instead: the page holding each wrapped offset and its neighbours."""
    out = set()
    for first in (page * page_bytes, (page + 1) * page_bytes - 1):
        for unit in (1, itemsize):
            for modulus in (2**31, 2**32):
                w = (first // unit) % modulus * unit
                out |= {q for q in range(w // page_bytes - 1, w // page_bytes + 2) if 0 <= q < num_pages}
    return out


def huge_pool_case(dtype, *, seed=11):
    """Four requests (prefixes 700, 323, 0, 515; trees of 20 nodes, H = 16) whose 28 pages are drawn from the
    pages around each offset of OFFSETS and the pool's first and last pages; request 0 reads the three pages that
    hold a row across an offset, and the last page. The pool is zeros the host never touches (np.zeros: the OS's
    zero page until written, so it costs no host memory), but for the rows the requests read, random, and NaN in
    the rows past each request's length and in every page a 32-bit offset of a read row would reach instead."""
    dtype = np.dtype(dtype)
    page_bytes = POOL_PAGE * limits.HEAD_DIM * dtype.itemsize
    num_pages = -(-POOL_BYTES // page_bytes)
    kv = np.zeros((num_pages, POOL_PAGE, limits.HEAD_DIM), dtype)
    rng = np.random.default_rng(seed)
    prefix = np.array([700, 323, 0, 515], np.int32)
    Q, H = 20, 16
    need = [-(-(int(p) + Q) // POOL_PAGE) for p in prefix]
    across = [x // page_bytes for x in OFFSETS]
    must = [*across, num_pages - 1]
    near = {p for x in across for p in range(x - 4, x + 5)} | set(range(4)) | set(range(num_pages - 4, num_pages))
    rest = rng.permutation(sorted(near - set(must)))
    pages = np.concatenate([must, rest[: sum(need) - len(must)]]).astype(np.int64)
    assert need[0] > len(must) and len(pages) == sum(need)
    wrapped = set().union(*(wrapped_pages(int(p), page_bytes, dtype.itemsize, num_pages) for p in pages))
    hh.poison(kv, sorted(wrapped - set(pages.tolist())))
    bt = np.full((len(prefix), max(need) + 1), 2_147_480_000, np.int32)  # entries past a request's need: garbage
    k = 0
    for b, n in enumerate(need):
        bt[b, :n] = pages[k : k + n] if b == 0 else rng.permutation(pages[k : k + n])
        k += n
        hh.poison(kv, bt[b, n - 1])  # the last page's rows past the request (its others are written next)
        rows = np.arange(int(prefix[b]) + Q)
        kv[bt[b, rows // POOL_PAGE], rows % POOL_PAGE] = (
            (rng.standard_normal((len(rows), limits.HEAD_DIM)) * 0.5).astype(np.float32).astype(dtype)
        )
    pars = [hh.shaped_parents(rng, Q, shape) for shape in ("random", "bushy", "chain", "random")]
    parents = np.stack(pars)
    depths = np.stack([hh.depths_of(p) for p in pars])
    vis = layouts(parents, depths, np.full(len(prefix), Q, np.int32), prefix)[0]
    q = rng.standard_normal((len(prefix), Q, H, limits.HEAD_DIM)).astype(np.float32).astype(dtype)
    assert kv.nbytes >= POOL_BYTES and max(int(p) for p in pages) * page_bytes >= OFFSETS[-1]
    return hh.verify_case(q, kv, bt, prefix, vis, SCALE, parents, np.full(len(prefix), Q, np.int32))


def compacted(case):
    """The same requests over a pool of only the pages they read, the block table remapped: the same keys in the
    same order, what the oracle reads."""
    bt, ps, Q = case.block_table, case.kv_cache.shape[1], case.q.shape[1]
    need = [-(-(int(p) + Q) // ps) for p in case.prefix_lens]
    used = sorted({int(x) for b, n in enumerate(need) for x in bt[b, :n]})
    index = {p: i for i, p in enumerate(used)}
    small = np.zeros_like(bt)
    for b, n in enumerate(need):
        small[b, :n] = [index[int(x)] for x in bt[b, :n]]
    return case.with_args(kv_cache=case.kv_cache[used], block_table=small)


@pytest.mark.spec("TV.1.2", "TV.2.1", "TV.2.2", "TV.2.3", "TV.2.7", "TV.2.9", "TV.3.1", "TV.3.2")
@pytest.mark.parametrize("dtype", DTYPES)
def test_kv_pool_past_2_31_bytes(impl, dtype):
    """An 8 GiB pool: the requests' pages sit around byte offsets 2^31, 2^32 and 2^33 (rows across each) and at
    the pool's end. Within tolerance of the oracle (run on the pages they read, copied into a small pool), and
    bit-identical to the same implementation's result on that small pool, with the default split and 100-key
    splits. A 32-bit page or row offset reads a NaN page (or faults) instead."""
    gpu_only(impl, "the pool is 8 GiB (a reference run would read it all on the CPU)")
    case = huge_pool_case(dtype)
    small = compacted(case)
    o64, l64 = ref.tree_verify_float64(**small.args)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 100]):
        with clause("TV.1.2"):  # pages past 2^31 bytes are addressed
            got = run(impl, case, split_chunk=chunk)
        what = f" (8 GiB pool, split_chunk={chunk})"
        check(case, got, o64, l64, oc=out_clause(dtype), lc=lse_clause(dtype), what=what)
        want = run(impl, small, split_chunk=chunk)
        assert_bit_exact(got.out, want.out, what=f"out{what} vs the small pool", spec_id="TV.3.2")
        assert_bit_exact(got.lse, want.lse, what=f"lse{what} vs the small pool", spec_id="TV.3.2")


# --- the largest Q·H --------------------------------------------------------------------------------------------
SAMPLED = 48  # queries of the 1025 checked against the oracle (every head): the first and last of each visibility
# word boundary and random ones


def sampled_rows_oracle(case, b, queries):
    """float64 oracle of request b's `queries` (every head): chain attention over the keys each sees."""
    Q = case.q.shape[1]
    P = int(case.prefix_lens[b])
    bits = unpack_visibility(case.visibility, Q)
    out, lse = [], []
    for i in queries:
        keys = cache_rows(
            case.kv_cache, case.block_table, b, np.concatenate([np.arange(P), P + np.flatnonzero(bits[b, i])])
        )
        o, l = oracles.chain_attention(case.q[b, i], keys, case.softmax_scale)
        out.append(o)
        lse.append(l)
    return np.stack(out), np.stack(lse)


@pytest.mark.spec("TV.2.1", "TV.2.2", "TV.2.3", "TV.2.7", "TV.2.9")
@pytest.mark.parametrize("dtype", DTYPES)
def test_largest_rows_per_request(impl, dtype):
    """Q = 1025 (33 visibility words), H = 128: 131,200 (query, head) rows of one request, 2050 row tiles of 64,
    the default split (one) and 256-key splits (five, 1.3 GB of partial outputs); 48 queries checked against the
    float64 oracle, every head."""
    gpu_only(impl, "131,200 rows over 1,125 keys take minutes on the CPU")
    Q, H = limits.MAX_TREE, limits.MAX_HEADS
    case = shaped(dtype, [(Q, "random")], [100], 64, H, seed=12)
    rng = np.random.default_rng(12)
    edges = [0, 1, 31, 32, 33, 511, 512, 1023, 1024]
    queries = sorted({*edges, *rng.choice(np.arange(Q), SAMPLED - len(edges), replace=False).tolist()})
    o64, l64 = sampled_rows_oracle(case, 0, queries)
    for chunk in impl.knob_values("tree_verify", "split_chunk", [None, 256]):
        got = run(impl, case, split_chunk=chunk)
        out = got.out[0, queries].astype(np.float64)
        what = f" (Q={Q}, H={H}, queries {queries[:4]}..., split_chunk={chunk})"
        oc, lc = out_clause(dtype), lse_clause(dtype)
        expect(got.out.shape == case.q.shape[:3] + (limits.LATENT,), oc, f"out {list(got.out.shape)}")
        expect(got.lse.shape == case.q.shape[:3], lc, f"lse {list(got.lse.shape)}")
        assert_close(out, o64, what=f"out{what}", spec_id=oc, **tol(oc))
        assert_close(got.lse[0, queries].astype(np.float64), l64, what=f"lse{what}", spec_id=lc, **tol(lc))
        assert_cosine(out, o64, what=f"out[0] sampled{what}", spec_id="TV.2.7")

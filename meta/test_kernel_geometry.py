"""tree_verify's launch geometry has one source, kernels_cu/tree_verify.cuh: the host library that the
wrapper calls (kernels_cu/geometry.py) and the kernels compiled by NVRTC must read it alike, and the split-KV
rule must have the properties the kernel relies on."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels_cu import geometry, specs

VARIANTS = ("bf16", "fp32", "sm90a")
ARGS = [
    (n_keys, rows, v, chunk)
    for n_keys, rows, v, chunk in itertools.product(
        [1, 2, 31, 32, 33, 511, 512, 513, 1025, 8192 + 16, 32768 + 1, 262_144],
        [1, 3, 63, 64, 65, 1024, 1025 * 128],
        [0, 1, 2],
        [0, 1, 7, 64, 4096],
    )
]


def test_fields_come_from_the_header():
    names = geometry.tree_verify_fields()
    assert {"threads", "smem_bytes", "row_tiles", "split_chunk", "n_splits", "combine_blocks"} <= set(names)
    assert geometry.tree_verify_variant("bf16") != geometry.tree_verify_variant("fp32")


# the budgets of the portable kernel's builds: sm_90's 227 KB (the tuned tiles), sm_120's 99 KB (the small ones)
BUDGETS = {a: geometry.smem_budget(specs.get("tree_verify", "portable"), a) for a in ("sm_90", "sm_120")}


@pytest.mark.parametrize("arch", BUDGETS)
@pytest.mark.parametrize("dtype_name", VARIANTS)
def test_shared_memory_fits_the_arch(dtype_name, arch):
    g = geometry.tree_verify(1, 1, geometry.tree_verify_variant(dtype_name), budget=BUDGETS[arch])
    assert g["smem_bytes"] % 16 == 0
    if dtype_name != "sm90a":  # sm90a builds for sm_90a alone
        assert g["smem_bytes"] <= geometry.arch_limits(arch)["smem_per_block_optin"], f"more than an {arch} block"


def test_tiles_follow_the_budget():
    """The tuned tiles where they fit (sm_90), the small ones where not (sm_120); sm90a's is its own."""
    v = {k: geometry.tree_verify_variant(k) for k in VARIANTS}
    tuned = {k: geometry.tree_verify(1, 1, v[k], budget=BUDGETS["sm_90"]) for k in VARIANTS}
    small = {k: geometry.tree_verify(1, 1, v[k], budget=BUDGETS["sm_120"]) for k in VARIANTS}
    assert (tuned["bf16"]["m_tile"], tuned["bf16"]["kv_stages"], tuned["bf16"]["prefetch"]) == (64, 2, 0)
    assert (tuned["fp32"]["m_tile"], tuned["fp32"]["block_n"], tuned["fp32"]["prefetch"]) == (32, 32, 0)
    assert (small["bf16"]["m_tile"], small["bf16"]["kv_stages"], small["bf16"]["prefetch"]) == (32, 1, 1)
    assert (small["fp32"]["m_tile"], small["fp32"]["block_n"], small["fp32"]["prefetch"]) == (16, 16, 1)
    assert tuned["sm90a"] == small["sm90a"]
    assert tuned == {k: geometry.tree_verify(1, 1, v[k], budget=geometry.unbounded_budget()) for k in VARIANTS}


@pytest.mark.parametrize("budget", BUDGETS.values(), ids=BUDGETS.keys())
@pytest.mark.parametrize("n_keys,rows,v,chunk", ARGS[::7])
def test_split_rule(n_keys, rows, v, chunk, budget):
    """Splits tile the request's keys exactly; default chunks are whole key blocks and never split a request
    into pieces under the minimum unless it is shorter than that."""
    g = geometry.tree_verify(n_keys, rows, v, chunk, budget=budget)
    c, n = g["split_chunk"], g["n_splits"]
    assert c >= 1 and n >= 1
    assert (n - 1) * c < n_keys <= n * c
    assert g["row_tiles"] * g["m_tile"] >= rows > (g["row_tiles"] - 1) * g["m_tile"]
    if chunk > 0:
        assert c == chunk
    else:
        assert c % g["block_n"] == 0
        assert n == 1 or c >= 512 - g["block_n"]


def _planned_by_brute_force(keys, rows, ctas):
    """The planned rule's documented model (tree_verify.cuh), priced at every chunk of whole 64-key blocks from
    256 keys (or the longest request, if shorter) to the longest request: the cheapest, then the fewest splits."""
    blocks = [-(-k // 64) for k in keys]
    tiles, longest = -(-rows // 64), max(blocks)
    best = None
    for k in range(min(4, longest), longest + 1):
        splits = sum(-(-b // k) for b in blocks)
        if -(-longest // k) > 128:  # the rule tries at most 128 splits of the longest request
            continue
        cost = -(-tiles * splits // ctas) * (k + 2) + (2 if splits > len(keys) else 0)
        cand = (cost, -(-longest // k), k)
        best = cand if best is None or cand < best else best
    return best


@pytest.mark.parametrize("seed", range(40))
def test_planned_rule_takes_the_cheapest_chunk_of_its_model(seed):
    """sm90a_planned's batch chunk (the header's planned_chunk, through the host library) is the cheapest of the
    candidates the header prices (one chunk per split count of the longest request) under the model it documents,
    within 5 % of the cheapest chunk of whole blocks (a brute force over every one; 4.8 % at worst over 400 seeded
    batches), and no request gets more splits than the deferred grid holds (planned_max_splits)."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 8, 32, 128]))
    keys = [int(k) for k in np.clip(np.exp(rng.normal(8.5, 1.5, bs)), 1, 131_072).astype(int)]
    rows, ctas = int(rng.choice([1, 16, 64, 128, 512, 1088])), int(rng.choice([66, 114, 132]))
    v = geometry.tree_verify_variant("sm90a")
    chunk, most = geometry.tree_verify_planned(keys, rows, v, ctas, max(keys))
    assert chunk % 64 == 0 and (chunk >= 256 or chunk >= max(keys))
    splits = [-(-k // chunk) for k in keys]
    assert max(splits) <= most
    blocks = [-(-key // 64) for key in keys]
    tiles, longest = -(-rows // 64), max(blocks)

    def cost_of(k):  # the model's price of a chunk of k blocks
        n = sum(-(-b // k) for b in blocks)
        return -(-tiles * n // ctas) * (k + 2) + (2 if n > bs else 0)

    candidates = {-(-longest // s) for s in range(1, 129) if s == 1 or -(-longest // s) >= 4}
    got = cost_of(chunk // 64)
    assert chunk // 64 in candidates and got == min(cost_of(k) for k in candidates), (keys, rows, ctas, chunk)
    best, _s, _k = _planned_by_brute_force(keys, rows, ctas)
    assert got <= 1.05 * best, f"{keys} rows {rows} ctas {ctas}: chunk {chunk} costs {got}, every chunk's best {best}"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [s.variant for s in specs.for_op("tree_verify") if s.source == "tree_verify.cu"])
def test_host_library_matches_device_query_kernel(variant):
    """The query kernel of each build of tree_verify.cu on this GPU (its own budget) and the host library."""
    from cuda.core import LaunchConfig, launch

    from kernels_cu import runtime, tree_verify_ops
    from kernels_cu.arrays import Staging

    spec = specs.get("tree_verify", variant)
    if not spec.runs_on(runtime.gpu().arch):
        pytest.skip(f"{spec.name} is not built for {runtime.gpu().arch}")
    args = np.array(ARGS, np.int64)
    st = Staging(None, None)
    try:
        a = st.input(args)
        out = st.output((len(args), 16), np.int64)
        kernel = runtime.load(spec, 0, entry=spec.geometry)
        launch(runtime.gpu().stream, LaunchConfig(grid=(len(args) + 127) // 128, block=128), kernel, a,
               np.int32(len(args)), out[1])  # fmt: skip
        dev = st.result(out[0])
    finally:
        st.close()
    names = geometry.tree_verify_fields()
    for row, got in zip(ARGS, dev):
        want = geometry.tree_verify(*row, budget=tree_verify_ops.budget(spec))
        assert dict(zip(names, got[: len(names)].tolist())) == want, row

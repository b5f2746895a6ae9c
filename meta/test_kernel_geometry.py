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


def _splits(blocks: int, T: int) -> int:
    """A request's splits at target T (the planned rule as tree_verify.cuh documents it)."""
    chunk = -(-blocks // -(-blocks // T))
    return -(-blocks // chunk)


def _planned_target(blocks, tiles, ctas):
    """The documented rule, restated by brute force: for W = 1..4 waves the smallest target T (128 keys at least,
    unless the longest request is shorter) whose CTAs fit W waves, priced waves x (T + 4) (+ 2 where a request
    splits); the cheapest, fewer waves on a tie; one split each where no W fits."""
    longest = max(blocks)
    best = None
    for W in range(1, 5):
        fits = [T for T in range(min(2, longest), longest + 1)
                if tiles * sum(_splits(b, T) for b in blocks) <= W * ctas]  # fmt: skip
        if not fits:
            continue
        T = min(fits)
        n = sum(_splits(b, T) for b in blocks)
        cost = -(-tiles * n // ctas) * (T + 4) + (2 if n > len(blocks) else 0)
        if best is None or cost < best[0]:
            best = (cost, T)
    return longest if best is None else best[1]


@pytest.mark.parametrize("seed", range(40))
def test_planned_schedule_is_its_documented_rule(seed):
    """sm90a_planned's schedule (the header's planned rule, through the host library) takes the target the rule
    documents (a brute force over every target), gives each request the splits that target implies with chunks of
    whole key blocks, lists every (request, split, row tile) once in that order with the requests of the longest
    chunk first (then by index: the longest units start first, the short ones fill the tail), and stays within the
    deferred launch's grid and partial slots (planned_max_units, planned_max_slots)."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([1, 2, 4, 8, 32, 128]))
    keys = [int(k) for k in np.clip(np.exp(rng.normal(8.5, 1.5, bs)), 1, 131_072).astype(int)]
    rows, ctas = int(rng.choice([1, 16, 64, 128, 512, 1088])), int(rng.choice([66, 114, 132]))
    v = geometry.tree_verify_variant("sm90a")
    plan = geometry.tree_verify_schedule(keys, rows, v, ctas)
    blocks, tiles = [-(-k // 64) for k in keys], -(-rows // 64)
    assert plan["target"] == _planned_target(blocks, tiles, ctas), (keys, rows, ctas)
    splits = [_splits(b, plan["target"]) for b in blocks]
    assert all(c % 64 == 0 for c in plan["chunk"])
    assert [-(-k // int(c)) for k, c in zip(keys, plan["chunk"])] == splits
    chunks = [-(-b // s) for b, s in zip(blocks, splits)]  # in key blocks; the table takes the longest first
    order = sorted(range(bs), key=lambda b: (-chunks[b], b))
    want = [(t, s, b) for b in order for s in range(splits[b]) for t in range(tiles)]
    units = plan["units"]
    assert units[0] == len(want) and [tuple(u) for u in units[1:].reshape(-1, 3)] == want
    split = [n if n > 1 else 0 for n in splits]
    assert plan["first"].tolist() == [sum(split[:b]) if split[b] else 0 for b in range(bs)]
    max_units, max_slots = geometry.tree_verify_planned_bounds(bs, rows, v, ctas)
    assert units[0] <= max_units and plan["slots"] == sum(split) <= max_slots


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

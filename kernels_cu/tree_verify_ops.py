"""Launch of a tree_verify kernel spec (kernels_cu/tree_verify.cu, variant "portable"; kernels_cu/
tree_verify_sm90a.cu, variant "sm90a"): validation by the contract (on host copies of the index arrays and
the mask; q and the cache by shape and dtype alone), the launch geometry and the split-KV plan from the
kernel's header (kernels_cu/geometry.py), buffers, launches.

The sm90a kernel takes bf16 inputs whose page size TMA boxes can tile (SM90A_PAGE_SIZES); any other call of
that variant is served by the portable kernel (`served_by` names the spec that ran). Its cache is passed as a
TMA descriptor (a CUtensorMap encoded here, copied to the device with the call's other inputs).

Split-KV: request b's keys are cut into chunks of `split_chunk` keys (default: the header's rule, from the
request's own length and Q·H); a request with one chunk is written by the attention kernel directly, the
others get partial-output slots that the combine kernel merges in chunk order.
"""

from __future__ import annotations

import collections

import numpy as np

from contract import BF16, TREE_VERIFY, InputError, Verified, limits
from contract.checks import integer

from . import geometry, runtime, specs
from .arrays import Prepared, Staging, call_args, check_aligned, launch_kernel, run, split_args
from .specs import KernelSpec

_ENTRIES = {"bf16": ("tree_verify_bf16_kernel", "tree_verify_combine_bf16_kernel"),
            "fp32": ("tree_verify_f32_kernel", "tree_verify_combine_f32_kernel"),
            "sm90a": ("tree_verify_sm90a_kernel", "tree_verify_combine_bf16_kernel")}  # fmt: skip
PORTABLE = "portable"
SM90A = "sm90a"
# Which spec served the calls of which spec, per input kind, since the last take_served() (the conformance
# report lists it, so a case that fell back from sm90a to portable says so).
_SERVED: collections.Counter = collections.Counter()


def take_served() -> dict[str, int]:
    """{"requested -> served (dtype, page P)": calls} since the last call, and reset."""
    out = {f"{a} -> {b} ({dt}, page {ps})": n for (a, b, dt, ps), n in sorted(_SERVED.items())}
    _SERVED.clear()
    return out


def sm90a_takes(dtype_name: str, page_size: int) -> bool:
    """Whether the sm90a kernel serves a call (tree_verify.cuh's rule, which the engine's launcher uses too)."""
    return geometry.tree_verify_sm90a_serves(dtype_name == "bf16", page_size)


def page_size_classes() -> dict[int, str]:
    """{page size: its class}: one size (or a few) of every page-size class the tree_verify kernels address
    differently, derived from the contract's range and tree_verify.cuh's sm90a rule (sm90a_takes), so that the
    tests that cover each class follow the kernels and no list of sizes is written twice. sm90a: every size it
    takes below its key block (several pages to a block, one TMA box each) and, of the multiples of the block,
    the first three and the largest (a page cut in block-row pieces); what it hands to portable, which addresses
    any size row by row: 1, the first odd size, the first multiple of 8 that does not divide the block, the first
    size past the block, and the largest size it does not take."""
    block = geometry.tree_verify(1, 1, geometry.tree_verify_variant(SM90A), budget=geometry.unbounded_budget())
    bn = block["block_n"]
    sizes = range(1, limits.MAX_PAGE_SIZE + 1)
    served = [p for p in sizes if sm90a_takes("bf16", p)]
    handed = [p for p in sizes if not sm90a_takes("bf16", p)]
    whole = [p for p in served if p % bn == 0]
    out = {p: f"sm90a: {bn // p} pages per {bn}-key block" for p in served if p < bn}
    out |= {p: f"sm90a: {p // bn} piece(s) of {bn} rows per page" for p in (*whole[:3], whole[-1])}
    out |= {
        handed[0]: "portable (sm90a hands it over): one row per page",
        next(p for p in handed if p > 1 and p % 2): "portable (sm90a hands it over): odd",
        next(p for p in handed if p % 8 == 0): "portable (sm90a hands it over): a multiple of 8 not dividing the block",
        next(p for p in handed if p > bn): "portable (sm90a hands it over): past one block",
        handed[-1]: "portable (sm90a hands it over): the largest it does not take",
    }
    return dict(sorted(out.items()))


def served_by(spec: KernelSpec, dtype_name: str, page_size: int) -> KernelSpec:
    """The spec that runs a call for `spec`: the sm90a variant hands what it does not take to portable."""
    if spec.variant == SM90A and not sm90a_takes(dtype_name, page_size):
        return specs.get(spec.slug, PORTABLE)
    return spec


def kv_tensor_map(kv_ptr: int, num_pages: int, page_size: int) -> np.ndarray:
    """The sm90a kernel's TMA descriptor of the cache, [pages][page_size][576] bf16 (innermost first below),
    128-byte swizzle, boxes of 64 columns x min(page_size, 64) rows of one page; as its 128 raw bytes."""
    from cuda.bindings import driver

    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    row = limits.HEAD_DIM * 2
    err, tmap = driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        3,
        kv_ptr,
        [u64(limits.HEAD_DIM), u64(page_size), u64(num_pages)],
        [u64(row), u64(row * page_size)],
        [u32(64), u32(min(page_size, 64)), u32(1)],
        [u32(1), u32(1), u32(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"kv_cache: cuTensorMapEncodeTiled failed: {err.name}")
    return np.array([int(x) for x in tmap.opaque], np.uint64)


# tree_verify's geometry query kernel is launched with up to this many threads (meta/test_kernel_geometry.py).
GEOMETRY_THREADS = 128


def launches(spec: KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads, dynamic shared memory)} of every launch of `spec`'s entries by a build whose budget is
    block_limit (geometry.smem_budget): the attention kernel of each dtype path (one tile for every shape), the
    combine kernels, the geometry query."""
    out = {spec.geometry: (GEOMETRY_THREADS, 0)}
    for name, (attention, combine) in _ENTRIES.items():
        g = geometry.tree_verify(1, 1, geometry.tree_verify_variant(name), budget=block_limit)
        if attention in spec.entries:
            out[attention] = (g["threads"], g["smem_bytes"])
        if combine in spec.entries:
            out[combine] = (g["combine_threads"], 0)
    return out


def budget(spec: KernelSpec) -> int:
    """The shared-memory budget `spec`'s kernels were built with for this GPU (it picks the portable tile)."""
    return geometry.smem_budget(spec, runtime.build_arch(spec, runtime.gpu().arch))


MAX_GRID_Y = 65535  # splits per request (grid y)
# The partial outputs of split requests are fp32 [slots, Q·H, 512]: bounded so that a tiny forced chunk
# on a long prefix is refused rather than asked of the device allocator.
MAX_PARTIAL_BYTES = 8 << 30


def split_plan(prefix_lens: np.ndarray, Q: int, H: int, dtype_name: str, split_chunk=None, *, budget: int):
    """(chunk per request, first partial slot per request, partial slots, splits of the longest request).
    A request with one split needs no slot (its slot entry is 0 and unused). dtype_name is the kernel:
    'bf16', 'fp32' or 'sm90a'; budget the build's (budget(spec))."""
    var = geometry.tree_verify_variant(dtype_name)
    chunk = np.empty(len(prefix_lens), np.int64)
    first = np.zeros(len(prefix_lens), np.int64)
    slots = most = 0
    for b, p in enumerate(prefix_lens):
        g = geometry.tree_verify(int(p) + Q, Q * H, var, split_chunk or 0, budget=budget)
        chunk[b] = g["split_chunk"]
        n = g["n_splits"]
        most = max(most, n)
        if n > 1:
            first[b] = slots
            slots += n
    return chunk, first, slots, most


def prepare(spec: KernelSpec, *args, split_chunk=None, **kwargs) -> Prepared:
    """Validate a tree_verify call (the contract's signature) and set it up on the device for `spec`;
    `split_chunk` forces the keys per split (a tuning knob of this variant). `launch()` enqueues the
    attention kernel and, when a request is split, the combine kernel (what a benchmark times)."""
    lib, like, host, dev = split_args(TREE_VERIFY, TREE_VERIFY.bind(*args, **kwargs))
    checked = TREE_VERIFY.validate(**host)
    a, d = checked.args, checked.dims
    if split_chunk is not None:
        split_chunk = integer("split_chunk", split_chunk, 1, limits.MAX_CONTEXT)
    check_aligned("q", dev["q"], "the kernel copies 16-byte vectors")
    check_aligned("kv_cache", dev["kv_cache"], "the kernel copies 16-byte vectors")
    bs, Q, H = d["bs"], d["Q"], d["H"]
    dtype = d["T"]
    if lib == "cupy" and dtype == BF16:
        raise InputError("q: cupy has no bfloat16 arrays; pass bf16 inputs as torch tensors or numpy arrays")
    name = "bf16" if dtype == BF16 else "fp32"
    requested, spec = spec, served_by(spec, name, d["page_size"])
    _SERVED[(requested.name, spec.name, name, d["page_size"])] += 1
    if spec.variant == SM90A:
        name = SM90A
    smem_budget = budget(spec)
    geo = geometry.tree_verify(1, Q * H, geometry.tree_verify_variant(name), budget=smem_budget)
    chunk, first, slots, most = split_plan(a["prefix_lens"], Q, H, name, split_chunk, budget=smem_budget)
    if most > MAX_GRID_Y:
        raise InputError(f"split_chunk: {split_chunk} keys per split gives {most} splits, more than {MAX_GRID_Y}")
    QH = Q * H
    if slots * QH * (limits.LATENT + 1) * 4 > MAX_PARTIAL_BYTES:
        raise InputError(f"split_chunk: {split_chunk} keys per split needs {slots} partial outputs of {QH} rows, "
                         f"more than {MAX_PARTIAL_BYTES} bytes")  # fmt: skip
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("q", "kv_cache", "block_table", "prefix_lens", "visibility")]
        if name == SM90A:  # the kernel reads the cache through its TMA descriptor
            ins[1] = st.input(kv_tensor_map(ins[1], d["num_pages"], d["page_size"]))
        chunk_ptr, first_ptr = st.input(chunk), st.input(first)
        out = st.output((bs, Q, H, limits.LATENT), dtype)
        lse = st.output((bs, Q, H), np.float32)
        part_o = st.scratch(slots * QH * limits.LATENT * 4)
        part_lse = st.scratch(slots * QH * 4)
    except BaseException:
        st.close()
        raise
    attention, combine = _ENTRIES[name]
    args = (
        *ins,
        np.float32(a["softmax_scale"]),
        np.int32(Q),
        np.int32(H),
        np.int32(d["page_size"]),
        np.int32(d["max_pages"]),
        chunk_ptr,
        first_ptr,
        out[1],
        lse[1],
        part_o,
        part_lse,
    )
    grid = (geo["row_tiles"], most, bs)
    combine_args = (part_o, part_lse, chunk_ptr, first_ptr, ins[3], np.int32(Q), np.int32(H), out[1], lse[1])

    combine_spec = specs.get(spec.slug, PORTABLE) if name == SM90A else spec  # one combine kernel for both

    def launch():
        launch_kernel(spec, grid, geo["smem_bytes"], *args, entry=attention, block=geo["threads"])
        if slots:
            blocks = (geo["combine_blocks"], bs, 1)
            launch_kernel(combine_spec, blocks, 0, *combine_args, entry=combine, block=geo["combine_threads"])

    prepared = Prepared(st, launch, lambda: Verified(st.result(out[0]), st.result(lse[0])))
    prepared.served_by = spec.name
    return prepared


def bind(spec: KernelSpec, split_chunk=None):
    """The op function of `spec` (optionally with a forced split chunk), with the contract's signature."""

    @TREE_VERIFY.implements
    def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
        return run(prepare(spec, **call_args(TREE_VERIFY, locals()), split_chunk=split_chunk))

    knob = "" if split_chunk is None else f" (split_chunk={split_chunk})"
    tree_verify.__doc__ = (
        f"CUDA tree_verify, variant {spec.variant}{knob}: {spec.description}.\n\n{tree_verify.__doc__}"
    )
    return tree_verify

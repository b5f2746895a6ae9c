"""Launch of a tree_verify kernel spec (kernels_cu/tree_verify.cu, variant "portable"; kernels_cu/
tree_verify_sm90a.cu, variant "sm90a"): validation by the contract (on host copies of the index arrays and
the mask; q and the cache by shape and dtype alone), the launch geometry and the split-KV plan from the
kernel's header (kernels_cu/geometry.py), buffers, launches.

The sm90a kernel takes bf16 inputs whose page size TMA boxes can tile (SM90A_PAGE_SIZES); any other call of
that variant is served by the portable kernel (`served_by` names the spec that ran). Its cache is passed as a
TMA descriptor (a CUtensorMap encoded here, copied to the device with the call's other inputs).

Split-KV: request b's keys are cut into chunks of `split_chunk` keys (default: the header's rule, from the
request's own length and Q·H; for the planned variant sm90a_planned, the header's planned schedule, made from every
request's length and the GPU's SMs: each request's chunk and a unit table of CTAs); a request with one chunk is
written by the attention kernel directly, the others get partial-output slots that the combine kernel merges in
chunk order.
"""

from __future__ import annotations

import collections

import numpy as np

from contract import BF16, TREE_VERIFY, InputError, Verified, limits
from contract.checks import integer

from . import geometry, runtime, specs
from .arrays import (
    Deferred,
    ErrorFlag,
    Prepared,
    Staging,
    call_args,
    check_aligned,
    device_call,
    host_copies,
    launch_kernel,
    run,
    split_args,
)
from .specs import KernelSpec

_ENTRIES = {"bf16": ("tree_verify_bf16_kernel", "tree_verify_combine_bf16_kernel"),
            "fp32": ("tree_verify_f32_kernel", "tree_verify_combine_f32_kernel"),
            "sm90a": ("tree_verify_sm90a_kernel", "tree_verify_combine_bf16_kernel")}  # fmt: skip
PORTABLE = "portable"
PLAN_ENTRY = "tree_verify_plan_kernel"  # the deferred path's checks and split plan (portable's build)
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


def is_sm90a(spec: KernelSpec) -> bool:
    """Whether spec builds the sm90a kernel (sm90a, or its planned mode sm90a_planned)."""
    return spec.source == "tree_verify_sm90a.cu"


def is_planned(spec: KernelSpec) -> bool:
    """Whether spec plans its splits for the whole batch (tree_verify.cuh's planned rule): the tree_verify variant
    that declares no batch invariance (specs.py: sm90a_planned)."""
    return not spec.batch_invariant


def served_by(spec: KernelSpec, dtype_name: str, page_size: int) -> KernelSpec:
    """The spec that runs a call for `spec`: the sm90a variants hand what they do not take to portable."""
    if is_sm90a(spec) and not sm90a_takes(dtype_name, page_size):
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
    if PLAN_ENTRY in spec.entries:
        out[PLAN_ENTRY] = (spec.block, 0)
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


def plan_ctas() -> int:
    """CTAs a wave of the planned sm90a launch: one per SM (the kernel's shared memory allows one)."""
    return runtime.sm_count()


def split_plan(prefix_lens: np.ndarray, Q: int, H: int, dtype_name: str, split_chunk=None, *, budget: int,
               planned: bool = False):  # fmt: skip
    """(chunk per request, first partial slot per request, partial slots, splits of the longest request, the unit
    table of a planned schedule or None). A request with one split needs no slot (its slot entry is 0 and unused).
    dtype_name is the kernel: 'bf16', 'fp32' or 'sm90a'; budget the build's (budget(spec)); planned: the batch's
    planned schedule (tree_verify.cuh's planned rule; made once here, for every launch of the prepared call) unless
    split_chunk forces a chunk."""
    var = geometry.tree_verify_variant(dtype_name)
    if planned and not split_chunk:
        plan = geometry.tree_verify_schedule([int(p) + Q for p in prefix_lens], Q * H, var, plan_ctas())
        return plan["chunk"], plan["first"], plan["slots"], plan["most"], plan["units"]
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
    return chunk, first, slots, most, None


class _Call:
    """What the checked and the deferred calls share, once their arguments passed the contract's checks (all of
    them, or validate_shapes()): the spec that serves the call, its kernel and build budget, the geometry, the
    staging of inputs and outputs, and the attention and combine launches."""

    def __init__(self, spec: KernelSpec, lib, like, dev: dict, checked):
        d = checked.dims
        check_aligned("q", dev["q"], "the kernel copies 16-byte vectors")
        check_aligned("kv_cache", dev["kv_cache"], "the kernel copies 16-byte vectors")
        if lib == "cupy" and d["T"] == BF16:
            raise InputError("q: cupy has no bfloat16 arrays; pass bf16 inputs as torch tensors or numpy arrays")
        self.lib, self.like, self.dev, self.dims = lib, like, dev, d
        self.bs, self.Q, self.H = d["bs"], d["Q"], d["H"]
        self.softmax_scale = checked.args["softmax_scale"]
        name = "bf16" if d["T"] == BF16 else "fp32"
        requested, self.spec = spec, served_by(spec, name, d["page_size"])
        _SERVED[(requested.name, self.spec.name, name, d["page_size"])] += 1
        self.name = SM90A if is_sm90a(self.spec) else name
        self.planned = is_planned(self.spec)
        self.budget = budget(self.spec)
        self.geo = geometry.tree_verify(1, self.Q * self.H, geometry.tree_verify_variant(self.name), budget=self.budget)
        # one combine kernel (and one plan kernel) for both: portable's
        self.portable = specs.get(self.spec.slug, PORTABLE) if self.name == SM90A else self.spec

    def check_plan(self, split_chunk, slots: int, most: int, max_context=None) -> None:
        """The plan's grid and partial outputs within bounds: InputError otherwise, naming split_chunk when it was
        forced, else max_context (a deferred call's partial outputs are sized for it)."""
        cause = (f"split_chunk: {split_chunk} keys per split" if split_chunk is not None or max_context is None
                 else f"max_context: {max_context} keys")  # fmt: skip
        if most > MAX_GRID_Y:
            raise InputError(f"{cause} gives {most} splits, more than {MAX_GRID_Y}")
        QH = self.Q * self.H
        if slots * QH * (limits.LATENT + 1) * 4 > MAX_PARTIAL_BYTES:
            raise InputError(f"{cause} needs {slots} partial outputs of {QH} rows, more than {MAX_PARTIAL_BYTES} bytes")

    def stage(self, slots: int, most: int, plan_buffers, units: int = 0) -> tuple:
        """Inputs, outputs and scratch on the device; plan_buffers(staging) -> {"chunk", "first"} device pointers,
        "lens", "table" where the attention reads copies of prefix_lens and block_table, and "units", the unit table
        of a planned schedule, whose `units` CTAs (a 1-D grid) replace the (row tiles, most, bs) grid. Returns
        (staging, launch of the attention and combine kernels, {input: device pointer}, out, lse)."""
        d, QH = self.dims, self.Q * self.H
        st = Staging(self.lib, self.like)
        try:
            st.sync_before()
            ins = {k: st.input(self.dev[k]) for k in ("q", "kv_cache", "block_table", "prefix_lens", "visibility")}
            plan = plan_buffers(st)
            kv = ins["kv_cache"]
            if self.name == SM90A:  # the kernel reads the cache through its TMA descriptor
                kv = st.input(kv_tensor_map(kv, d["num_pages"], d["page_size"]))
            out = st.output((self.bs, self.Q, self.H, limits.LATENT), d["T"])
            lse = st.output((self.bs, self.Q, self.H), np.float32)
            part_o = st.scratch(slots * QH * limits.LATENT * 4)
            part_lse = st.scratch(slots * QH * 4)
        except BaseException:
            st.close()
            raise
        lens, table = plan.get("lens", ins["prefix_lens"]), plan.get("table", ins["block_table"])
        attention, combine = _ENTRIES[self.name]
        args: tuple = (ins["q"], kv, table, lens, ins["visibility"], np.float32(self.softmax_scale), np.int32(self.Q),
                       np.int32(self.H), np.int32(d["page_size"]), np.int32(d["max_pages"]), plan["chunk"],
                       plan["first"], out[1], lse[1], part_o, part_lse)  # fmt: skip
        if self.name == SM90A:  # its unit table (0: none, the grid's coordinates say which CTA does what)
            args = (*args, plan.get("units", 0))
        grid = (units, 1, 1) if units else (self.geo["row_tiles"], most, self.bs)
        combine_args = (part_o, part_lse, plan["chunk"], plan["first"], lens, np.int32(self.Q), np.int32(self.H),
                        out[1], lse[1])  # fmt: skip
        geo, spec, portable, bs = self.geo, self.spec, self.portable, self.bs

        def launch():
            launch_kernel(spec, grid, geo["smem_bytes"], *args, entry=attention, block=geo["threads"])
            if slots:  # dependent: its launch overlaps the attention's tail (it waits for the grid on the device)
                blocks = (geo["combine_blocks"], bs, 1)
                launch_kernel(
                    portable, blocks, 0, *combine_args, entry=combine, block=geo["combine_threads"], dependent=True
                )

        return st, launch, ins, out[0], lse[0]


def _forced_chunk(split_chunk):
    return None if split_chunk is None else integer("split_chunk", split_chunk, 1, limits.MAX_CONTEXT)


def prepare(spec: KernelSpec, *args, split_chunk=None, **kwargs) -> Prepared:
    """Validate a tree_verify call (the contract's signature) and set it up on the device for `spec`;
    `split_chunk` forces the keys per split (a tuning knob of this variant). `launch()` enqueues the
    attention kernel and, when a request is split, the combine kernel (what a benchmark times)."""
    lib, like, host, dev = split_args(TREE_VERIFY, TREE_VERIFY.bind(*args, **kwargs))
    checked = TREE_VERIFY.validate(**host)
    split_chunk = _forced_chunk(split_chunk)
    call = _Call(spec, lib, like, dev, checked)
    chunk, first, slots, most, units = split_plan(checked.args["prefix_lens"], call.Q, call.H, call.name,
                                                  split_chunk, budget=call.budget, planned=call.planned)  # fmt: skip
    call.check_plan(split_chunk, slots, most)

    def plan_buffers(st):
        plan = {"chunk": st.input(chunk), "first": st.input(first)}
        return plan if units is None else {**plan, "units": st.input(units)}

    st, launch, _, out, lse = call.stage(slots, most, plan_buffers, 0 if units is None else int(units[0]))
    prepared = Prepared(st, launch, lambda: Verified(st.result(out), st.result(lse)))
    prepared.served_by = call.spec.name
    return prepared


def prepare_deferred(spec: KernelSpec, *args, max_context, split_chunk=None, error_flag=None, **kwargs) -> Deferred:
    """Set up a tree_verify call on device-resident inputs (cupy, torch) with the value checks and the split plan on
    the device (spec TV.3.7), for requests of at most `max_context` keys (prefix_len + Q: the grid and the partial
    outputs are sized for it). The shape-only checks run here (InputError now); a bad value, or a request longer
    than max_context, raises the same InputError as prepare() would (or one naming max_context) from check() /
    results() after the launch. The launch (tree_verify_plan_kernel, the attention kernel, the combine kernel) is
    capturable; good inputs give prepare()'s bits. error_flag: a caller's flag word shared with other calls and never
    reset by this one (arrays.ErrorFlag)."""
    named = TREE_VERIFY.bind(*args, **kwargs)
    lib, like, dev, infos = device_call(TREE_VERIFY, named)
    checked = TREE_VERIFY.validate_shapes(**infos)
    flag = ErrorFlag(error_flag)
    split_chunk = _forced_chunk(split_chunk)
    call = _Call(spec, lib, like, dev, checked)
    d, bs, Q = checked.dims, call.bs, call.Q
    max_context = integer("max_context", max_context, Q, limits.MAX_CONTEXT)
    var = geometry.tree_verify_variant(call.name)
    most = geometry.tree_verify(max_context, Q * call.H, var, split_chunk or 0, budget=call.budget)["max_splits"]
    ctas = max_units = 0  # the plan kernel's planned schedule: CTAs a wave, the grid (0: each request's own chunk)
    slots = bs * most if most > 1 else 0
    if call.planned and not split_chunk:
        ctas = plan_ctas()
        max_units, slots = geometry.tree_verify_planned_bounds(bs, Q * call.H, var, ctas)
    call.check_plan(split_chunk, slots, most, max_context)
    max_pages = d["max_pages"]
    pad = max(0, -(-Q // d["page_size"]) - max_pages)  # a refused request's tree rows, planned at length 0
    plan: dict = {}

    def plan_buffers(st):
        plan.update(chunk=st.scratch(8 * bs), first=st.scratch(8 * bs), lens=st.scratch(4 * bs),
                    table=st.scratch(4 * (bs * max_pages + pad)), flag=flag.allocate(st))  # fmt: skip
        if max_units:
            plan["units"] = st.scratch(4 * (1 + 3 * max_units))
        return plan

    st, attend, ins, out, lse = call.stage(slots, most, plan_buffers, max_units)
    plan_args = (ins["prefix_lens"], ins["block_table"], ins["visibility"], np.int32(Q), np.int32(call.H),
                 np.int32(d["page_size"]), np.int32(max_pages), np.int64(d["num_pages"]), np.int64(max_context),
                 np.int32(var), np.int64(split_chunk or 0), np.int64(call.budget), np.int64(most), np.int32(pad),
                 np.int64(ctas), plan["lens"], plan["table"], plan["chunk"], plan["first"], plan.get("units", 0),
                 plan["flag"])  # fmt: skip

    def launch():
        flag.clear(st)
        launch_kernel(call.portable, bs, 0, *plan_args, entry=PLAN_ENTRY)
        attend()

    def revalidate():  # raises the named error
        host = host_copies(TREE_VERIFY, named)
        TREE_VERIFY.validate(**host)
        n = host["prefix_lens"].astype(np.int64) + Q
        if (n > max_context).any():
            b = int(np.argmax(n > max_context))
            raise InputError(f"prefix_lens: request {b}: prefix {int(n[b]) - Q} + {Q} tree rows = {int(n[b])} "
                             f"exceeds max_context {max_context}, the deferred call's stated maximum")  # fmt: skip

    deferred = Deferred(st, launch, lambda: Verified(st.result(out), st.result(lse)), plan["flag"], revalidate,
                        "tree_verify")  # fmt: skip
    deferred.served_by = call.spec.name
    return deferred


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

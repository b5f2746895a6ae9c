"""Launch of a tree_build kernel spec: validation by the contract (on host copies of device inputs), the
geometry from the kernel's own header (through its query kernel), buffers, the launch, the results.

`prepare_deferred` is the capturable path for device-resident inputs (spec TB.4.5): the contract's
shape-only checks on the host, its value checks on the device (tree_build_check_kernel, an error flag), and
the contract's full validate() on host copies only when the flag is set, when the results are read."""

from __future__ import annotations

import numpy as np

from contract import TREE_BUILD, Tree

from . import geometry, runtime, specs
from .arrays import (
    Deferred,
    ErrorFlag,
    Prepared,
    Staging,
    call_args,
    device_call,
    host_copies,
    launch_kernel,
    run,
    split_args,
)
from .specs import KernelSpec


def prepare(spec: KernelSpec, *args, race_min_b: int | None = None, **kwargs) -> Prepared:
    """Validate a tree_build call (the contract's signature) and set it up on the device for `spec`. race_min_b
    (a race build's tuning knob): the budget the launch races from, instead of its type's race_min_b."""
    return _prepare_checked(spec, args, kwargs, race_min_b)[0]


def _prepare_checked(spec: KernelSpec, args, kwargs, race_min_b: int | None) -> tuple[Prepared, dict]:
    """prepare(), and the call's dimensions (bs, L, K_in, B, F) from the same validation."""
    lib, like, host, dev = split_args(TREE_BUILD, TREE_BUILD.bind(*args, **kwargs))
    checked = TREE_BUILD.validate(**host)
    if dev["prefix_lens"] is None:  # the contract's default (zeros), staged from the host
        dev["prefix_lens"] = checked.args["prefix_lens"]
    st, _, launch, collect = _setup(spec, lib, like, dev, checked.dims, race_min_b)
    return Prepared(st, launch, collect), checked.dims


def prepare_deferred(spec: KernelSpec, *args, race_min_b: int | None = None, error_flag=None, **kwargs) -> Deferred:
    """Set up a tree_build call on device-resident inputs (cupy, torch) with the value checks on the device.
    The shape-only checks run here (InputError now); a bad value raises the same InputError as prepare() would,
    from check() / results() after the launch. with_full_mask must be False (its size reads prefix_lens).
    error_flag: a caller's flag word shared with other calls and never reset by this one (arrays.ErrorFlag)."""
    named = TREE_BUILD.bind(*args, **kwargs)
    lib, like, dev, infos = device_call(TREE_BUILD, named)
    dims = TREE_BUILD.validate_shapes(**infos).dims
    flag = ErrorFlag(error_flag)
    if named["prefix_lens"] is None:
        dev["prefix_lens"] = np.zeros(dims["bs"], np.int32)
    st, ins, build, collect = _setup(spec, lib, like, dev, dims, race_min_b, flag)
    L, K_in, B = (np.int32(dims[k]) for k in ("L", "K_in", "B"))

    def launch():
        flag.clear(st)
        launch_kernel(spec, dims["bs"], 0, *ins, L, K_in, B, flag.ptr, entry="tree_build_check_kernel")
        build()

    def revalidate():  # raises the named error
        TREE_BUILD.validate(**host_copies(TREE_BUILD, named))

    return Deferred(st, launch, collect, flag.ptr, revalidate, "tree_build")


# The defines by which a design build of lab/tree_build_dev.py overrides its type's policies (tree_build.cu's Built
# reads the same ones); no registered spec names one (conformance/test_kernels_build.py).
DESIGN_OVERRIDES = {"TB_STAGE_LP": "stage_lp", "TB_SELECT_CAP": "select_cap", "TB_RACE_MIN_B": "race_min_b"}


def variant_type(spec: KernelSpec) -> str:
    """The tree_build variant type a spec builds (its TB_VARIANT: a `_99k` twin builds its base's)."""
    return spec.all_defines()["TB_VARIANT"]


def policy(spec: KernelSpec) -> dict[str, int]:
    """The policy of spec's build: its type's (tree_build_variants.cuh), with a design build's overrides."""
    pol = geometry.tree_build_policy(variant_type(spec))
    d = spec.all_defines()
    return {**pol, **{field: int(d[k]) for k, field in DESIGN_OVERRIDES.items() if k in d}}


def policies(spec: KernelSpec) -> tuple[int, int, int]:
    """The spec's layout policies, as geometry.tree_build takes them: (stage_lp, select_cap, races)."""
    p = policy(spec)
    return p["stage_lp"], p["select_cap"], int(geometry.TREE_BUILD_STRATEGIES[p["strategy"]] == "race")


def select_min_b(spec: KernelSpec) -> int:
    """The build's TB_SELECT_MIN_B (a design knob: only lab/tree_build_dev.py's designs name one; 0 selects at every
    budget)."""
    return int(spec.all_defines().get("TB_SELECT_MIN_B", "0"))


# The limit the geometry header is given: the per-block limit less 64 bytes (the header keeps another
# kTreeBuildStaticReserve for the kernel's static variables; the 64 stay, since the H200's capacities follow them).
STATIC_ALLOWANCE = 64


def smem_limit(spec: KernelSpec, block_limit: int) -> int:
    """The shared-memory limit tree_build.cuh sizes `spec`'s launch by, on a GPU whose blocks may use block_limit
    bytes: under the spec's own budget where it names one (KERNEL_SMEM_BUDGET: the *_99k variants)."""
    own = geometry.spec_smem_budget(spec)
    return (min(block_limit, own) if own > 0 else block_limit) - STATIC_ALLOWANCE


def launches(spec: KernelSpec, block_limit: int) -> dict[str, tuple[int, int]]:
    """{entry: (threads, most dynamic shared memory)} of every launch of `spec`'s entries anywhere in the
    contract's limits, on a GPU whose blocks may use block_limit bytes of shared memory (the spec's own build:
    a race build's wide batches run another spec's, which has its own)."""
    worst = geometry.tree_build_smem_max(smem_limit(spec, block_limit), *policies(spec))[0]
    return {spec.entry: (spec.block, worst), "tree_build_check_kernel": (spec.block, 0), spec.geometry: (1, 0)}


def _plan(spec: KernelSpec, bs: int, B: int, L: int, K_in: int, race_min_b: int | None, sm_count: int | None = None,
          block_limit: int | None = None) -> tuple[KernelSpec, dict]:  # fmt: skip
    """(the spec whose build runs the launch, the launch's geometry): the header's one launch rule
    (geometry.tree_build_launch), asked with spec's policy and this GPU's SMs and shared memory unless given (a
    question asked without a GPU)."""
    sms = runtime.sm_count() if sm_count is None else sm_count
    limit = smem_limit(spec, runtime.smem_optin_limit() if block_limit is None else block_limit)
    plan = geometry.tree_build_launch(
        variant_type(spec), policy(spec), bs, B, L, K_in, limit, sms, race_min_b, select_min_b(spec)
    )
    runs = spec if plan["variant"] == variant_type(spec) else specs.get("tree_build", plan["variant"])
    return runs, plan


def _setup(spec: KernelSpec, lib, like, dev: dict, dims: dict, race_min_b: int | None = None,
           flag: ErrorFlag | None = None):  # fmt: skip
    """Buffers and the build kernel's launch for validated arguments: (staging, input pointers, launch,
    collect). flag (the deferred path): its word is allocated here and passed to the build, which builds nothing
    when a check has set it (None: the values were checked on the host)."""
    bs, L, K_in, B, F = (dims[k] for k in ("bs", "L", "K_in", "B", "F"))
    spec, plan = _plan(spec, bs, B, L, K_in, race_min_b)
    smem, lp_in_smem, select_cap = plan["smem"], plan["lp_in_smem"], plan["select_cap"]
    st = Staging(lib, like)
    try:
        st.sync_before()
        ins = [st.input(dev[k]) for k in ("top_logp", "top_ids", "root_tokens", "prefix_lens")]
        outs = {}
        for o in TREE_BUILD.outputs:
            shape = tuple(dims[s] if isinstance(s, str) else s for s in o.shape)
            outs[o.name] = st.output(shape, np.uint8 if o.dtype == "bool" else o.dtype)
        refused = flag.allocate(st) if flag is not None else 0
    except BaseException:
        st.close()
        raise
    ptrs = [outs[f][1] for f in Tree.FIELDS]
    ptrs[-1] = ptrs[-1] if F else 0  # no FULL_MASK asked: the kernel skips it
    args = (*ins, np.int32(L), np.int32(K_in), np.int32(B), np.int32(lp_in_smem), np.int32(select_cap), *ptrs,
            refused)  # fmt: skip

    def collect():
        res = {f: st.result(outs[f][0]) for f in Tree.FIELDS}
        if lib in (None, "cupy"):
            res["full_mask"] = res["full_mask"].view(bool)
        return Tree(**res)

    return st, ins, lambda: launch_kernel(spec, bs, smem, *args), collect


# ---- the select variants' fallback, counted ----------------------------------------------------------------
# A select variant whose selection fails a check or whose candidates overflow replays the heap instead: the tree
# stays the reference's, so only the time would show that it happened. Its reporting build (the same source and
# type plus TB_FALLBACK = 2, tree_build_device/select.cuh) replays the same way and then writes why in the request's
# n_nodes instead of the node count; these are the codes. The benchmark (perf/bench_tree_build.py, through
# harness/bench/fallbacks.py) and lab/tree_build_dev.py's `fallbacks` count them here, with one reporting build.
FALLBACK_CODES = {-1: "checks_failed", -2: "overflowed"}


def selects(spec: KernelSpec) -> bool:
    """Whether spec's build selects before it replays (its type's strategy): the variants that can fall back."""
    return policy(spec)["select_cap"] != 0


def reporting_spec(spec: KernelSpec) -> KernelSpec:
    """spec built to report its fallbacks in n_nodes (TB_FALLBACK = 2). Its patches are kept, so that a planted
    build (harness/kernel_mutants.py) is measured as it was built. A race build's reporting build runs the selection
    first and the replay after it instead of racing them (tree_build_device/race.cuh), so that what it reports is
    the selection's outcome in every request, not which of the two finished first."""
    if not selects(spec):
        raise ValueError(f"{spec.name} has no selection to fall back from (its type never selects)")
    return spec.with_defines(f"{spec.variant}_report", TB_FALLBACK="2")


def selection_off(
    spec: KernelSpec, bs: int, B: int, L: int, K_in: int, *, sm_count: int, block_limit: int,
    race_min_b: int | None = None,
) -> str | None:  # fmt: skip
    """Why a launch of spec for bs requests runs no selection at all (None when it selects), by the header's launch
    rule: a race build hands a budget below the one it races from, or more requests than a wave of races, to another
    build; then the kernel's own condition (tree_build_selection_on: the budget, an empty tree, no shared memory
    left for candidates). No GPU needed: sm_count and block_limit (the per-block shared memory) are the GPU's."""
    if not selects(spec):
        return f"{spec.variant} has no selection"
    runs, plan = _plan(spec, bs, B, L, K_in, race_min_b, sm_count, block_limit)
    if runs.variant != spec.variant:
        return f"the launch runs {runs.variant}'s build (tree_build.cuh: race budget or wave)"
    if plan["selects"]:
        return None
    if select_min_b(spec) > B:
        return f"B = {B} is below TB_SELECT_MIN_B = {select_min_b(spec)}"
    if B <= 0 or L <= 0 or min(B, K_in) <= 0:
        return "an empty tree"
    return "no shared memory left for candidates (select capacity 0)"


def count_fallbacks(n_nodes) -> dict[str, int]:
    """{requests, checks_failed, overflowed} from a reporting build's n_nodes (FALLBACK_CODES)."""
    n = np.asarray(n_nodes)
    return {"requests": int(n.size), **{name: int((n == code).sum()) for code, name in FALLBACK_CODES.items()}}


def fallbacks(spec: KernelSpec, *args, race_min_b: int | None = None, **kwargs) -> dict:
    """spec's reporting build launched once on a tree_build call (the contract's signature): count_fallbacks() of
    its n_nodes, or {requests, no_selection: why} where that launch runs no selection (selection_off: a rate there
    would be 0 without meaning anything). spec is the registered spec (its reporting build is made here)."""
    rep = reporting_spec(spec)
    p, dims = _prepare_checked(rep, args, kwargs, race_min_b)
    try:
        why = selection_off(
            rep, dims["bs"], dims["B"], dims["L"], dims["K_in"], sm_count=runtime.sm_count(),
            block_limit=runtime.smem_optin_limit(), race_min_b=race_min_b,
        )  # fmt: skip
        if why is not None:
            return {"requests": int(dims["bs"]), "no_selection": why}
        p.launch()
        return count_fallbacks(p.results().n_nodes)
    finally:
        p.staging.close()


def bind(spec: KernelSpec, race_min_b: int | None = None):
    """The op function of `spec`, with the contract's signature and documentation (race_min_b: see prepare)."""

    @TREE_BUILD.implements
    def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False):
        return run(prepare(spec, **call_args(TREE_BUILD, locals()), race_min_b=race_min_b))

    tree_build.__doc__ = f"CUDA tree_build, variant {spec.variant}: {spec.description}.\n\n{tree_build.__doc__}"
    return tree_build

"""Kernel build specs: what to compile for each variant of each op, apart from the code that compiles and
loads it (kernels_cu/runtime.py) and the code that launches it (the <op>_ops.py wrappers).

A spec names the op slug and variant, the source, the entry and its geometry query kernel, the defines and
NVRTC options, the archs it is built for (a variant that needs sm_90a is compile-checked for that arch only)
and the block size. The engine's nvcc build reads the same specs (`python -m kernels_cu.specs --json`), so
it uses the same flags, defines and launch geometry headers. Deliberately broken kernels (the harness's
mutants) are the same specs with source patches.
"""

from __future__ import annotations

import dataclasses
import json
import sys

PORTABLE_ARCHS = ("sm_90", "sm_120")


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    slug: str
    variant: str
    description: str
    source: str  # file in kernels_cu/
    entry: str
    geometry: str  # the query kernel that evaluates the launch geometry header on the device (a cross-check)
    block: int
    defines: tuple[tuple[str, str], ...] = ()
    # NVRTC options beyond the common ones (runtime.program_options)
    options: tuple[tuple[str, object], ...] = ()
    archs: tuple[str, ...] = PORTABLE_ARCHS
    # input dtypes the variant takes, where narrower than the contract's (an sm_90a kernel may be bf16 only)
    dtypes: tuple[str, ...] | None = None
    # other entry functions of the module the wrapper launches (a second dtype path, a combine kernel)
    extra_entries: tuple[str, ...] = ()
    # tuning arguments the wrapper's prepare() takes beyond the contract (tests force them; defaults are the
    # geometry header's rules)
    knobs: tuple[str, ...] = ()
    # text replacements, (old, new) on the source or (old, new, header) on a header it includes (a name relative to
    # kernels_cu/): only the harness's deliberately broken kernels
    patches: tuple[tuple[str, ...], ...] = ()
    # in the `cuda` selection (--impl cuda, the perf grid); a variant not yet proven on a GPU runs only when
    # named (--impl cuda:VARIANT)
    default: bool = True
    # built by the engine's nvcc build and launched by its CUDA backend (engine/src/cuda); a spec whose op the
    # engine does not launch yet says False, and `kdtree-engine --device cuda` refuses that op
    in_engine: bool = True
    # a request's bits are the same in any batch (TV.3.3, TB.4.2); a variant that plans its work for the whole batch
    # says False, and the conformance report shows the batch-invariance clauses as not claimed for it
    batch_invariant: bool = True

    @property
    def name(self) -> str:
        return f"{self.slug}:{self.variant}"

    @property
    def entries(self) -> tuple[str, ...]:
        """Every entry function the spec's module must have: the main one, the others, the geometry query."""
        return (self.entry, *self.extra_entries, self.geometry)

    def all_defines(self) -> dict[str, str]:
        return {"KERNEL_BLOCK": str(self.block), **dict(self.defines)}

    def with_defines(self, variant: str, **defines: str) -> KernelSpec:
        """This spec as another variant whose defines are overridden or added (a design measured beside the
        registered one, or a build that reports what it did)."""
        merged = {**dict(self.defines), **defines}
        return dataclasses.replace(self, variant=variant, defines=tuple(merged.items()))

    def runs_on(self, arch: str) -> bool:
        """Whether a cubin of this spec loads on a GPU of `arch` (sm_90a code runs only on sm_90)."""
        return any(a == arch or (a.endswith("a") and a[:-1] == arch) for a in self.archs)


# No contraction in tree_build: its float64 scores follow the DDTree reference's operation order. A tree_build spec
# names its variant's type (TB_VARIANT, kernels_cu/tree_build_variants.cuh): the type holds the variant's strategy
# and policies (staging, candidates, the race's budget and hand-off), which the kernel, the Python wrapper and the
# engine all read from there (tree_build_launch in tree_build.cuh decides each launch); no policy is a define.
_EXACT = (("fma", False),)


def _tb(variant: str) -> tuple[tuple[str, str], ...]:
    return (("TB_VARIANT", variant),)


SPECS: tuple[KernelSpec, ...] = (
    KernelSpec(
        "tree_build",
        "heap_smem",
        "exact heap replay, warp-parallel pops; log-probs staged in shared memory when they fit",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        128,
        extra_entries=("tree_build_check_kernel",),
        defines=_tb("heap_smem"),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_build",
        "heap_global",
        "exact heap replay, warp-parallel pops; log-probs read from global memory",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        128,
        extra_entries=("tree_build_check_kernel",),
        defines=_tb("heap_global"),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_build",
        "lane_cached",
        "exact heap replay, each lane of one warp caching the best of its frontier slots: a pop is two warp "
        "max-reductions and a ballot; log-probs read from global memory (staging them cost occupancy at B = 1024)",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        128,
        extra_entries=("tree_build_check_kernel",),
        defines=_tb("lane_cached"),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_build",
        "select_verify",
        "the first B nodes selected level by level under a rising score threshold, ranked in parallel and "
        "checked to be what the heap pops (generator-closed, successors after the last, no rounding "
        "inversion); the lane_cached replay where a check fails or the candidates overflow",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        512,  # measured against 64, 128 and 256 threads (lab/PERF_NOTES.md): fastest at every cell
        extra_entries=("tree_build_check_kernel",),
        defines=_tb("select_verify"),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_build",
        "select_warp",
        "select_verify's selection and checks, its candidates generated by one warp: dominator-capped levels, "
        "tau raised by an 8-way search of the 20-bit key prefixes with two-pass order-keeping compaction, "
        "log-probs staged up to 32 KB; the lane_cached replay where a check fails or the candidates overflow",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        256,
        extra_entries=("tree_build_check_kernel",),
        defines=_tb("select_warp"),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_build",
        "select_race",
        "select_warp's selection (warp 0 generating, the other warps but warp 1 ranking and checking) raced by "
        "the lane_cached replay on warp 1, each in its own shared memory: the first to finish with the heap's "
        "tree wins, the loser stops at its next level or fourth pop",
        "tree_build.cu",
        "tree_build_kernel",
        "tree_build_geometry",
        256,
        extra_entries=("tree_build_check_kernel",),
        # the launch races from the type's race_min_b, B = 256 (below it lane_cached's build runs the batch:
        # tree_build_launch in tree_build.cuh; at B = 128 the replay alone was faster on every input measured, at 256
        # the race from bs 4 on); the knob race_min_b moves that budget (the conformance tests race at every budget)
        defines=_tb("select_race"),
        knobs=("race_min_b",),
        options=_EXACT,
    ),
    KernelSpec(
        "tree_accept",
        "pointer_jump",
        "parents by pointer jumping over the sibling lists, first match by atomicMin, register-staged commit",
        "tree_accept.cu",
        "tree_accept_kernel",
        "tree_accept_geometry",
        128,
        extra_entries=("tree_accept_check_kernel",),  # the deferred path's device checks (TA.4.4)
    ),
    KernelSpec(
        "tree_verify",
        "portable",
        "mma.sync bf16 tensor cores (fp32 accumulation) and an fp32 CUDA-core path, tree mask by selection, "
        "split-KV with an ordered combine",
        "tree_verify.cu",
        "tree_verify_bf16_kernel",
        "tree_verify_geometry_kernel",
        256,  # tv::kThreads in tree_verify.cuh (the wrapper launches with the header's value)
        extra_entries=(
            "tree_verify_f32_kernel",
            "tree_verify_combine_bf16_kernel",
            "tree_verify_combine_f32_kernel",
            "tree_verify_plan_kernel",
        ),
        knobs=("split_chunk",),
    ),
    KernelSpec(
        "tree_verify",
        "sm90a",
        "Hopper wgmma for S and P·V, two warpgroups each holding half of O over pairs of 64-key blocks (S of the "
        "even block by one, of the odd block by the other, each softmax overlapping the other's products), TMA "
        "copies of the paged cache per 64-column slab into two buffers; bf16 with page sizes 8, 16, 32 or "
        "multiples of 64 (other calls are served by portable); split-KV as portable, merged by portable's "
        "combine kernel",
        "tree_verify_sm90a.cu",
        "tree_verify_sm90a_kernel",
        "tree_verify_geometry_kernel",
        256,  # tv::kSm90aThreads (the wrapper launches with the header's value)
        archs=("sm_90a",),
        knobs=("split_chunk",),
    ),
    KernelSpec(
        "tree_verify",
        "sm90a_planned",
        "the sm90a kernel with its work planned for the whole batch (tree_verify.cuh's planned schedule: each "
        "request's splits in proportion to its length for the target of key blocks per CTA that a time model of "
        "the launch finds fastest over 1-4 waves, one CTA per unit of a table: one split a request where the batch "
        "fills the GPU, short splits over every SM at bs 1); deterministic for a given batch, not batch-invariant",
        "tree_verify_sm90a.cu",
        "tree_verify_sm90a_kernel",
        "tree_verify_geometry_kernel",
        256,  # tv::kSm90aThreads (the wrapper launches with the header's value)
        archs=("sm_90a",),
        knobs=("split_chunk",),
        batch_invariant=False,
        default=False,  # until certified on a GPU
        in_engine=False,
    ),
    *(
        KernelSpec(
            "draft_topk",
            variant,
            description,
            "draft_topk.cu",
            "draft_topk_row_bf16",
            "draft_topk_geometry",
            256,  # DT_THREADS in draft_topk.cuh (the wrapper launches with the header's value)
            defines=(("DT_PREFILTER", prefilter), *more),
            extra_entries=(
                "draft_topk_row_f16",
                "draft_topk_row_f32",
                "draft_topk_split_bf16",
                "draft_topk_split_f16",
                "draft_topk_split_f32",
                "draft_topk_merge",
            ),
            default=default,
        )
        for variant, prefilter, more, default, description in (
            (
                "radix",
                "0",
                (),
                True,  # certified on an H100 at 38b0d82 (reports/h100/2026-12-06)
                "one pass over the logits per split of 4,096 tokens (16-byte loads): each token a distinct 64-bit key "
                "(order-preserving logit bits above the complement of its id), the K largest by 8-bit radix passes "
                "over keys held in registers, the block's (max, Σ exp) in fp32; a merge kernel takes the row's K "
                "among the splits' candidates (the same passes), joins the splits' sums in double and sorts the K "
                "by a bitonic sort",
            ),
            (
                "prefilter",
                "1",
                (("DT_SPLIT_MIN_BLOCKS", "4"),),
                True,  # certified as prefilter_lb4 with radix on an H100 at 695263b (reports/h100/2026-12-06b)
                "radix's splits and keys, with the selection made on the few keys above a bound found without the "
                "passes (each warp's ceil(K/8)-th best thread maximum: at least K keys lie above their minimum, "
                "looked for on the 32-bit logit order in registers), ranked by counting in shared memory, sorted as "
                "they are ranked; the radix passes where more than 512 keys pass the bound; split kernels at 4 "
                "blocks per SM (64 registers)",
            ),
        )
    ),
)

# What an sm_120 GPU runs (RTX PRO 6000 Blackwell: 99 KB of shared memory per block, kernels_cu/arch_limits.cuh),
# built for sm_90 so that an H200 runs it through every clause: tree_verify's portable kernel with its small tiles
# and the tree_build variants whose staging or selection capacity follows the shared-memory limit, at that limit.
# (Built for sm_120 itself, the plain variants take the same budget from the arch: KB.1.7 checks both builds.)
SM120_SMEM_BUDGET = 99 * 1024
_BUDGET_BOUND = ("tree_build:heap_smem", "tree_build:select_verify", "tree_build:select_warp", "tree_build:select_race")
SPECS += tuple(
    dataclasses.replace(
        s,
        variant=f"{s.variant}_99k",
        description=f"{s.description}; built for sm_120's 99 KB per block (what an sm_120 GPU runs), on sm_90",
        defines=(*s.defines, ("KERNEL_SMEM_BUDGET", str(SM120_SMEM_BUDGET))),
        archs=("sm_90",),
    )
    for s in SPECS
    if s.name in (*_BUDGET_BOUND, "tree_verify:portable")
)


def sm120_twins(slug: str | None = None) -> list[KernelSpec]:
    """The `_99k` twins (built at another arch's shared-memory budget: what an sm_120 GPU runs), of one op or all."""
    return [s for s in SPECS if "KERNEL_SMEM_BUDGET" in s.all_defines() and slug in (None, s.slug)]


def engine_specs() -> list[KernelSpec]:
    """The specs the engine's nvcc build compiles and its CUDA backend launches (engine/cuda/kernel_specs.cmake)."""
    return [s for s in SPECS if s.in_engine]


def for_op(slug: str) -> list[KernelSpec]:
    return [s for s in SPECS if s.slug == slug]


def variants(default_only: bool = False) -> list[str]:
    """Variant names (of every op), or only those in the default `cuda` selection."""
    return list(dict.fromkeys(s.variant for s in SPECS if s.default or not default_only))


def get(slug: str, variant: str) -> KernelSpec:
    for s in SPECS:
        if s.slug == slug and s.variant == variant:
            return s
    raise KeyError(f"no kernel spec {slug}:{variant} (have: {', '.join(s.name for s in SPECS)})")


def replace_spec(new: KernelSpec) -> None:
    """Swap the spec of the same name (the harness's mutant plugin does this before any compile)."""
    global SPECS
    SPECS = tuple(new if s.name == new.name else s for s in SPECS)


def to_json() -> str:
    return json.dumps([{**dataclasses.asdict(s), "name": s.name} for s in SPECS], indent=1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--json"]:
        print(to_json())
    else:
        print("usage: python -m kernels_cu.specs --json", file=sys.stderr)
        sys.exit(2)

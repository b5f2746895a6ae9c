"""Fill the compiled-kernel cache ahead of a GPU run, on any machine (NVRTC needs no GPU): every registered spec, and
with --mutants every kernel mutant and planted slowdown (harness/kernel_mutants.py), and with --design both sm90a
tree_verify builds with a design's defines, as `python -m lab.tree_verify_race --design` builds them. A GPU run given
the same cache folder (KDTREE_CACHE_DIR, carried with the run) then loads each cubin where it would compile it: about
half a minute a tree_verify build, and the mutants stage compiles over three hundred.

  KDTREE_CACHE_DIR=.kcache python -m tools.precompile --arch sm_90 --mutants -j 2
  KDTREE_CACHE_DIR=.kcache python -m tools.precompile --ops tree_verify --arch sm_90a --design stsm=TV90_STSM_P

--arch keeps the archs that start with it (sm_90 keeps sm_90 and sm_90a; repeatable; default every arch a spec
targets). Exit 1 if any build fails (each failure printed with its spec and arch): a mutant whose patch no longer
matches its source fails here before it can fail a judging on the GPU.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
import time

from kernels_cu import runtime, specs
from kernels_cu.specs import KernelSpec


def builds(ops=None, archs=None, mutants=False, designs=()) -> list[tuple[KernelSpec, str]]:
    """The (spec, arch) pairs to compile: the registered specs of `ops` (all if None), their mutants' and the designs'
    builds, each for its archs that start with one of `archs` (all if None)."""
    from harness import kernel_mutants
    from lab.tree_verify_race import design_builds

    chosen = [s for s in specs.SPECS if ops is None or s.slug in ops]
    if mutants:
        for name in [*kernel_mutants.MUTANTS, *kernel_mutants.SLOWDOWNS]:
            chosen += [s for s in kernel_mutants.mutated_specs(name) if ops is None or s.slug in ops]
    for label, defines in designs:
        chosen += list(design_builds(label, defines).values())
    return [(s, a) for s in chosen for a in s.archs if archs is None or any(a.startswith(p) for p in archs)]


def _compile(job: tuple[KernelSpec, str]) -> tuple[str, str, bool, str]:
    spec, arch = job
    try:
        return spec.name, arch, runtime.compile_kernel(spec, arch).cached, ""
    except Exception as e:  # every failure is reported, the others still compile
        return spec.name, arch, False, f"{type(e).__name__}: {str(e)[:400]}"


def compile_all(jobs: list[tuple[KernelSpec, str]], workers: int = 1) -> tuple[int, int, list[str]]:
    """Compile every job (in `workers` processes): (newly compiled, found in the cache, failures)."""
    if workers > 1:
        with concurrent.futures.ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_compile, jobs))
    else:
        results = [_compile(j) for j in jobs]
    failed = [f"{name} ({arch}): {err}" for name, arch, _, err in results if err]
    cached = sum(1 for _, _, hit, err in results if hit and not err)
    return len(results) - cached - len(failed), cached, failed


def main(argv=None) -> int:
    from lab.tree_verify_race import design

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", help="comma-separated op slugs (default: every op)")
    ap.add_argument("--arch", action="append", help="keep archs starting with this (repeatable)")
    ap.add_argument("--mutants", action="store_true", help="also every kernel mutant and planted slowdown")
    ap.add_argument("--design", type=design, action="append", default=[],
                    help="LABEL=DEFINE[,DEFINE...]: both sm90a tree_verify builds with these defines")  # fmt: skip
    ap.add_argument("-j", "--jobs", type=int, default=1, help="compiling processes")
    a = ap.parse_args(argv)
    ops = set(a.ops.split(",")) if a.ops else None
    unknown = sorted(ops - {s.slug for s in specs.SPECS}) if ops else []
    if unknown:
        ap.error(f"--ops: no kernels for {unknown}")
    t0 = time.monotonic()
    jobs = builds(ops, a.arch, a.mutants, a.design)
    fresh, cached, failed = compile_all(jobs, a.jobs)
    print(f"{len(jobs)} builds into {runtime.cache_dir()}: {fresh} compiled, {cached} already cached, "
          f"{len(failed)} failed ({time.monotonic() - t0:.0f} s)")  # fmt: skip
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

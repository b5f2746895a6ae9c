"""Deliberately broken CUDA kernels: each is a textual patch of kernels_cu/<op>.cu applied at compile time
when KDTR_KERNEL_MUTANT names it (the cache key hashes the patched source). meta/test_kernel_mutants.py runs
the op's conformance tests with --impl cuda against each and requires a failure.

SLOWDOWNS are patched the same way but stay correct: each adds a fixed delay, so that the perf regression
gate can be shown to catch a real slowdown (tools/gpu_suite.sh's `gate` stage) and to pass a rerun."""

from __future__ import annotations

MUTANTS = {
    "k_tb_ties_reversed": ("tree_build", "if (wa != wb) return wa < wb;", "if (wa != wb) return wa > wb;"),
    "k_tb_reassociated_sibling": (
        "tree_build",
        "__dadd_rn(__dsub_rn(e.score, double(row[e.rank])), double(row[e.rank + 1]))",
        "__dadd_rn(e.score, __dsub_rn(double(row[e.rank + 1]), double(row[e.rank])))",
    ),
    "k_tb_mask_without_self": (
        "tree_build",
        "for (int j = i; j > 0; j = s_parent[j])",
        "for (int j = s_parent[i]; j > 0; j = s_parent[j])",
    ),
    "k_tb_inf_popped": ("tree_build", "if (s2 != -CUDART_INF) {", "if (true) {"),
    "k_tb_full_mask_offset": (
        "tree_build",
        "(long long)D * D * b + (long long)D * s_prefix_sum",
        "(long long)D * D * b + s_prefix_sum",
    ),
    "k_ta_last_match": ("tree_accept", "atomicMin(&s_match[parent], c)", "atomicMax(&s_match[parent], c)"),
    "k_ta_commit_source_off_by_one": (
        "tree_accept",
        "const int p = P + s_path[j + 1];",
        "const int p = P + s_path[j];",
    ),
    "k_ta_bonus_from_root": ("tree_accept", "bonus[b] = s_tgt[u];", "bonus[b] = s_tgt[0];"),
}


# Every thread of every block spins ~20000 SM cycles (about 10 µs at the H200's 1.98 GHz) before its work.
SPIN = "{ const long long t0 = clock64(); while (clock64() - t0 < 20000) { } }  // planted slowdown\n"
SLOWDOWNS = {
    "slow_tb_spin_10us": (
        "tree_build",
        "  const int tid = threadIdx.x;\n",
        "  const int tid = threadIdx.x;\n  " + SPIN,
    ),
}


def apply(slug: str, source: str, name: str) -> str:
    if name not in MUTANTS and name not in SLOWDOWNS:
        raise ValueError(f"KDTR_KERNEL_MUTANT={name!r} names no kernel mutant or slowdown")
    op, old, new = MUTANTS.get(name) or SLOWDOWNS[name]
    if op != slug:
        return source
    if old not in source:
        raise ValueError(
            f"kernel mutant {name}: text to patch not found in {slug}.cu (update harness/kernel_mutants.py)"
        )
    return source.replace(old, new, 1)

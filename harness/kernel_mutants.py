"""Deliberately broken CUDA kernels: each is a source patch on the op's kernel build specs (every variant of
that source), so the cache key hashes the patched source and nothing in kernels_cu knows about mutants.

A pytest plugin: `pytest -p harness.kernel_mutants --kernel-mutant NAME ...` swaps the patched specs in
before collection. meta/test_kernel_mutants.py runs the op's conformance tests with --impl cuda against each
mutant and requires a failure.
"""

from __future__ import annotations

import dataclasses

from kernels_cu import specs

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


def mutated_specs(name: str) -> list[specs.KernelSpec]:
    """The op's specs with the mutant's patch added (ValueError if the patch no longer matches the source:
    checked when the spec is compiled)."""
    slug, old, new = MUTANTS[name]
    return [dataclasses.replace(s, patches=(*s.patches, (old, new))) for s in specs.for_op(slug)]


def pytest_addoption(parser):
    parser.addoption("--kernel-mutant", help="compile the kernels of this mutant's op with its patch")


def pytest_configure(config):
    name = config.getoption("--kernel-mutant")
    if name:
        for spec in mutated_specs(name):
            specs.replace_spec(spec)

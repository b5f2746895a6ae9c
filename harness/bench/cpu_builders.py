"""The CPU tree builders tree_build is compared against: what a user runs instead of the kernel.

A comparator is one small function registered with @builder(name): given the inputs, it returns a
zero-argument callable that builds every request's tree (the callable is what is timed), or raises
Unavailable saying why it cannot run here. Every registered builder runs in every tree_build case.
"""

from __future__ import annotations

from collections.abc import Callable

from reference import tree_build as ref

from . import cpp_builder

BUILDERS: dict[str, Callable] = {}
NOTES: dict[str, str] = {}


def builder(name: str, note: str):
    def register(fn):
        BUILDERS[name] = fn
        NOTES[name] = note
        return fn

    return register


@builder("python_heapq", "the DDTree reference heap in Python, one request at a time (as SGLang's builders)")
def python_heapq(top_logp, top_ids, root_tokens, budget, prefix_lens):
    return lambda: ref.tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens)


@builder("cpp_1t", "the C++ engine's builder, one thread")
def cpp_one_thread(top_logp, top_ids, root_tokens, budget, prefix_lens):
    cpp_builder.load()
    return lambda: cpp_builder.tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, threads=1)


@builder("cpp_mt", "the C++ engine's builder, one thread per core")
def cpp_all_threads(top_logp, top_ids, root_tokens, budget, prefix_lens):
    cpp_builder.load()
    return lambda: cpp_builder.tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, threads=0)

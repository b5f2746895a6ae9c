"""The C++ CPU tree builder (the engine's libkdtree_cpu.so), loaded with ctypes: a comparator of tree_build.

Its C ABI (engine/include/kdtree/capi.h): kdtree_cpu_tree_build(top_logp, top_ids, root_tokens,
prefix_lens, bs, L, K_in, budget, with_full_mask, validate, threads, the eleven outputs of
reference.tree_build.Tree in FIELDS order, full_mask_len, err, err_len) -> 0 ok / 1 bad input / 2 internal.
Until the library is built, `load()` raises Unavailable("C++ builder not built ...") and the comparator is
recorded as skipped with that reason.
"""

from __future__ import annotations

import ctypes
import functools
import os
import pathlib

import numpy as np

from contract import Tree, full_mask_bytes

from . import Unavailable

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYMBOL = "kdtree_cpu_tree_build"


def candidates() -> list[pathlib.Path]:
    """Where the library may be: KDTR_ENGINE_LIB, else the setup's build folder."""
    if os.environ.get("KDTR_ENGINE_LIB"):
        return [pathlib.Path(os.environ["KDTR_ENGINE_LIB"])]
    build = pathlib.Path(os.environ.get("KDTR_BUILD_DIR", ROOT / "build"))
    return [build / "engine" / "libkdtree_cpu.so"]


@functools.cache
def load():
    for path in candidates():
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            if not hasattr(lib, SYMBOL):
                raise Unavailable(f"C++ builder: {path.name} has no {SYMBOL} (engine ABI changed?)")
            fn = getattr(lib, SYMBOL)
            fn.restype = ctypes.c_int
            return fn
    where = ", ".join(str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in candidates())
    raise Unavailable(f"C++ builder not built ({where}; `make setup` builds it once engine/ exists)")


def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, *, with_full_mask=False, threads: int = 1) -> Tree:
    """One call of the C++ builder with the contract's arguments (inputs trusted: validate = 0)."""
    fn = load()
    bs, L, K_in = top_logp.shape
    D, W = budget + 1, (budget + 32) // 32
    prefix_lens = np.ascontiguousarray(prefix_lens, np.int32)
    full = full_mask_bytes(prefix_lens, D) if with_full_mask else 0
    out = {f: np.empty((bs, D), np.int32) for f in ("parents", "depths", "tokens", "ranks", "positions",
                                                    "first_child", "next_sibling")}  # fmt: skip
    out["n_nodes"] = np.empty(bs, np.int32)
    out["scores"] = np.empty((bs, D), np.float64)
    out["visibility"] = np.empty((bs, D, W), np.uint32)
    out["full_mask"] = np.empty(full, np.uint8)
    err = ctypes.create_string_buffer(512)
    ptr = lambda a: ctypes.c_void_p(a.ctypes.data)
    ins = [np.ascontiguousarray(x) for x in (top_logp, top_ids, root_tokens)]
    rc = fn(*(ptr(a) for a in ins), ptr(prefix_lens), ctypes.c_int64(bs), ctypes.c_int64(L), ctypes.c_int64(K_in),
            ctypes.c_int64(budget), ctypes.c_int(int(with_full_mask)), ctypes.c_int(0), ctypes.c_int(threads),
            *(ptr(out[f]) for f in Tree.FIELDS), ctypes.c_int64(full), err, ctypes.c_size_t(len(err)))  # fmt: skip
    if rc != 0:
        raise RuntimeError(f"{SYMBOL} returned {rc}: {err.value.decode(errors='replace')}")
    out["full_mask"] = out["full_mask"].view(bool)
    return Tree(**out)

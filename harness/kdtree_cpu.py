"""ctypes wrapper of libkdtree_cpu.so, the engine's CPU tree builder, for in-process callers: the project's one
wrapper of the engine's C library (the tests, the benchmark's C++ comparator and tools/engine_numbers.py use it).

    lib = KdtreeCpu()                                   # harness.tools.library("kdtree_cpu"), or a path
    tree = lib.tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, threads=4)
    call = lib.bind(top_logp, top_ids, root_tokens, budget, prefix_lens, threads=2)
    call()                                              # a timing loop: the C call alone (arguments
    call.out.parents                                    # marshalled once, preallocated outputs)

The results are contract Trees, bit-exact with reference/tree_build.py (spec/tree_build.md). Inputs must already have
the contract's dtypes (float32 log-probs, int32 ids, roots and prefix lengths) and be C-contiguous;
nothing is converted silently. The library is found the way every built tool is (harness.tools: the build
folder, $KDTREE_BUILD_DIR or the repository's build/).
"""

from __future__ import annotations

import ctypes
import os
import pathlib

import numpy as np

from contract import Tree

from . import tools


class KdtreeCpuError(ValueError):
    """Bad input; the message is "ARGUMENT: problem" as in the contract."""


# the C builder writes the contract's result arrays in the contract's field order (capi.h)
FIELDS = Tree.FIELDS


_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int


class KdtreeCpu:
    """The loaded library."""

    def __init__(self, path: str | os.PathLike | None = None):
        """Load the library at `path`, or the built one (tools.ToolMissing when `make setup` has not built it)."""
        self.path = pathlib.Path(path) if path is not None else tools.library("kdtree_cpu")
        self._lib = ctypes.CDLL(str(self.path))
        self._lib.kdtree_cpu_version.restype = ctypes.c_char_p
        self._lib.kdtree_cpu_full_mask_size.argtypes = [_P, _I64, _I64]
        self._lib.kdtree_cpu_full_mask_size.restype = _I64
        f = self._lib.kdtree_cpu_tree_build
        f.argtypes = [_P] * 4 + [_I64] * 4 + [_INT] * 3 + [_P] * 11 + [_I64, ctypes.c_char_p, ctypes.c_size_t]
        f.restype = _INT
        self._lib.kdtree_cpu_draft_noise.argtypes = [ctypes.c_uint64, _I64, _I64, _I64, _P]
        self._lib.kdtree_cpu_draft_noise.restype = None
        self._err = ctypes.create_string_buffer(1024)

    @property
    def version(self) -> str:
        return self._lib.kdtree_cpu_version().decode()

    def draft_noise(self, seed: int, P: int, d: int, vocab: int) -> np.ndarray:
        """The test drafter's noise n(seed, P, d, v) for v < vocab (reference/drafter.py::noise)."""
        out = np.empty(vocab, np.float64)
        self._lib.kdtree_cpu_draft_noise(seed, P, d, vocab, out.ctypes.data)
        return out

    def full_mask_size(self, prefix_lens: np.ndarray, budget: int) -> int:
        p = _checked("prefix_lens", prefix_lens, np.int32, 1)
        return int(self._lib.kdtree_cpu_full_mask_size(p.ctypes.data, p.shape[0], int(budget)))

    def outputs(self, bs: int, budget: int, full_mask_len: int = 0) -> Tree:
        """Output arrays for bs requests of budget B (full_mask_len bools for the FULL_MASK layout)."""
        D = 1 + int(budget)
        W = (D + 31) // 32
        i32 = lambda: np.empty((bs, D), np.int32)
        return Tree(
            np.empty(bs, np.int32),
            i32(),
            i32(),
            i32(),
            i32(),
            np.empty((bs, D), np.float64),
            np.empty((bs, D, W), np.uint32),
            i32(),
            i32(),
            i32(),
            np.zeros(full_mask_len, bool),
        )

    def tree_build(
        self,
        top_logp: np.ndarray,
        top_ids: np.ndarray,
        root_tokens: np.ndarray,
        budget: int,
        prefix_lens: np.ndarray | None = None,
        *,
        with_full_mask: bool = False,
        threads: int = 1,
        validate: bool = True,
        out: Tree | None = None,
    ) -> Tree:
        """Build bs trees on `threads` threads (0 = one per core). With validate=False the caller vouches
        for the values (TB.1); dtypes, ranks and shapes are always checked here."""
        call = self.bind(
            top_logp,
            top_ids,
            root_tokens,
            budget,
            prefix_lens,
            with_full_mask=with_full_mask,
            threads=threads,
            validate=validate,
            out=out,
        )
        return call()

    def bind(
        self,
        top_logp: np.ndarray,
        top_ids: np.ndarray,
        root_tokens: np.ndarray,
        budget: int,
        prefix_lens: np.ndarray | None = None,
        *,
        with_full_mask: bool = False,
        threads: int = 1,
        validate: bool = True,
        out: Tree | None = None,
    ) -> BoundCall:
        """Check and marshal the arguments once; the returned callable runs the C builder alone (for timing
        loops) and returns its contract Tree. The arrays must stay alive and unmoved while it is used."""
        lp = _checked("top_logp", top_logp, np.float32, 3)
        bs, L, K_in = lp.shape
        ids = _checked("top_ids", top_ids, np.int32, 3)
        if ids.shape != lp.shape:
            raise KdtreeCpuError(f"top_ids: shape {ids.shape}, expected {lp.shape}")
        roots = _checked("root_tokens", root_tokens, np.int32, 1)
        if roots.shape != (bs,):
            raise KdtreeCpuError(f"root_tokens: shape {roots.shape}, expected {(bs,)}")
        pre = np.zeros(bs, np.int32) if prefix_lens is None else _checked("prefix_lens", prefix_lens, np.int32, 1)
        if pre.shape != (bs,):
            raise KdtreeCpuError(f"prefix_lens: shape {pre.shape}, expected {(bs,)}")
        if isinstance(budget, (bool, np.bool_)) or not isinstance(budget, (int, np.integer)):
            raise KdtreeCpuError(f"budget: expected an integer, got {type(budget).__name__}")
        if not 0 <= int(budget) <= 1024:
            raise KdtreeCpuError(f"budget: {int(budget)} is outside 0..1024")
        full_len = self.full_mask_size(pre, int(budget)) if with_full_mask else 0
        if out is None:
            out = self.outputs(bs, int(budget), full_len)  # right by construction: checking it costs a call's time
        else:
            _check_outputs(out, bs, int(budget), full_len)
        if not with_full_mask and out.full_mask.shape != (0,):
            out.full_mask = np.zeros(0, bool)
        args = (
            lp.ctypes.data,
            ids.ctypes.data,
            roots.ctypes.data,
            pre.ctypes.data,
            bs,
            L,
            K_in,
            int(budget),
            int(bool(with_full_mask)),
            int(bool(validate)),
            int(threads),
            *(getattr(out, f).ctypes.data for f in FIELDS),
            out.full_mask.shape[0],
            self._err,
            len(self._err),
        )
        return BoundCall(self, args, out, (lp, ids, roots, pre))


class BoundCall:
    """One tree_build call with its arguments marshalled (KdtreeCpu.bind)."""

    def __init__(self, lib: KdtreeCpu, args: tuple, out: Tree, keep: tuple):
        self._fn, self._args, self._err = lib._lib.kdtree_cpu_tree_build, args, lib._err
        self.out = out
        self._keep = keep  # the inputs the pointers refer to

    def __call__(self) -> Tree:
        if self._fn(*self._args):
            raise KdtreeCpuError(self._err.value.decode(errors="replace"))
        return self.out


def _checked(name: str, a, dtype, ndim: int) -> np.ndarray:
    if not isinstance(a, np.ndarray):
        raise KdtreeCpuError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.dtype != np.dtype(dtype):
        raise KdtreeCpuError(f"{name}: dtype {a.dtype}, expected {np.dtype(dtype)}")
    if a.ndim != ndim:
        raise KdtreeCpuError(f"{name}: shape {a.shape} has {a.ndim} dims, expected {ndim}")
    if not a.flags.c_contiguous:
        raise KdtreeCpuError(f"{name}: must be C-contiguous")
    return a


def _check_outputs(out: Tree, bs: int, budget: int, full_len: int) -> None:
    D = 1 + budget
    for f in FIELDS:
        a = getattr(out, f)
        if f == "full_mask":
            dtype, ok = np.dtype(bool), a.ndim == 1 and a.shape[0] >= full_len
        else:
            dtype = np.dtype(np.float64 if f == "scores" else np.uint32 if f == "visibility" else np.int32)
            shape = (bs,) if f == "n_nodes" else (bs, D, (D + 31) // 32) if f == "visibility" else (bs, D)
            ok = a.shape == shape
        if not ok or a.dtype != dtype or not a.flags.c_contiguous or not a.flags.writeable:
            raise KdtreeCpuError(f"out.{f}: {a.dtype} {a.shape} does not fit bs={bs}, budget={budget}")

"""The kernels as PyTorch operators: `torch.ops.kdtree.draft_topk`, `tree_build`, `tree_verify`, `tree_accept` and
`tree_accept_commit` (the walk with its in-place commit and, optionally, the step's advance), each the capturable
(deferred) path of the certified kernel (kernels_cu.ops.prepare_deferred: DT.4.5, TB.4.5, TV.3.7, TA.4.4, TA.4.5)
enqueued on torch's current stream, with a fake implementation (output shapes, dtypes and device from the contract,
no value read) so that torch.compile traces them and a torch.cuda.CUDAGraph captures them.

Errors. The shape-only checks run when an operator is called (the contract's InputError naming the argument). The
value checks run on the device and set the caller's `error_flag` (int32 [1], shared by every operator of a round, never
cleared by them: a value any of them refuses stops the commit and the advance of that round and of every later one,
as in kernels_cu.step.Step). `check(error_flag)` waits and raises the contract's named error of the first operator, in
step order, whose last call over that flag the contract refuses; outputs are meaningful only once check() passed.

Calls are prepared once per shape. prepare_deferred validates, plans, loads the kernels and allocates the call's scratch
(and synchronises), so an operator keeps one prepared call per (op, variant, shapes, dtypes, aliasing, scalars; the
cache's address for tree_verify, whose sm90a TMA descriptor holds it) and launches it on each call's own tensors
(kernels_cu.arrays.launching: the prepared call's pointer arguments replaced by this call's). Outputs are fresh
tensors from torch's caching allocator (a capture's private pool inside a CUDA graph). A call of a new shape cannot be
prepared while a graph is being captured: run it once first (the warm-up torch.cuda.graph asks for anyway). Calls of
one shape share their scratch: do not run two of them at once on different streams. A prepared call that ran inside a
capture is kept for the life of the process (a graph may replay it); others are dropped oldest first past
MAX_ENTRIES or MAX_BYTES (after a device synchronisation).

Imports torch, the contract and kernels_cu, never the harness or the references (meta/test_layers.py).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading

import numpy as np
import torch

import contract
from contract import BF16, DRAFT_TOPK, TREE_ACCEPT, TREE_BUILD, TREE_VERIFY, InputError, limits
from contract.step import OPS as STEP_OPS

NAMESPACE = "kdtree"
# Outputs as torch holds them (kernels_cu.arrays.Staging.output): uint32 bits in int32.
_TORCH_DTYPES = {"int32": torch.int32, "float32": torch.float32, "float64": torch.float64, "uint32": torch.int32}
_NUMPY_DTYPES = {torch.float32: np.dtype(np.float32), torch.float16: np.dtype(np.float16), torch.bfloat16: BF16,
                 torch.float64: np.dtype(np.float64), torch.int32: np.dtype(np.int32),
                 torch.int64: np.dtype(np.int64), torch.int16: np.dtype(np.int16), torch.int8: np.dtype(np.int8),
                 torch.uint8: np.dtype(np.uint8), torch.bool: np.dtype(np.bool_)}  # fmt: skip
if hasattr(torch, "uint32"):
    _NUMPY_DTYPES[torch.uint32] = np.dtype(np.uint32)
MAX_ENTRIES = 64  # prepared calls kept (those captured in a graph are kept beyond it)
MAX_BYTES = 4 << 30  # the device memory they may hold (their scratch and the tensors they were prepared on)

# The operators' outputs, in the order they return them: the contract's fields (tree_build without FULL_MASK, whose
# size reads prefix_lens' values: the deferred path refuses it).
OUTPUTS = {
    "draft_topk": contract.TopK.FIELDS,
    "tree_build": tuple(f for f in contract.Tree.FIELDS if f != "full_mask"),
    "tree_verify": contract.Verified.FIELDS,
    "tree_accept": contract.Accept.FIELDS,
}
SCHEMAS = {
    "draft_topk": "(Tensor logits, SymInt K, Tensor(a!) error_flag, str variant='') -> (Tensor, Tensor)",
    "tree_build": "(Tensor top_logp, Tensor top_ids, Tensor root_tokens, SymInt budget, Tensor? prefix_lens, "
    "Tensor(a!) error_flag, str variant='') -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
    "Tensor, Tensor)",
    "tree_verify": "(Tensor q, Tensor kv_cache, Tensor block_table, Tensor prefix_lens, Tensor visibility, "
    "float softmax_scale, SymInt max_context, Tensor(a!) error_flag, str variant='') -> (Tensor, Tensor)",
    "tree_accept": "(Tensor tokens, Tensor first_child, Tensor next_sibling, Tensor target_tokens, SymInt max_depth, "
    "Tensor(a!) error_flag, str variant='') -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "tree_accept_commit": "(Tensor tokens, Tensor first_child, Tensor next_sibling, Tensor target_tokens, "
    "SymInt max_depth, Tensor(b!) kv_cache, Tensor block_table, Tensor(c!) prefix_lens, Tensor(a!) error_flag, "
    "Tensor(d!)? root_tokens, str variant='') -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
}
CONTRACTS = {"draft_topk": DRAFT_TOPK, "tree_build": TREE_BUILD, "tree_verify": TREE_VERIFY,
             "tree_accept": TREE_ACCEPT, "tree_accept_commit": TREE_ACCEPT}  # fmt: skip


# ---- shapes (the fake implementations and the real ones alike) ---------------------------------------------------
def numpy_dtype(arg: str, t) -> np.dtype:
    """A tensor's dtype as the contract names it (InputError naming `arg` for one it cannot name)."""
    if t.dtype in _NUMPY_DTYPES:
        return _NUMPY_DTYPES[t.dtype]
    try:  # one the contract refuses by name (uint16, complex64...)
        return np.dtype(str(t.dtype).removeprefix("torch."))
    except TypeError:
        raise InputError(f"{arg}: dtype {t.dtype} is not one the contract takes") from None


def _infos(c: contract.OpContract, named: dict) -> dict:
    """The call's arguments for validate_shapes(): each tensor's shape and dtype (contract.ArrayInfo)."""
    return {k: contract.ArrayInfo(tuple(int(n) for n in v.shape), numpy_dtype(k, v)) if isinstance(v, torch.Tensor)
            else v for k, v in named.items()}  # fmt: skip


def _concrete(named: dict) -> bool:
    return all(isinstance(n, int) for v in named.values() if isinstance(v, torch.Tensor) for n in v.shape)


def output_meta(slug: str, named: dict) -> list[tuple[str, tuple, torch.dtype]]:
    """[(output, shape, torch dtype)] of an operator's call, from the contract's outputs and the call's shapes and int
    arguments (symbolic sizes pass through: torch.compile's dynamic shapes)."""
    c = CONTRACTS[slug]
    dims: dict = {}
    for a in c.args:
        v = named.get(a.name)
        if isinstance(v, torch.Tensor):
            for s, n in zip(a.shape, v.shape):
                if isinstance(s, str):
                    dims.setdefault(s, n)
        elif a.kind == "int":
            dims[a.name] = v
    if c is TREE_BUILD:
        dims.update(D=1 + named["budget"], W=(named["budget"] + 32) // 32)
    if c is TREE_ACCEPT:
        dims["1+L"] = 1 + named["max_depth"]
    out = []
    for o in c.outputs:
        if o.name not in OUTPUTS[c.slug]:
            continue
        shape = tuple(dims[s] if isinstance(s, str) else s for s in o.shape)
        dtype = named["q"].dtype if o.dtype == "T" else _TORCH_DTYPES[o.dtype]
        out.append((o.name, shape, dtype))
    return out


def _fake(slug: str, named: dict) -> tuple:
    """An operator's outputs as empty tensors on its first input's device; where the shapes are concrete, the
    contract's shape-only checks first (the InputError the operator itself would raise)."""
    if _concrete(named):
        _check_shapes(slug, named)
    like = next(v for v in named.values() if isinstance(v, torch.Tensor))
    return tuple(like.new_empty(shape, dtype=dtype) for _, shape, dtype in output_meta(slug, named))


def _contract_args(slug: str, named: dict) -> tuple[dict, dict]:
    """(the contract's arguments, the deferred path's own ones) of an operator's call."""
    args = {a.name: named[a.name] for a in CONTRACTS[slug].args if a.name in named}  # the others: their defaults
    vis = args.get("visibility") if slug == "tree_verify" else None
    if isinstance(vis, torch.Tensor) and vis.dtype == torch.int32:
        args["visibility"] = _as_uint32(vis)  # tree_build's visibility, as torch holds uint32 bits
    extra = {"error_flag": named["error_flag"]}
    if slug == "tree_verify":
        extra["max_context"] = named["max_context"]
    if slug == "tree_accept_commit" and named.get("root_tokens") is not None:
        extra["advance_roots"] = named["root_tokens"]
    return args, extra


def _as_uint32(t):
    if not hasattr(torch, "uint32"):
        raise InputError(f"visibility: torch {torch.__version__} has no uint32 (2.3 or later)")
    return t.view(torch.uint32)


def _check_shapes(slug: str, named: dict) -> None:
    """The contract's shape-only checks of the call (InputError naming the argument), and tree_verify's max_context."""
    args, extra = _contract_args(slug, named)
    checked = CONTRACTS[slug].validate_shapes(**_infos(CONTRACTS[slug], args))
    if slug == "tree_verify":
        contract.checks.integer("max_context", extra["max_context"], checked.dims["Q"], limits.MAX_CONTEXT)
    flag = named["error_flag"]
    if not isinstance(flag, torch.Tensor) or tuple(flag.shape) != (1,) or flag.dtype not in (torch.int32,):
        what = type(flag).__name__
        if isinstance(flag, torch.Tensor):
            what = f"shape {tuple(flag.shape)} dtype {flag.dtype}"
        raise InputError(f"error_flag: {what}, expected an int32 tensor of shape (1,) (new_error_flag())")
    if slug == "tree_accept_commit":
        roots = named.get("root_tokens")
        if roots is not None and (roots.dtype != torch.int32 or tuple(roots.shape) != (checked.dims["bs"],)):
            raise InputError(f"root_tokens: shape {tuple(roots.shape)} dtype {roots.dtype}, expected int32 "
                             f"[{checked.dims['bs']}] (one per request)")  # fmt: skip


# ---- prepared calls ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class _Entry:
    deferred: object  # kernels_cu.arrays.Deferred
    addresses: tuple[int, ...]  # the tensors' addresses it was prepared with: the roles' then the outputs'
    nbytes: int
    pinned: bool = False  # ran inside a capture: a graph may replay it


class _Prepared:
    """The prepared calls by key, oldest first."""

    def __init__(self):
        self.entries: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            e = self.entries.get(key)
            if e is not None:
                self.entries.move_to_end(key)
            return e

    def put(self, key, entry: _Entry) -> None:
        with self.lock:
            self.entries[key] = entry
            dropped = []
            while len(self.entries) > 1:
                free = [k for k, e in self.entries.items() if not e.pinned and k != key]
                over = len(self.entries) > MAX_ENTRIES or sum(e.nbytes for e in self.entries.values()) > MAX_BYTES
                if not (free and over):
                    break
                dropped.append(self.entries.pop(free[0]))
        if dropped:
            torch.cuda.synchronize()  # their last launches may still be running on torch's streams
            for e in dropped:
                e.deferred.staging.close()

    def clear(self) -> None:
        """Drop every prepared call that no capture ran (tests; memory)."""
        with self.lock:
            dropped = [self.entries.pop(k) for k, e in list(self.entries.items()) if not e.pinned]
        if dropped:
            torch.cuda.synchronize()
            for e in dropped:
                e.deferred.staging.close()


PREPARED = _Prepared()


@functools.cache
def variant_of(slug: str, variant: str) -> str:
    """The kernel variant an operator runs: `variant`, or kernels_cu.step's default for the op on this GPU."""
    from kernels_cu import step

    return step._variants({slug: variant} if variant else {})[slug]


@functools.cache
def _stream(handle: int):
    from cuda.core import Stream

    return Stream.from_handle(handle)


def _device_of(slug: str, tensors: dict) -> torch.device:
    """Every tensor on the GPU the kernels run on, C-contiguous (InputError naming the first that is not)."""
    from kernels_cu import runtime

    for name, t in tensors.items():
        if t.device.type != "cuda":
            raise InputError(f"{name}: a tensor on {t.device}; the operators take CUDA tensors")
    dev = torch.device("cuda", int(runtime.gpu().device.device_id))
    for name, t in tensors.items():
        if t.device != dev:
            raise InputError(f"{name}: a tensor on {t.device}; the kernels run on {dev}")
        if not t.is_contiguous():
            raise InputError(f"{name}: device arrays must be C-contiguous")
    for name in ("q", "kv_cache"):  # the kernels copy 16-byte vectors (kernels_cu.arrays.check_aligned)
        if name in tensors and slug != "draft_topk" and tensors[name].data_ptr() % 16:
            raise InputError(f"{name}: device pointer 0x{tensors[name].data_ptr():x} is not 16-byte aligned")
    return dev


def _key(slug: str, variant: str, named: dict, tensors: dict) -> tuple:
    ptrs = [t.data_ptr() for t in tensors.values()]
    aliases = tuple(ptrs.index(p) if p else -1 for p in ptrs)
    shapes = tuple((k, tuple(t.shape), t.dtype) for k, t in tensors.items())
    scalars = tuple((k, v) for k, v in named.items() if not isinstance(v, torch.Tensor))
    cache = named["kv_cache"].data_ptr() if slug == "tree_verify" else 0
    return slug, variant, shapes, aliases, scalars, cache


def _prepare(slug: str, variant: str, args: dict, extra: dict, outputs: list) -> _Entry:
    from kernels_cu import ops

    d = ops.prepare_deferred("tree_accept" if slug == "tree_accept_commit" else slug, variant, **args, **extra)
    try:
        d.staging.g.stream.sync()  # its staged inputs are on the device before a launch on another stream
        mine = d.outputs()
        outs = [getattr(mine, name) for name, _, _ in outputs]
    except BaseException:
        d.staging.close()
        raise
    tensors = _tensors(args, extra)
    nbytes = sum(t.numel() * t.element_size() for t in (*tensors.values(), *outs))
    return _Entry(d, tuple(t.data_ptr() for t in (*tensors.values(), *outs)), nbytes)


def _tensors(args: dict, extra: dict) -> dict:
    return {k: v for k, v in {**args, **extra}.items() if isinstance(v, torch.Tensor)}


def _launch(slug: str, named: dict) -> tuple:
    """One operator call: shape checks, the prepared call (made on a miss), fresh outputs, the launch on torch's
    current stream over this call's tensors."""
    asked = named.pop("variant")
    args, extra = _contract_args(slug, named)
    tensors = _tensors(args, extra)
    dev = _device_of(slug, tensors)
    variant = variant_of(slug.removesuffix("_commit"), asked)
    key = _key(slug, variant, {**args, **extra}, tensors)
    meta = output_meta(slug, named)
    capturing = torch.cuda.is_current_stream_capturing()
    entry = PREPARED.get(key)
    if entry is None:
        _check_shapes(slug, named)
        if capturing:
            raise RuntimeError(f"{NAMESPACE}.{slug}: a call of these shapes is being captured before it ran once: run "
                               "the captured code once outside the capture first (its warm-up), where the call is "
                               "prepared (kdtree_torch.ops)")  # fmt: skip
        entry = _prepare(slug, variant, args, extra, meta)
        PREPARED.put(key, entry)
    if capturing:
        entry.pinned = True
    outs = tuple(torch.empty(shape, dtype=dtype, device=dev) for _, shape, dtype in meta)
    now = [t.data_ptr() for t in (*tensors.values(), *outs)]
    moved = {old: new for old, new in zip(entry.addresses, now) if old and old != new}
    RECORDS.record(named["error_flag"], slug, variant, args, extra)
    from kernels_cu import arrays

    with arrays.launching(_stream(torch.cuda.current_stream(dev).cuda_stream), moved):
        entry.deferred.launch()
    return outs


# ---- the error flag ---------------------------------------------------------------------------------------------
class _Records:
    """The last call of each op over each error flag (by address), for check() to name a refusal: host copies of
    its inputs as they are when check() runs go through the op's own deferred revalidation."""

    def __init__(self):
        self.by_flag: dict[int, dict] = {}
        self.failed: dict[int, BaseException] = {}  # what check() raised over a flag, until reset()
        self.lock = threading.Lock()

    def record(self, flag, slug, variant, args, extra) -> None:
        with self.lock:
            self.by_flag.setdefault(flag.data_ptr(), {})[slug] = (variant, args, extra)

    def forget(self, flag) -> None:
        with self.lock:
            self.by_flag.pop(flag.data_ptr(), None)
            self.failed.pop(flag.data_ptr(), None)

    def calls(self, flag) -> dict:
        with self.lock:
            return dict(self.by_flag.get(flag.data_ptr(), {}))


RECORDS = _Records()


def new_error_flag(device=None) -> torch.Tensor:
    """A zeroed error flag (int32 [1]) for a round's operators, on `device` (default: the current CUDA device), with
    no earlier call recorded at its address."""
    flag = torch.zeros(1, dtype=torch.int32, device=device if device is not None else "cuda")
    RECORDS.forget(flag)
    return flag


def reset(error_flag) -> None:
    """Zero the flag (later calls commit and advance again) and the error check() keeps raising; the calls recorded
    over it stay (a captured graph's are recorded once, at its capture)."""
    error_flag.zero_()
    with RECORDS.lock:
        RECORDS.failed.pop(error_flag.data_ptr(), None)


def check(error_flag) -> None:
    """Wait for torch's current stream; where `error_flag` is set, raise the contract's named InputError of the first
    op (in step order) whose last call over this flag the contract refuses on its inputs as they are now (the op's own
    deferred revalidation, tree_verify's max_context included). The flag stays set until reset(), and the error once
    raised is raised again until then (later calls overwrite the inputs it names)."""
    if not int(error_flag.item()):
        return
    failed = RECORDS.failed.get(error_flag.data_ptr())
    if failed is not None:
        raise failed
    try:
        _name_the_refusal(error_flag)
    except (InputError, RuntimeError) as e:
        RECORDS.failed[error_flag.data_ptr()] = e
        raise


def _name_the_refusal(error_flag) -> None:
    from kernels_cu import ops

    calls = RECORDS.calls(error_flag)
    for slug in sorted(calls, key=lambda s: STEP_OPS.index(s.removesuffix("_commit"))):
        variant, args, extra = calls[slug]
        base = slug.removesuffix("_commit")
        d = ops.prepare_deferred(base, variant, **args, **{k: v for k, v in extra.items() if k != "error_flag"})
        try:
            d.validate_on_host()
        except InputError as e:
            e.add_note(f"{NAMESPACE}.{slug}: refused on the device (error_flag set); no later call over this flag "
                       "commits or advances until reset()")  # fmt: skip
            raise
        finally:
            d.staging.close()
    raise RuntimeError(
        f"{NAMESPACE}: error_flag is set, but the last calls recorded over it ({', '.join(calls) or 'none'}) pass the "
        "contract on their inputs as they are now: a later call overwrote them, or the flag was set by other code "
        "(check() after each round names the error; reset() clears it)"
    )


# ---- the operators ----------------------------------------------------------------------------------------------
def _define(slug: str, mutates: tuple[str, ...], fn):
    """Register fn as torch.ops.kdtree.<slug> with its fake implementation."""
    op = torch.library.custom_op(f"{NAMESPACE}::{slug}", fn, mutates_args=mutates, schema=SCHEMAS[slug])
    op.register_fake(lambda *a, **k: _fake(slug, _bind(fn, a, k)))
    return op


def _bind(fn, args, kwargs) -> dict:
    import inspect

    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return dict(b.arguments)


def draft_topk(logits, K, error_flag, variant=""):
    """The drafter's logits [bs, L, V] (bf16, fp16 or fp32) to each depth's K best log-probs (float32 [bs, L, K]) and
    token ids (int32 [bs, L, K]): kernels_cu's draft_topk (DT.4.5)."""
    return _launch("draft_topk", dict(locals()))


def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens, error_flag, variant=""):
    """The DDTree best-first tree of `budget` nodes: (n_nodes, parents, depths, tokens, ranks, scores, visibility
    (uint32 bits held in int32), positions, first_child, next_sibling), as contract.Tree orders them (TB.4.5)."""
    return _launch("tree_build", dict(locals()))


def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale, max_context, error_flag, variant=""):
    """Tree-verify attention over the paged latent cache: (out [bs, Q, H, 512] in q's dtype, lse float32 [bs, Q, H]),
    for requests of at most `max_context` keys (prefix_len + Q; TV.3.7). visibility: uint32, or its bits in int32."""
    return _launch("tree_verify", dict(locals()))


def tree_accept(tokens, first_child, next_sibling, target_tokens, max_depth, error_flag, variant=""):
    """The greedy walk of the verified tree, without a commit: (accept_len, accept_path, emitted, bonus, new_lens)
    (TA.4.4)."""
    return _launch("tree_accept", dict(locals()))


def tree_accept_commit(tokens, first_child, next_sibling, target_tokens, max_depth, kv_cache, block_table, prefix_lens,
                       error_flag, root_tokens, variant=""):  # fmt: skip
    """tree_accept with its commit into kv_cache in place (TA.4.4); with `root_tokens` also the step's advance, in
    place after the commit: prefix_lens <- new_lens, root_tokens <- bonus (TA.4.5). Nothing is walked, committed or
    advanced where error_flag is set. root_tokens has no default (None: no advance): torch 2.11's in-place bookkeeping
    of a custom operator indexes the positional arguments by the schema's position of each mutated one, so a mutated
    argument left to its default made every call an IndexError there."""
    return _launch("tree_accept_commit", dict(locals()))


MUTATES = {
    "draft_topk": ("error_flag",),
    "tree_build": ("error_flag",),
    "tree_verify": ("error_flag",),
    "tree_accept": ("error_flag",),
    "tree_accept_commit": ("kv_cache", "prefix_lens", "error_flag", "root_tokens"),
}
_FUNCTIONS = {"draft_topk": draft_topk, "tree_build": tree_build, "tree_verify": tree_verify,
              "tree_accept": tree_accept, "tree_accept_commit": tree_accept_commit}  # fmt: skip
OPERATORS = {slug: _define(slug, MUTATES[slug], fn) for slug, fn in _FUNCTIONS.items()}

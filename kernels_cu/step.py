"""One DDTree step on the device (spec/step.md): draft_topk → tree_build → tree_verify → tree_accept, the accept's
commit into the latent cache and the advance of each request's prefix length and root token, captured once into a
CUDA graph and replayed round after round.

Each op is its deferred path (`ops.prepare_deferred`: shape checks on the host now, value checks on the device), and
all four share one error flag that no launch clears: a value any op refuses stops that round's walk, commit and
advance and every later round's, until `reset()`. A round's host work is writing its inputs (the drafter's logits,
the queries, the target's tokens) into the step's buffers and one graph launch: no synchronisation, no host copy.
The target model is not run here: its queries and its greedy tokens are inputs, and the tree rows' latent KV are
whatever the cache holds at prefix_len + node (a model's layers would have written them before the verify).
"""

from __future__ import annotations

import numpy as np

from contract import InputError, limits
from contract import step as contract
from contract.checks import is_device_array

from . import ops, runtime, specs
from .arrays import DeviceArray, Staging, check, device_only, device_vector, driver, library_holds

OPS = contract.OPS
# The variant each op runs unless `variants` names another: the fastest certified one on Hopper at a step's shapes
# (docs/BENCHMARKS.md); tree_verify's sm90a where the GPU runs it, else the portable kernel.
DEFAULT_VARIANTS = {"draft_topk": "prefilter", "tree_build": "select_race", "tree_verify": ("sm90a", "portable"),
                    "tree_accept": "pointer_jump"}  # fmt: skip


class Step:
    """A DDTree step over the caller's device cache (cupy or torch; bf16 needs torch), replayed round by round.

    kv_cache, block_table: the latent cache and its pages (TV.1 / TA.1.3's layout), read and committed in place.
    prefix_lens, root_tokens: int32 [bs] device arrays, each request's committed length and last committed token;
    every accepted round advances them in place (prefix_lens ← new_lens, root_tokens ← bonus).
    L, V, K, budget, H: depths drafted, vocabulary, candidates per depth, non-root tree nodes, heads.
    max_context: the most keys (prefix_len + 1 + budget) of any request in any round (tree_verify's TV.3.7 plan).
    variants: {op slug: kernel variant} where not the op's default.

    Per round: `round(logits=…, q=…, target_tokens=…)` (or `write(…)` then `replay()`); `check()` waits and raises
    the named error of a refused round; `results()` checks, then gives the last round's outputs (device arrays)."""

    def __init__(self, kv_cache, block_table, prefix_lens, root_tokens, *, L, V, K, budget, H, softmax_scale,
                 max_context, logits_dtype="float32", variants=None):  # fmt: skip
        args = contract.check_setup(L=L, V=V, K=K, budget=budget, H=H, logits_dtype=logits_dtype)
        self.L, self.V, self.K, self.budget, self.H = (args[k] for k in ("L", "V", "K", "budget", "H"))
        cache = device_only("kv_cache", kv_cache)
        library_holds("logits_dtype", cache.lib, args["logits_dtype"])
        library_holds("kv_cache", cache.lib, np.dtype(np.uint32))  # the tree's visibility, between two ops
        bs = device_vector("prefix_lens", prefix_lens).shape[0]
        device_vector("root_tokens", root_tokens, bs)
        variants = _variants(variants or {})
        D = 1 + self.budget
        self.kv_cache, self.block_table = kv_cache, block_table
        self.prefix_lens, self.root_tokens = prefix_lens, root_tokens
        self.round_count = 0
        self._failed: BaseException | None = None
        self._graph = None
        self._ops: dict = {}
        self.staging = Staging(cache.lib, kv_cache)
        try:
            st = self.staging
            st.sync_before()
            self.inputs = {
                "logits": st.output((bs, self.L, self.V), args["logits_dtype"])[0],
                "q": st.output((bs, D, self.H, limits.HEAD_DIM), cache.dtype)[0],
                "target_tokens": st.output((bs, D), np.int32)[0],
            }
            # each round's write() copies into these (made once: a round's host work stays two copies and a launch)
            self._buffers = {k: DeviceArray(v, k) for k, v in self.inputs.items()}
            self.error_flag, self._flag_ptr = st.output((1,), np.uint32)
            check(driver().cuMemsetD32Async(self._flag_ptr, 0, 1, st.g.stream.handle))
            self._prepare(variants, softmax_scale, max_context)
            self._zero_outputs()
            self._graph = runtime.capture_graph(st.g.stream, self._round_calls())
            st.g.stream.sync()
        except BaseException:
            self.close()
            raise

    # ---- set-up -------------------------------------------------------------------------------------------
    def _prepare(self, variants: dict, softmax_scale, max_context) -> None:
        """The four deferred calls, each reading the previous one's outputs, all on the shared error flag."""
        v = variants
        flag = self.error_flag
        self._ops["draft_topk"] = ops.prepare_deferred("draft_topk", v["draft_topk"], self.inputs["logits"], self.K,
                                                       error_flag=flag)  # fmt: skip
        top = self._ops["draft_topk"].outputs()
        self._ops["tree_build"] = ops.prepare_deferred(
            "tree_build", v["tree_build"], top.top_logp, top.top_ids, self.root_tokens, self.budget,
            prefix_lens=self.prefix_lens, error_flag=flag,
        )  # fmt: skip
        tree = self._ops["tree_build"].outputs()
        visibility = tree.visibility
        if self.staging.lib == "torch":  # torch holds uint32 outputs in int32 (Staging.output): the verify reads uint32
            import torch

            visibility = visibility.view(torch.uint32)
        self._ops["tree_verify"] = ops.prepare_deferred(
            "tree_verify", v["tree_verify"], self.inputs["q"], self.kv_cache, self.block_table,
            self._verify_prefix_lens(), visibility, softmax_scale, max_context=max_context, error_flag=flag,
        )  # fmt: skip
        self._ops["tree_accept"] = ops.prepare_deferred(
            "tree_accept", v["tree_accept"], tree.tokens, tree.first_child, tree.next_sibling,
            self.inputs["target_tokens"], max_depth=self.L, kv_cache=self.kv_cache, block_table=self.block_table,
            prefix_lens=self.prefix_lens, error_flag=flag, advance_roots=self.root_tokens,
        )  # fmt: skip

    def _zero_outputs(self) -> None:
        """Zero every op's outputs once, before the first round. A refused op stops the ops after it from building
        on its values (tree_build builds nothing on a set flag), so they read what the buffers held before: the last
        accepted round's outputs, or these zeros, never memory nothing wrote (ST.2.4)."""
        s = self.staging.g.stream.handle
        for slug in OPS:
            result = self._ops[slug].outputs()
            for field in type(result).FIELDS:
                d = DeviceArray(getattr(result, field), f"{slug}.{field}")
                if d.nbytes:
                    check(driver().cuMemsetD8Async(d.ptr, 0, d.nbytes, s))

    def _verify_prefix_lens(self):
        """The lengths the verify plans and attends over: the live prefix_lens, which the previous round advanced."""
        return self.prefix_lens

    def _round_calls(self) -> list:
        """What one round enqueues, in order: each op's launch (the graph's nodes)."""
        return [self._ops[slug].launch for slug in OPS]

    # ---- rounds -------------------------------------------------------------------------------------------
    def write(self, **arrays) -> None:
        """Copy a round's inputs (logits, q, target_tokens: numpy or device arrays of the buffers' shape and dtype)
        into the step's buffers, ordered on the step's stream before the next replay."""
        s = self.staging.g.stream.handle
        buffers = {k: (d.shape, d.dtype) for k, d in self._buffers.items()}
        sources = {}
        for name, x in arrays.items():  # every input checked before any is copied
            sources[name] = DeviceArray(x, name) if is_device_array(x) else np.ascontiguousarray(x)
            contract.check_round_input(name, sources[name].shape, sources[name].dtype, buffers)
        for name, src in sources.items():
            dst = self._buffers[name]
            if isinstance(src, DeviceArray):
                _after_callers_stream(src.lib, s)
                check(driver().cuMemcpyDtoDAsync(dst.ptr, src.ptr, dst.nbytes, s))
            elif dst.nbytes:
                check(driver().cuMemcpyHtoDAsync(dst.ptr, src.ctypes.data, dst.nbytes, s))

    def replay(self) -> None:
        """Enqueue one round: the captured graph (no host work beyond the launch)."""
        if self._graph is None:
            raise RuntimeError("the step is closed: its graph and buffers are freed")
        check(driver().cuGraphLaunch(self._graph[1], self.staging.g.stream.handle))
        self.round_count += 1

    def round(self, **arrays) -> None:
        """write() this round's inputs, then replay() (nothing waits)."""
        self.write(**arrays)
        self.replay()

    def launch_eager(self, slug: str | None = None) -> None:
        """Enqueue one op's launch (or the whole round) outside the graph: what the benchmark times alone."""
        for name in [slug] if slug else OPS:
            self._ops[name].launch()

    def sync(self) -> None:
        self.staging.g.stream.sync()

    # ---- checks and results -------------------------------------------------------------------------------
    def check(self) -> None:
        """Wait; where the shared flag is set, raise the contract's named error of the first op (in step order)
        whose inputs, as the buffers hold them now, the contract refuses, with the round in a note. Call it after
        each round to name the round that failed: later rounds overwrite the inputs. Once raised, the same error is
        raised again until reset()."""
        self.sync()
        if self._failed is not None:
            raise self._failed
        got = np.zeros(1, np.uint32)
        check(driver().cuMemcpyDtoH(got.ctypes.data, self._flag_ptr, 4))
        if not got[0]:
            return
        for slug in OPS:
            try:
                self._ops[slug].validate_on_host()
            except InputError as e:
                e.add_note(f"step: refused in round {self.round_count} by {slug}; no later round commits or advances "
                           f"until reset()")  # fmt: skip
                self._failed = e
                raise
        self._failed = RuntimeError(
            f"step: the device checks refused a round up to {self.round_count}, but the inputs the buffers hold now "
            f"pass the contract: a later round overwrote them (check() after each round names the error)"
        )
        raise self._failed

    def reset(self) -> None:
        """Clear the shared error flag (rounds commit and advance again) and the error check() keeps raising."""
        self.sync()
        check(driver().cuMemsetD32Async(self._flag_ptr, 0, 1, self.staging.g.stream.handle))
        self.sync()
        self._failed = None

    def outputs(self) -> dict:
        """The last round's outputs as they are on the device, unchecked: {op slug: its result}."""
        return {slug: self._ops[slug].outputs() for slug in OPS}

    def results(self) -> dict:
        """check(), then outputs()."""
        self.check()
        return self.outputs()

    def close(self) -> None:
        """Free the graph and every buffer the step made (the caller's arrays are the caller's)."""
        if self._graph is not None:
            runtime.destroy_graph(*self._graph)
            self._graph = None
        for p in self._ops.values():
            p.staging.close()
        self._ops = {}
        self.staging.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _variants(asked: dict) -> dict:
    """{op: variant} for every op of the step: the asked ones (checked by name), else DEFAULT_VARIANTS."""
    contract.check_variants(asked, {slug: [s.variant for s in specs.for_op(slug)] for slug in OPS})
    out = {}
    for slug in OPS:  # the first default the GPU runs (no GPU is asked where the caller chose)
        names = [asked[slug]] if slug in asked else list(np.atleast_1d(DEFAULT_VARIANTS[slug]))
        out[slug] = next((n for n in names[:-1] if specs.get(slug, n).runs_on(runtime.gpu().arch)), names[-1])
    return out


def _after_callers_stream(lib: str, stream) -> None:
    """Order `stream` after the work queued so far on the caller's current stream (torch, cupy), which may still be
    writing an input: an event the stream waits for on the device, not a host synchronisation."""
    if lib == "torch":
        import torch

        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream())
        handle = ev.cuda_event
    else:
        import cupy

        ev = cupy.cuda.Event(disable_timing=True)
        ev.record(cupy.cuda.get_current_stream())
        handle = ev.ptr
    check(driver().cuStreamWaitEvent(stream, driver().CUevent(handle), 0))

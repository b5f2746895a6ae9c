"""The C++ engine's CPU backend as an implementation of the three ops, driven through KDTR op files.

Each call checks its arguments with the contract's validation (the reference's messages), writes an op
file (input tensors named like the arguments, Python scalars as rank-0 tensors, metadata `op`), has one
persistent `kdtree-engine serve` process run it, and reads the result file back into the reference's
result types. A tree_accept commit writes the engine's committed cache back into the caller's array in
place. The engine validates every op file itself as well; `run_op` skips the Python checks so tests can
reach the engine's own.

Protocol with `kdtree-engine serve` (engine/include/kdtree/serve.hpp): one request line
`OP<TAB>IN<TAB>OUT` on its stdin, one answer line `ok<TAB>SECONDS` or `error<TAB>MESSAGE` on its stdout.
"""

from __future__ import annotations

import atexit
import pathlib
import shutil
import subprocess
import tempfile
import threading

import numpy as np

import kdtr
from reference import tree_accept as ref_accept
from reference import tree_build as ref_build
from reference import tree_verify as ref_verify
from reference import validate as v

from . import tools


class EngineError(v.InputError):
    """The engine rejected an op file; the message is the engine's ("TENSOR: problem")."""


class EngineCrashed(RuntimeError):
    """The engine process ended without answering (a crash is never an input error)."""


class Server:
    """One `kdtree-engine serve` process and a scratch folder for its op files."""

    def __init__(self, binary: pathlib.Path, threads: int = 0):
        self._cmd = [str(binary), "serve", "--device", "cpu", "--threads", str(threads)]
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="kdtree-engine-"))
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self._cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
        return self._proc

    def run(self, op: str, tensors: dict, metadata: dict | None = None) -> dict[str, np.ndarray]:
        """Run `op` on these input tensors; returns the output tensors as writeable numpy arrays."""
        with self._lock:
            src, dst = self._dir / f"{op}.in.kdtr", self._dir / f"{op}.out.kdtr"
            dst.unlink(missing_ok=True)
            src.write_bytes(kdtr.dumps(tensors, {"op": op, **(metadata or {})}))
            proc = self._start()
            try:
                proc.stdin.write(f"{op}\t{src}\t{dst}\n")
                proc.stdin.flush()
                answer = proc.stdout.readline()
            except BrokenPipeError:
                answer = ""
            if not answer:
                rc = proc.wait(timeout=30)
                err = proc.stderr.read()[-2000:]
                self._proc = None
                raise EngineCrashed(f"kdtree-engine serve exited {rc} without answering {op}: {err}")
            status, _, detail = answer.rstrip("\n").partition("\t")
            if status != "ok":
                raise EngineError(detail)
            f = kdtr.loads(dst.read_bytes())
            return {name: np.array(f[name]) for name in f.infos}

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)


_server: Server | None = None
_server_lock = threading.Lock()


def server() -> Server:
    """The process-wide engine server, started on first use (tools.ToolMissing when not built)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = Server(tools.binary("kdtree-engine"))
            atexit.register(_server.close)
        return _server


def run_op(op: str, tensors: dict, metadata: dict | None = None) -> dict[str, np.ndarray]:
    """Run an op file through the engine without the Python checks (EngineError on rejection)."""
    return server().run(op, tensors, metadata)


def _i32(x) -> np.ndarray:
    return np.array(int(x), np.int32)


def tree_build(top_logp, top_ids, root_tokens, budget, prefix_lens=None, *, with_full_mask=False) -> ref_build.Tree:
    """tree_build on the engine; `with_full_mask` opts into the SGLang FULL_MASK layout (else shape (0,))."""
    prefix_lens = ref_build.default_prefix_lens(root_tokens, prefix_lens)
    ref_build.validate_inputs(top_logp, top_ids, root_tokens, budget, prefix_lens)
    if not isinstance(with_full_mask, (bool, np.bool_)):
        v.fail("with_full_mask", f"expected a bool, got {type(with_full_mask).__name__}")
    out = run_op(
        "tree_build",
        {
            "top_logp": top_logp,
            "top_ids": top_ids,
            "root_tokens": root_tokens,
            "budget": _i32(budget),
            "prefix_lens": prefix_lens,
            "with_full_mask": np.array(bool(with_full_mask)),
        },
    )
    return ref_build.Tree(**{f: out[f] for f in ref_build.Tree.FIELDS})


def tree_verify(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale):
    """tree_verify on the engine: (out [bs, Q, H, 512] in q's dtype, lse float32 [bs, Q, H])."""
    ref_verify.validate_inputs(q, kv_cache, block_table, prefix_lens, visibility, softmax_scale)
    out = run_op(
        "tree_verify",
        {
            "q": q,
            "kv_cache": kv_cache,
            "block_table": block_table,
            "prefix_lens": prefix_lens,
            "visibility": visibility,
            "softmax_scale": np.array(float(softmax_scale), np.float64),
        },
    )
    return out["out"], out["lse"]


def tree_accept(
    tokens, first_child, next_sibling, target_tokens, *, max_depth, kv_cache=None, block_table=None, prefix_lens=None
) -> ref_accept.Accept:
    """tree_accept on the engine; with a cache, the committed rows are written back into it in place."""
    ref_accept.validate_inputs(
        tokens, first_child, next_sibling, target_tokens, max_depth, kv_cache, block_table, prefix_lens
    )
    tensors = {
        "tokens": tokens,
        "first_child": first_child,
        "next_sibling": next_sibling,
        "target_tokens": target_tokens,
        "max_depth": _i32(max_depth),
    }
    if kv_cache is not None:
        tensors.update({"kv_cache": kv_cache, "block_table": block_table, "prefix_lens": prefix_lens})
    out = run_op("tree_accept", tensors)
    if kv_cache is not None:
        kv_cache[...] = out["kv_cache"]
    return ref_accept.Accept(*(out[f] for f in ref_accept.Accept.FIELDS))


def ops() -> dict:
    """The three ops by slug (tools.ToolMissing when the engine is not built)."""
    tools.binary("kdtree-engine")
    return {"tree_build": tree_build, "tree_verify": tree_verify, "tree_accept": tree_accept}

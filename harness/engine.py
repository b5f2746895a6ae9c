"""The C++ engine (its CPU backend, or with device "cuda" its CUDA backend) as an implementation of the three
ops, driven through KDTR op files.

Each call checks its arguments with the contract's validation (the reference's messages), writes an op
file (input tensors named like the arguments, Python scalars as rank-0 tensors, metadata `op`), has one
persistent `kdtree-engine serve --device DEVICE` process run it, and reads the result file back into the reference's
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

import contract
import kdtr
from contract import InputError

from . import tools


class EngineError(InputError):
    """The engine rejected an op file; the message is the engine's ("TENSOR: problem")."""


class EngineCrashed(RuntimeError):
    """The engine process ended without answering (a crash is never an input error)."""


class Server:
    """One `kdtree-engine serve` process and a scratch folder for its op files."""

    def __init__(self, binary: pathlib.Path, threads: int = 0, device: str = "cpu", variant: str | None = None):
        self._cmd = [str(binary), "serve", "--device", device, "--threads", str(threads)]
        self._cmd += ["--variant", variant] if variant else []
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


_servers: dict[tuple[str, str | None], Server] = {}
_server_lock = threading.Lock()


def server(device: str = "cpu", variant: str | None = None) -> Server:
    """The process-wide engine server of a device (and kernel variant), started on first use
    (tools.ToolMissing when not built)."""
    with _server_lock:
        key = (device, variant)
        if key not in _servers:
            _servers[key] = Server(tools.binary("kdtree-engine"), device=device, variant=variant)
            atexit.register(_servers[key].close)
        return _servers[key]


def run_op(
    op: str, tensors: dict, metadata: dict | None = None, device: str = "cpu", variant: str | None = None
) -> dict[str, np.ndarray]:
    """Run an op file through the engine without the Python checks (EngineError on rejection)."""
    return server(device, variant).run(op, tensors, metadata)


def cuda_variants() -> list[tuple[str, str]]:
    """(slug, variant) of every CUDA kernel variant compiled into the engine (`kdtree-engine variants`; empty
    for an engine built without nvcc)."""
    out = subprocess.run([str(tools.binary("kdtree-engine")), "variants"], capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise RuntimeError(f"kdtree-engine variants exited {out.returncode}: {out.stderr}")
    return [tuple(line.split("\t")[:2]) for line in out.stdout.splitlines() if line]  # type: ignore[misc]


def _run(c: contract.OpContract, named: dict, device: str = "cpu"):
    """Validate with the contract, write the op file by the contract's KDTR names, run it, read the result;
    arguments the op writes in place (the commit's cache) get the engine's result copied back."""
    checked = c.validate_host(**named)
    out = run_op(c.slug, c.kdtr_inputs(checked.args), device=device)
    for name in c.in_place:
        if named.get(name) is not None:
            named[name][...] = out[name]
    return c.result(**{name: out[name] for name in c.output_names})


def function(slug: str, device: str = "cpu"):
    """The engine's implementation of an op on `device` (cpu or cuda), with the contract's signature and
    documentation."""
    c = contract.OPS[slug]

    def op(*args, **kwargs):
        return _run(c, c.bind(*args, **kwargs), device)

    op.__signature__ = c.signature()  # type: ignore[attr-defined]
    op.__name__ = op.__qualname__ = slug
    op.__doc__ = f"{slug} on the C++ engine's {device.upper()} backend, through a KDTR op file."
    return c.implements(op)


def ops() -> dict:
    """The ops by slug (tools.ToolMissing when the engine is not built)."""
    tools.binary("kdtree-engine")
    return {slug: function(slug) for slug in contract.OPS}

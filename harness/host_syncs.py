"""Count what the host does to the device while a block of code runs: the calls that make the host wait for the
device (stream, context and event synchronisations, synchronous copies), kernel launches outside a graph, and
graph launches. The step's clause ST.2.2 and its benchmark measure a round with it instead of assuming it.

What is counted: cuda.bindings.driver's blocking entry points and its graph launch (patched on the module, which
kernels_cu calls through), the kernels_cu stream's sync(), kernels_cu's kernel launches (cuda.core.launch), and torch's
torch.cuda.synchronize. Not seen: C-level calls of other libraries (cupy's own stream synchronize)."""

from __future__ import annotations

import collections
import contextlib

# The driver calls that block the host until device work is done (a synchronous copy waits for the stream).
BLOCKING = ("cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpy", "cuMemcpyDtoH",
            "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyDtoHAsync")  # fmt: skip
# cuMemcpyDtoHAsync to pageable host memory returns only once the data is on the host: counted as blocking


class _CountingStream:
    """The kernels_cu stream with its sync() counted (every other attribute is the stream's)."""

    def __init__(self, stream, counts):
        self._stream, self._counts = stream, counts

    def sync(self):
        self._counts["stream.sync"] += 1
        return self._stream.sync()

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def counting():
    """Yields a Counter, filled while the block runs: {name of a blocking call: count, "kernel_launch": n,
    "graph_launch": n}; `blocking(counts)` sums the blocking ones."""
    import cuda.core
    from cuda.bindings import driver

    from kernels_cu import runtime

    counts: collections.Counter = collections.Counter()
    saved = []

    def patch(owner, name, key):
        orig = getattr(owner, name)

        def counted(*a, **k):
            counts[key] += 1
            return orig(*a, **k)

        saved.append((owner, name, orig))
        setattr(owner, name, counted)

    for name in BLOCKING:
        patch(driver, name, name)
    patch(driver, "cuGraphLaunch", "graph_launch")
    patch(cuda.core, "launch", "kernel_launch")  # kernels_cu.arrays.launch_kernel looks it up at each call
    try:
        import torch

        if torch.cuda.is_available():
            patch(torch.cuda, "synchronize", "torch.cuda.synchronize")
    except ImportError:
        pass
    g = runtime.gpu()
    stream = g.stream
    g.stream = _CountingStream(stream, counts)
    try:
        yield counts
    finally:
        g.stream = stream
        for owner, name, orig in reversed(saved):
            setattr(owner, name, orig)


def blocking(counts) -> int:
    """The host waits counted: blocking driver calls, stream syncs, torch synchronisations."""
    return sum(v for k, v in counts.items() if k in BLOCKING or k in ("stream.sync", "torch.cuda.synchronize"))

"""Is this process's CUDA context still usable after a GPU test? A kernel fault (an illegal address, a trap) leaves the
context broken for good, and a graph capture left open on kernels_cu's stream makes every later launch and legacy-
stream copy (cupy's) fail: either way every later GPU test of the process (an xdist worker) fails with an error that
does not say why. The conftest checks after each GPU test: the test that broke the context errors at its teardown
with what is wrong, a capture it left open is ended there (the process goes on), and after a fault the later GPU tests
of the process fail at once naming that test, so the report points at one culprit, not at a hundred victims."""

from __future__ import annotations

_broken: tuple[str, str] | None = None  # (the test that broke the context, what is wrong) once a fault is seen


def check(driver=None, stream_handle=None) -> tuple[str | None, bool]:
    """(what is wrong, or None; whether it lasts: a fault does, an open capture is ended here and does not). Nothing
    is checked (None, False) where kernels_cu never set up its GPU in this process. `driver` and `stream_handle`
    default to cuda.bindings' driver and kernels_cu's stream (tests pass their own)."""
    if driver is None:
        from kernels_cu import runtime

        if not runtime.gpu.cache_info().currsize:  # no CUDA work of ours here: nothing to check, nothing to start
            return None, False
        from cuda.bindings import driver

        stream_handle = runtime.gpu().stream.handle
    ok = driver.CUresult.CUDA_SUCCESS
    err, status = driver.cuStreamIsCapturing(stream_handle)
    if err == ok and status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE:
        err, graph = driver.cuStreamEndCapture(stream_handle)
        if err == ok and graph is not None:
            driver.cuGraphDestroy(graph)
        return f"it left kernels_cu's stream capturing a CUDA graph ({status.name}; ended here)", False
    res = driver.cuCtxSynchronize()
    err = res[0] if isinstance(res, tuple) else res
    if err != ok:  # the context's sticky error: the process cannot launch again
        return f"the CUDA context reports {err.name} after it: no later GPU work can run in this process", True
    return None, False


def after_test(nodeid: str, **kw) -> str | None:
    """Check after the GPU test `nodeid`: the message it fails its teardown with, or None. A lasting fault is kept
    for `before_test`."""
    global _broken
    if _broken is not None:
        return None  # already named; the later tests say so at their setup
    problem, lasting = check(**kw)
    if problem is None:
        return None
    if lasting:
        _broken = (nodeid, problem)
    return f"the CUDA context is not as the test found it: {problem}"


def before_test() -> str | None:
    """Why a GPU test cannot run in this process (a test before it broke the context), or None."""
    if _broken is None:
        return None
    nodeid, problem = _broken
    return f"not run: {nodeid} broke this process's CUDA context ({problem})"


def reset() -> None:
    """Forget a recorded fault (tests of this module)."""
    global _broken
    _broken = None

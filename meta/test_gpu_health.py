"""harness/gpu_health.py: the test that breaks the CUDA context is named, once, and the later GPU tests of the process
say which one did; a capture left open is ended and named. A fake driver plays each state on the CPU; on a GPU the
real driver's capture status is read back."""

from __future__ import annotations

import enum
import types

import pytest

from harness import gpu_health


class _Result(enum.Enum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class _Status(enum.Enum):
    CU_STREAM_CAPTURE_STATUS_NONE = 0
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1


class FakeDriver:
    """cuda.bindings.driver's calls that gpu_health makes, with a context that may be capturing or faulted."""

    CUresult, CUstreamCaptureStatus = _Result, _Status

    def __init__(self, capturing=False, fault=False):
        self.capturing, self.fault, self.calls = capturing, fault, []

    def cuStreamIsCapturing(self, stream):
        self.calls.append(("is_capturing", stream))
        if self.fault:  # a faulted context answers every call with its sticky error
            return _Result.CUDA_ERROR_ILLEGAL_ADDRESS, _Status.CU_STREAM_CAPTURE_STATUS_NONE
        status = _Status.CU_STREAM_CAPTURE_STATUS_ACTIVE if self.capturing else _Status.CU_STREAM_CAPTURE_STATUS_NONE
        return _Result.CUDA_SUCCESS, status

    def cuStreamEndCapture(self, stream):
        self.calls.append(("end_capture", stream))
        self.capturing = False
        return _Result.CUDA_SUCCESS, "graph"

    def cuGraphDestroy(self, graph):
        self.calls.append(("destroy", graph))
        return (_Result.CUDA_SUCCESS,)

    def cuCtxSynchronize(self):
        self.calls.append(("sync",))
        return (_Result.CUDA_ERROR_ILLEGAL_ADDRESS if self.fault else _Result.CUDA_SUCCESS,)


@pytest.fixture(autouse=True)
def _fresh():
    gpu_health.reset()
    yield
    gpu_health.reset()


def test_a_healthy_context_passes():
    d = FakeDriver()
    assert gpu_health.check(d, 7) == (None, False)
    assert gpu_health.after_test("t::a", driver=d, stream_handle=7) is None
    assert gpu_health.before_test() is None
    assert ("sync",) in d.calls  # an asynchronous fault surfaces at the synchronisation, in the test that caused it


def test_a_capture_left_open_is_ended_and_named_and_the_process_goes_on():
    d = FakeDriver(capturing=True)
    problem = gpu_health.after_test("t::opens", driver=d, stream_handle=7)
    assert problem and "capturing a CUDA graph" in problem and "ended here" in problem
    assert ("end_capture", 7) in d.calls and ("destroy", "graph") in d.calls and not d.capturing
    assert gpu_health.before_test() is None  # not lasting: the next test runs
    assert gpu_health.after_test("t::next", driver=d, stream_handle=7) is None


def test_a_fault_names_its_test_once_and_every_later_test_names_it():
    d = FakeDriver(fault=True)
    problem = gpu_health.after_test("t::faults", driver=d, stream_handle=7)
    assert problem and "CUDA_ERROR_ILLEGAL_ADDRESS" in problem
    for _ in range(3):
        why = gpu_health.before_test()
        assert why and why.startswith("not run: t::faults broke this process's CUDA context")
        assert gpu_health.after_test("t::victim", driver=d, stream_handle=7) is None  # the victims are not culprits


def test_nothing_is_checked_where_kernels_cu_set_up_no_gpu(monkeypatch):
    from kernels_cu import runtime

    monkeypatch.setattr(runtime, "gpu", types.SimpleNamespace(cache_info=lambda: types.SimpleNamespace(currsize=0)))
    assert gpu_health.check() == (None, False)


@pytest.mark.gpu
def test_the_real_drivers_capture_status_is_read_and_ended():
    """On a GPU: a capture begun on kernels_cu's stream and left open is seen, ended, and the stream works after."""
    from cuda.bindings import driver

    from kernels_cu import runtime

    s = runtime.gpu().stream
    (err,) = driver.cuStreamBeginCapture(s.handle, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    assert err == driver.CUresult.CUDA_SUCCESS
    problem, lasting = gpu_health.check()
    assert problem and "capturing a CUDA graph" in problem and not lasting
    assert gpu_health.check() == (None, False)
    s.sync()

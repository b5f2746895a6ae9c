"""The ceilings measured in this run, as cases of their own (every stage runs them first, so each stage's
JSON carries the rates its cases were divided by): the copy kernel's rate over 2 GiB counting bytes read
plus written, the read kernel's over the same 2 GiB counting bytes read, cuMemcpyDtoD's for the record, and
cuBLAS's bf16 matrix rate through torch.matmul."""

import pytest

from harness.bench import Unavailable, record
from harness.bench import ceilings as c

pytestmark = [pytest.mark.perf, pytest.mark.gpu]


def _put(benchmark, ceilings, impl, shape, rate, **kw):
    benchmark.pedantic(lambda: None, rounds=1)  # the measurement is the ceiling's own (device events)
    record.put(benchmark, op="ceiling", impl=impl, shape=shape, time=rate["time"], ceilings=ceilings.as_dict(), **kw)


def test_copy_kernel(benchmark, ceilings):
    if ceilings.copy_gbs is None:
        pytest.fail(f"copy ceiling not measured: {c.snapshot()['unavailable'].get('copy_gbs')}")
    rate = c.copy_rates()["copy_kernel"]
    _put(benchmark, ceilings, "copy_kernel", {"bytes_each_way": c.COPY_BYTES}, rate, bytes_moved=rate["bytes_counted"])


def test_read_kernel(benchmark, ceilings):
    if ceilings.read_gbs is None:
        pytest.fail(f"read ceiling not measured: {c.snapshot()['unavailable'].get('copy_gbs')}")
    rate = c.copy_rates()["read_kernel"]
    _put(benchmark, ceilings, "read_kernel", {"bytes_read": c.COPY_BYTES}, rate, bytes_moved=rate["bytes_counted"])


def test_memcpy_dtod(benchmark, ceilings):
    rate = c.copy_rates()["memcpy_dtod"]
    _put(benchmark, ceilings, "cuMemcpyDtoD", {"bytes_each_way": c.COPY_BYTES}, rate, bytes_moved=rate["bytes_counted"])


def test_bf16_matmul(benchmark, ceilings):
    try:
        rate = c.bf16_matmul()
    except Unavailable as e:
        pytest.skip(str(e))
    n = rate["n"]
    _put(benchmark, ceilings, "torch.matmul", {"m": n, "n": n, "k": n}, rate, flops=2 * n**3,
         bytes_moved=3 * n * n * 2)  # fmt: skip

"""KDTR: what the readers open (regular files only, without blocking) and what checking a file costs.

spec/kdtr.md KDTR.3.8, KDTR.3.9, KDTR.4.4. The C++ reader is driven through kdtr-inspect, the Python
reader through kdtr.load (in a subprocess where a hang must fail the test instead of the suite).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kdtr
from harness import tools
from kdtr import testing
from kdtr.describe import comparable, error_dict
from kdtr.format import check_file_size

ROOT = tools.ROOT
GiB = 1 << 30
# What checking may cost beyond the tool itself: the index copy, the names and values it holds, one
# 1 MiB buffer. Measured peaks are about 4 MiB for kdtr-inspect itself.
BASE_RSS = 16 << 20


@pytest.fixture(scope="module")
def inspect_bin(request):
    return tools.required_binary(request.config, "kdtr-inspect")


def peak_rss(cmd: list[str], timeout: float = 60) -> tuple[dict, int]:
    """The tool's JSON and its own peak RSS in bytes."""
    try:
        out, rss = tools.run_measured(cmd, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{cmd[0]} did not answer within {timeout} s")
    return json.loads(out.stdout), rss


def python_load(path, timeout: float = 20) -> dict:
    """kdtr.load(path) in a fresh interpreter, as describe() would report it; fails the test on a hang."""
    code = (
        "import json, sys, kdtr\n"
        "from kdtr.describe import error_dict\n"
        "try:\n    kdtr.load(sys.argv[1]); print(json.dumps({'ok': True}))\n"
        "except kdtr.KdtrError as e:\n    print(json.dumps(error_dict(e)))\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"kdtr.load({path}) did not return within {timeout} s")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def sparse_file(path, nbytes: int, *, valid: bool) -> None:
    """A KDTR file with one U8 tensor of `nbytes` zeros left as a hole (no disk used).

    valid=False keeps the header of a 96-byte file, so the index does not end at the file's end (E11).
    """
    testing.sparse_file(path, {}, {"x": ((nbytes,), np.uint8)}, data_crc=valid)  # E11 comes before any CRC
    if not valid:
        with open(path, "r+b") as f:
            h = bytearray(f.read(64))
            for offset, value, size in ((32, 64, 8), (40, 32, 8), (48, 0, 4)):
                testing.patch(h, offset, value, size)
            f.seek(0)
            f.write(testing.fix_header_crc(h))


# --- KDTR.4.4 bounded memory ----------------------------------------------------------------------------
@pytest.mark.spec("KDTR.4.4")
@pytest.mark.parametrize("reader", ["cpp"])
def test_sparse_6gib_bad_header_answered_at_once(reader, inspect_bin, tmp_path):
    """The issue's case: 6 GiB, mostly a hole, with a 64-byte header that does not match the size."""
    p = tmp_path / "big.kdtr"
    sparse_file(p, 6 * GiB, valid=False)
    got, rss = peak_rss([str(inspect_bin), str(p)], timeout=20)
    assert got["code"] == "E11", got
    assert comparable(got) == comparable(python_load(p))
    assert rss < BASE_RSS, f"peak RSS {rss >> 20} MiB checking a bad 64-byte header"


@pytest.mark.spec("KDTR.4.4")
@pytest.mark.parametrize("reader", ["cpp"])
def test_valid_1gib_file_verified_through_a_fixed_buffer(reader, inspect_bin, tmp_path):
    """A valid file with 1 GiB of data: every data CRC is checked, the data is never held."""
    p = tmp_path / "big.kdtr"
    sparse_file(p, GiB + 3, valid=True)
    got, rss = peak_rss([str(inspect_bin), str(p)], timeout=120)
    assert got["ok"] and got["tensors"][0]["nbytes"] == GiB + 3, got
    assert rss < BASE_RSS, f"peak RSS {rss >> 20} MiB verifying 1 GiB"


@pytest.mark.spec("KDTR.4.4")
@pytest.mark.parametrize("reader", ["cpp"])
def test_peak_is_the_index_and_its_strings(reader, inspect_bin, tmp_path):
    """A 48 MiB index (three 16 MiB values): the peak is the index copy plus the values, not more."""
    p = tmp_path / "meta.kdtr"
    big = "v" * (16 << 20)
    kdtr.save(p, {"x": np.zeros(3, np.uint8)}, {"a": big, "b": big, "c": big})
    got, rss = peak_rss([str(inspect_bin), str(p)], timeout=60)
    assert got["ok"]
    index = p.stat().st_size - 64 - 64
    assert rss < 2 * index + BASE_RSS, f"peak RSS {rss >> 20} MiB for a {index >> 20} MiB index"


# --- KDTR.3.9 regular files only ------------------------------------------------------------------------
def _both(inspect_bin, path) -> tuple[dict, dict]:
    out = subprocess.run([str(inspect_bin), str(path)], capture_output=True, text=True, timeout=20)
    return json.loads(out.stdout), python_load(path)


@pytest.mark.spec("KDTR.3.9")
@pytest.mark.parametrize("reader", ["cpp", "python"])
def test_fifo_is_refused_without_blocking(reader, inspect_bin, tmp_path):
    fifo = tmp_path / "pipe.kdtr"
    os.mkfifo(fifo)
    if reader == "cpp":
        try:
            out = subprocess.run([str(inspect_bin), str(fifo)], capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("kdtr-inspect blocked on a FIFO")
        got = json.loads(out.stdout)
    else:
        got = python_load(fifo)
    assert got["code"] == "E90" and got["message"] == f"{fifo}: not a regular file", got


@pytest.mark.spec("KDTR.3.9")
@pytest.mark.parametrize("reader", ["cpp"])
@pytest.mark.parametrize("kind", ["directory", "device", "missing", "symlink-to-directory"])
def test_not_a_regular_file_is_e90_in_both(reader, kind, inspect_bin, tmp_path):
    path = {"directory": tmp_path, "device": "/dev/null", "missing": tmp_path / "nope.kdtr"}.get(kind)
    if kind == "symlink-to-directory":
        path = tmp_path / "link.kdtr"
        path.symlink_to(tmp_path)
    cpp, py = _both(inspect_bin, path)
    assert cpp["code"] == "E90", cpp
    assert comparable(cpp) == comparable(py), (cpp, py)
    reason = "No such file or directory (errno 2)" if kind == "missing" else "not a regular file"
    assert cpp["message"] == f"{path}: {reason}"


@pytest.mark.spec("KDTR.3.9")
@pytest.mark.parametrize("reader", ["cpp"])
def test_symlink_to_a_file_and_an_empty_file(reader, inspect_bin, tmp_path):
    """A link to a valid file is that file; an empty regular file is E01 (not an mmap error)."""
    good = tmp_path / "good.kdtr"
    kdtr.save(good, {"x": np.arange(3, dtype=np.int32)})
    (tmp_path / "link.kdtr").symlink_to(good)
    cpp, py = _both(inspect_bin, tmp_path / "link.kdtr")
    assert cpp["ok"] and py["ok"]
    (tmp_path / "empty.kdtr").write_bytes(b"")
    cpp, py = _both(inspect_bin, tmp_path / "empty.kdtr")
    assert cpp["code"] == "E01" and comparable(cpp) == comparable(py)
    assert cpp["message"] == "file is 0 bytes, shorter than 96"


@pytest.mark.spec("KDTR.3.9")
@pytest.mark.parametrize("reader", ["python"])
def test_load_refuses_in_process(reader, tmp_path):
    """The same refusals without a subprocess (a directory, a device and a missing path cannot block)."""
    for path, reason in [
        (tmp_path, "not a regular file"),
        ("/dev/null", "not a regular file"),
        (tmp_path / "nope", "No such file or directory (errno 2)"),
    ]:
        with pytest.raises(kdtr.KdtrError) as e:
            kdtr.load(path)
        assert e.value.code == kdtr.Code.IO and e.value.message == f"{path}: {reason}"


# --- KDTR.3.8 host limit --------------------------------------------------------------------------------
@pytest.mark.spec("KDTR.3.8")
@pytest.mark.parametrize("reader", ["python"])
def test_host_limit_checked_on_the_size(reader):
    """The Python side of E32; the C++ side is kdtr-test's host_limit (test_kdtr_cpp.py)."""
    with pytest.raises(kdtr.KdtrError) as e:
        check_file_size(2**48 + 1)
    assert e.value.code == kdtr.Code.HOST_LIMIT
    assert str(e.value) == "KDTR E32 HOST_LIMIT: file is 281474976710657 bytes, more than 2^48"
    check_file_size(2**48)  # the limit itself is allowed
    assert error_dict(e.value)["entry"] is None


# --- KDTR.4.4 / KDTR.4.1: kdtr.load under an address-space limit, and only KdtrError escapes ---------------
_LOAD = (
    "import sys\nimport kdtr\n"
    "try:\n    kdtr.load(sys.argv[1]); print('ok')\n"
    "except kdtr.KdtrError as e:\n    print(e)\n"
)


def _load_limited(path, limit: int = GiB) -> str:
    """str() of what kdtr.load(path) raises in an interpreter whose address space is `limit` bytes."""
    # from the repository root, which `python -c` puts first on sys.path
    out, _ = tools.run_measured([sys.executable, "-c", _LOAD, str(path)], address_space=limit, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.slow
@pytest.mark.spec("KDTR.4.4", "KDTR.4.1")
@pytest.mark.parametrize("reader", ["python"])
def test_load_of_6gib_under_a_1gib_address_space(reader, tmp_path):
    """The header and index are read before the file is mapped: a bad 6 GiB file gets its own code under a
    1 GiB address-space limit, and a valid one that cannot be mapped is E91 ALLOC, never an OSError."""
    p = tmp_path / "big.kdtr"
    sparse_file(p, 6 * GiB, valid=False)
    if not testing.is_sparse(p):
        pytest.skip(f"{tmp_path} does not keep holes: a 6 GiB test file would take 6 GiB of disk")
    assert _load_limited(p).startswith("KDTR E11 FILE_SIZE_MISMATCH")
    testing.sparse_file(p, {}, {"x": ((6 * GiB,), np.uint8)}, data_crc=False)
    with open(p, "r+b") as f:  # a flipped bit in the index: caught by check 12, still nothing mapped
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    assert _load_limited(p).startswith("KDTR E12 INDEX_CRC")
    sparse_file(p, 6 * GiB, valid=True)
    assert (
        _load_limited(p)
        == f"KDTR E91 ALLOC: {p}: cannot map its {p.stat().st_size} bytes: Cannot allocate memory (errno 12)"
    )


@pytest.mark.spec("KDTR.4.1")
@pytest.mark.parametrize("reader", ["python"])
def test_load_turns_every_failure_into_kdtr_error(reader, tmp_path, monkeypatch):
    """Failures no file can cause on demand, injected: a read error, a file that shrank after fstat, a
    mapping refused for lack of memory or otherwise, memory running out while checking."""
    import errno
    import mmap

    p = tmp_path / "f.kdtr"
    kdtr.save(p, {"x": np.arange(3, dtype=np.int32)})
    real_pread = os.pread
    cases = [
        (os, "pread", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")), "E90", "errno 5"),
        (os, "pread", lambda fd, n, off: real_pread(fd, n, off)[:-1], "E90", "file ended early"),
        (mmap, "mmap", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOMEM, "no memory")), "E91", "map"),
        (mmap, "mmap", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EACCES, "denied")), "E90", "map"),
    ]
    for module, name, fake, code, words in cases:
        with monkeypatch.context() as m:
            m.setattr(module, name, fake)
            with pytest.raises(kdtr.KdtrError) as e:
                kdtr.load(p)
        assert e.value.code.tag == code and words in e.value.message and str(p) in e.value.message, str(e.value)

    class NoMemory:
        @staticmethod
        def crc32(*a):
            raise MemoryError

    monkeypatch.setattr(kdtr.format, "zlib", NoMemory)
    for call in (lambda: kdtr.load(p), lambda: kdtr.loads(p.read_bytes())):
        with pytest.raises(kdtr.KdtrError) as e:
            call()
        assert e.value.code == kdtr.Code.ALLOC and "cannot allocate memory" in e.value.message


@pytest.mark.spec("KDTR.4.1")
@pytest.mark.parametrize("reader", ["python"])
@pytest.mark.parametrize("buf", ["KDTR", 96, None, 1.5, memoryview(np.zeros(64, np.uint8))[::2]])
def test_loads_of_what_is_not_bytes_is_a_kdtr_error_naming_buf(reader, buf):
    """An argument that is no bytes-like object at all is refused like every other input, by a KdtrError (E90
    IO: nothing to read) whose message names `buf` and what it got; it is a TypeError too (a caller's bug)."""
    with pytest.raises(
        kdtr.KdtrError, match=rf"kdtr\.loads: buf must be a C-contiguous bytes-like object .*not {type(buf).__name__}"
    ) as e:
        kdtr.loads(buf)
    assert e.value.code == kdtr.Code.IO and isinstance(e.value, TypeError)

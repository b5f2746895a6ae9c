"""KDTR writer: only what readers open (KDTR.2.3); publishing honours the umask and cleans up after killed
writers, never after live ones (KDTR.2.4). The C++ writer's limits are in kdtr-test (test_kdtr_cpp.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import kdtr
from harness import strategies as hh
from kdtr.publish import TEMP_PREFIX, remove_dead_temps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
E = kdtr.Code


def _huge(shape, dtype=np.uint8):
    """An array of any shape without memory (a broadcast view of one element)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


# (what, tensors, metadata, code, words the message must carry)
LIMITS = [
    ("index over 64 MiB: five 16 MiB values", {}, {k: "v" * (16 * MiB) for k in "abcde"}, E.INDEX_BOUNDS, "67108864"),
    (
        "index over 64 MiB: 262,144 names of 256 characters",
        {f"{i:0256d}": np.zeros(0, np.uint8) for i in range(262_144)},
        {},
        E.INDEX_BOUNDS,
        "67108864",
    ),
    ("262,145 tensors", {f"t{i}": np.zeros(0, np.uint8) for i in range(262_145)}, {}, E.LIMIT_EXCEEDED, "262144"),
    ("65,537 metadata entries", {}, {f"k{i}": "" for i in range(65_537)}, E.LIMIT_EXCEEDED, "65536"),
    ("value over 16 MiB", {}, {"k": "v" * (16 * MiB + 1)}, E.LIMIT_EXCEEDED, "16 MiB"),
    ("value with NUL", {}, {"k": "a\x00b"}, E.BAD_UTF8, "NUL"),
    ("value with a lone surrogate", {}, {"k": "\ud800"}, E.BAD_UTF8, "UTF-8"),
    ("value not a str", {}, {"k": 3}, E.BAD_UTF8, "str"),
    ("empty name", {"": np.zeros(1)}, {}, E.LIMIT_EXCEEDED, "1..256"),
    ("257-character name", {"n" * 257: np.zeros(1)}, {}, E.LIMIT_EXCEEDED, "1..256"),
    ("name with a space", {"a b": np.zeros(1)}, {}, E.BAD_NAME, "0x21..0x7E"),
    ("non-ASCII name", {"\u00e4": np.zeros(1)}, {}, E.BAD_NAME, "0x21..0x7E"),
    ("name not a str", {3: np.zeros(1)}, {}, E.BAD_NAME, "str"),
    ("key with a space", {}, {"a b": "v"}, E.BAD_META_KEY, "0x21..0x7E"),
    ("257-character key", {}, {"k" * 257: "v"}, E.LIMIT_EXCEEDED, "1..256"),
    ("unsupported dtype", {"x": np.zeros(2, np.float128)}, {}, E.BAD_DTYPE, "float128"),
    ("rank 9", {"x": np.zeros((1,) * 9)}, {}, E.BAD_RANK, "> 8"),
    # numpy cannot hold [2^40, 2^40, 0] at all; this is the largest kind of empty shape it can
    ("[2^30, 2^30, 0] float32", {"x": _huge((2**30, 2**30, 0), np.float32)}, {}, E.SIZE_OVERFLOW, "2^48"),
    ("a tensor of 2^48 + 1 bytes", {"x": _huge((2**48 + 1,))}, {}, E.SIZE_OVERFLOW, "2^48"),
    ("a file over 2^48 bytes", {"x": _huge((2**47,)), "y": _huge((2**47,))}, {}, E.HOST_LIMIT, "2^48"),
]


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
@pytest.mark.parametrize("what,tensors,metadata,code,words", LIMITS, ids=[c[0] for c in LIMITS])
def test_writer_refuses_what_readers_reject(reader, what, tensors, metadata, code, words, tmp_path):
    """Each limit raises KdtrError with the reader's code and the limit in the message, before any output."""
    with pytest.raises(kdtr.KdtrError) as e:
        kdtr.dumps(tensors, metadata)
    assert e.value.code == code, str(e.value)
    assert words in str(e.value)
    with pytest.raises(kdtr.KdtrError):
        kdtr.save(tmp_path / "f.kdtr", tensors, metadata)
    assert list(tmp_path.iterdir()) == [], "save left a file behind"


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
@pytest.mark.parametrize("align_log2", [5, 13, "6", 6.0])
def test_writer_refuses_bad_alignment(reader, align_log2):
    with pytest.raises(kdtr.KdtrError) as e:
        kdtr.dumps({}, align_log2=align_log2)
    assert e.value.code == E.BAD_ALIGNMENT


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
def test_writer_at_the_limits_is_read_back(reader):
    """Just inside every limit the writer writes and the reader reads back (and a zero dim next to
    2^48 / itemsize worth of other dims is an ordinary empty array)."""
    t = {"z" * 256: np.zeros(3, np.uint8), "e": _huge((2**23, 2**23, 0), np.float32), "n": np.zeros((1,) * 8)}
    m = {"k" * 256: "v" * (16 * MiB), "kdtr.x": "\U0010ffff"}
    f = kdtr.loads(kdtr.dumps(t, m, align_log2=np.int64(12)))
    assert f["e"].shape == (2**23, 2**23, 0) and f.metadata == m and f["z" * 256].tobytes() == bytes(3)


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
@given(
    content=hh.kdtr_contents(),
    name=st.text(max_size=3),
    value=st.text(max_size=3),
    dims=st.lists(st.sampled_from([0, 1, 2**23, 2**24, 2**47, 2**48]), max_size=3),
)
def test_writer_output_always_opens(reader, content, name, value, dims):
    """Whatever the writer writes, the reader opens; whatever it refuses is a KdtrError."""
    tensors, metadata, align_log2 = content
    try:
        extra = _huge(tuple(dims), np.float32)
    except ValueError:  # numpy itself cannot hold the shape
        assume(False)
    tensors = {**tensors, name or "_": extra}
    metadata = {**metadata, name or "_": value}
    try:
        data = kdtr.dumps(tensors, metadata, align_log2=align_log2)
    except kdtr.KdtrError:
        return
    f = kdtr.loads(data)
    assert set(f.infos) == set(tensors) and f.metadata == metadata
    assert all(f[n].shape == np.shape(a) for n, a in tensors.items())


# --- KDTR.2.4 publishing --------------------------------------------------------------------------------
@pytest.mark.spec("KDTR.2.4")
@pytest.mark.parametrize("reader", ["python"])
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_published_file_honours_the_umask(reader, umask, tmp_path):
    old = os.umask(umask)
    try:
        kdtr.save(tmp_path / "f.kdtr", {"x": np.zeros(1)})
    finally:
        os.umask(old)
    assert (tmp_path / "f.kdtr").stat().st_mode & 0o777 == 0o666 & ~umask


_HOLDER = r"""
import sys, time, numpy as np, kdtr
def hold(tmp):
    print(tmp, flush=True)
    time.sleep(600)
kdtr.save(sys.argv[1], {"x": np.zeros(4)}, _before_publish=hold)
"""


def _writer_holding_its_temp(path):
    """A writer stopped between writing its temp file and publishing it: (process, temp file name)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    return proc, os.path.basename(proc.stdout.readline().strip())


@pytest.mark.spec("KDTR.2.4")
@pytest.mark.parametrize("reader", ["python"])
def test_temp_files_of_dead_writers_removed_live_ones_kept(reader, tmp_path):
    dead, dead_tmp = _writer_holding_its_temp(tmp_path / "a.kdtr")
    live, live_tmp = _writer_holding_its_temp(tmp_path / "b.kdtr")
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait()
        os.mkfifo(tmp_path / f"{TEMP_PREFIX}fifo.tmp")  # never opened for writing: must not hang cleanup
        (tmp_path / f"{TEMP_PREFIX}dir.tmp").mkdir()
        (tmp_path / f"{TEMP_PREFIX}link.tmp").symlink_to(tmp_path / dead_tmp)
        (tmp_path / "other.tmp").write_bytes(b"not ours")
        assert {dead_tmp, live_tmp} <= {p.name for p in tmp_path.iterdir()}
        kdtr.save(tmp_path / "c.kdtr", {"x": np.zeros(1)})  # a later publish to the same folder
        names = {p.name for p in tmp_path.iterdir()}
        assert dead_tmp not in names, "a killed writer's temp file was left behind"
        assert live_tmp in names, "a live writer's temp file was removed"
        assert {f"{TEMP_PREFIX}fifo.tmp", f"{TEMP_PREFIX}dir.tmp", f"{TEMP_PREFIX}link.tmp", "other.tmp"} <= names
        assert remove_dead_temps(tmp_path) == []
    finally:
        live.kill()
        live.wait()
    assert remove_dead_temps(tmp_path) == [live_tmp]


class _Tagged(np.ndarray):
    """A subclass that adds nothing visible: still refused (the writer cannot know what it would drop)."""


SUBCLASSES = [
    ("masked array, nothing masked", np.ma.masked_array(np.arange(3.0)), "mask"),
    ("masked array, one value masked", np.ma.masked_array(np.arange(3.0), mask=[0, 1, 0]), "mask"),
    ("matrix", np.eye(2).view(np.matrix), "numpy.matrix"),
    ("recarray", np.arange(3.0).view(np.recarray), "recarray"),
    ("a user's subclass", np.arange(3).view(_Tagged), "_Tagged"),
]


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
@pytest.mark.parametrize("what,arr,words", SUBCLASSES, ids=[c[0] for c in SUBCLASSES])
def test_writer_refuses_array_subclasses(reader, what, arr, words, tmp_path):
    """A masked array's mask (and a subclass's other extras) would be silently dropped: refused, E19, naming
    the tensor, the subclass and the way out; save leaves nothing behind."""
    with pytest.raises(kdtr.KdtrError) as e:
        kdtr.dumps({"ok": np.zeros(2), "x": arr})
    assert e.value.code == E.BAD_DTYPE and e.value.name == "x" and e.value.entry == 1, str(e.value)
    assert words in e.value.message and "np.asarray(x)" in e.value.message
    with pytest.raises(kdtr.KdtrError):
        kdtr.save(tmp_path / "f.kdtr", {"x": arr})
    assert list(tmp_path.iterdir()) == []
    assert kdtr.loads(kdtr.dumps({"x": np.asarray(arr)}))["x"].tolist() == np.asarray(arr).tolist()


@pytest.mark.spec("KDTR.2.3")
@pytest.mark.parametrize("reader", ["python"])
def test_writer_takes_memmaps_and_array_likes(reader, tmp_path):
    """A memmap is plain data over a file; lists and scalars become the arrays np.asarray makes of them."""
    mm = np.memmap(tmp_path / "raw.bin", np.float32, "w+", shape=(2, 3))
    mm[:] = np.arange(6).reshape(2, 3)
    f = kdtr.loads(kdtr.dumps({"m": mm, "l": [1, 2], "s": np.int32(5)}))
    assert f["m"].tolist() == mm.tolist() and f["l"].tolist() == [1, 2] and f["s"] == 5


@pytest.mark.spec("KDTR.2.2")
@pytest.mark.parametrize("reader", ["python"])
def test_save_file_system_refusals_are_kdtr_errors(reader, tmp_path):
    """save raises KdtrError E90 naming the path (the OSError as its cause) where the file system refuses:
    a directory at the path (before anything is written), a folder that does not exist."""
    (tmp_path / "d.kdtr").mkdir()
    cases = [
        (tmp_path / "d.kdtr", "is a directory", "errno 21"),
        (tmp_path / "missing" / "f.kdtr", "No such file or directory", "errno 2"),
    ]
    for path, why, num in cases:
        with pytest.raises(kdtr.KdtrError) as e:
            kdtr.save(path, {"x": np.zeros(1)})
        assert e.value.code == E.IO and e.value.message == f"{path}: {why} ({num})", str(e.value)
        assert isinstance(e.value.__cause__, OSError)
    assert [p.name for p in tmp_path.iterdir()] == ["d.kdtr"] and not any((tmp_path / "d.kdtr").iterdir())

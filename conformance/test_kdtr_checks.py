"""Both outcomes of every reader check, at its boundary, in both readers (FORMAT.md §3).

The golden corpus has one failing file per code; a check reached only by that file would survive a wrong
variant (`<` for `<=`, one reserved byte forgotten, a swapped tie-break). Each case here is a file just
outside a limit (rejected with the code) or just inside it (accepted, or stopped by a later check with
another code), and both readers must give exactly the same answer: code, entry, name and message.
tools/kdtr_coverage.py measures that these cases and the rest of the suite take every branch.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

import kdtr
from harness import tools
from kdtr.describe import comparable, describe
from kdtr.testing import entry_offset, fix_crcs, fix_header_crc, index_offset, patch

E = kdtr.Code
U64 = 2**64


def base(**kw) -> bytearray:
    """Tensors a (F32 2x3), b (BOOL 4), c (I32 0x2, empty), d (U8 70); metadata k1, k2."""
    t = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 0, 1, 1], bool),
        "c": np.zeros((0, 2), np.int32),
        "d": np.arange(70, dtype=np.uint8),
    }
    return bytearray(kdtr.dumps(t, {"k1": "v1", "k2": "v\u00e4rde"}, **kw))


def one(data: bytes = b"\x01", *, name="x", dtype=np.uint8, shape=None, meta=None, align_log2=6) -> bytearray:
    a = np.frombuffer(data, dtype).reshape(shape if shape is not None else (-1,))
    return bytearray(kdtr.dumps({name: a}, meta or {}, align_log2=align_log2))


def hdr(off, value, size, b=None):
    """Header field changed, header CRC fixed."""
    return fix_header_crc(patch(b if b is not None else base(), off, value, size))


def idx(off, value, size, b=None):
    """Index field (offset inside the index) changed, CRCs fixed."""
    b = b if b is not None else base()
    return fix_crcs(patch(b, index_offset(b) + off, value, size))


def ent(i, off, value, size, b=None):
    """Tensor entry i's field changed, CRCs fixed."""
    b = b if b is not None else base()
    return fix_crcs(patch(b, entry_offset(b, i) + off, value, size))


def meta_entry(b) -> int:
    io = index_offset(b)
    T = struct.unpack_from("<I", b, io + 4)[0]
    return io + 32 + 128 * T


def gap_before_data() -> bytearray:
    b = one(b"\x07")  # x at 64, index at 128
    b[64:64] = bytes(64)
    patch(b, 32, 192, 8)
    return ent(0, 16, 128, 8, b)


def swapped_data() -> bytearray:
    """a's 24 bytes and b's 4 bytes trade their 64-byte slots: valid, not canonical."""
    b = base()
    a, bb = bytes(b[64:88]), bytes(b[128:132])
    b[64:128] = bb + bytes(60)
    b[128:192] = a + bytes(40)
    return ent(1, 16, 64, 8, ent(0, 16, 128, 8, b))


def heap_leftover() -> bytearray:
    b = base()
    io = index_offset(b)
    b += b"z"
    patch(b, io + 16, struct.unpack_from("<Q", b, io + 16)[0] + 1, 8)
    patch(b, 40, struct.unpack_from("<Q", b, 40)[0] + 1, 8)
    return fix_crcs(b)


def pad_after_header() -> bytearray:
    b = one(b"\x01", align_log2=7)
    b[100] = 1
    return fix_crcs(b)


def names(*ns) -> bytearray:
    return bytearray(kdtr.dumps({n: np.zeros(1, np.uint8) for n in ns}))


def renamed(b, new: bytes) -> bytearray:
    """Heap bytes replaced in place (same lengths), CRCs fixed."""
    io = index_offset(b)
    T, M = struct.unpack_from("<II", b, io + 4)
    h = io + 32 + 128 * T + 8 * M
    b[h : h + len(new)] = new
    return fix_crcs(b)


# id -> (builder, expected code or None for accepted)
CASES = {
    # 1: size
    "size-95": (lambda: base()[:95], E.TRUNCATED),
    "size-96": (lambda: base()[:96], E.FILE_SIZE_MISMATCH),
    # 3: endian tag, both messages
    "endian-swapped": (lambda: patch(base(), 12, 0x04030201, 4), E.BAD_ENDIAN),
    "endian-other": (lambda: patch(base(), 12, 0x01020305, 4), E.BAD_ENDIAN),
    # 5-8
    "major-0": (lambda: hdr(8, 0, 2), E.UNSUPPORTED_VERSION),
    "minor-7-ignored": (lambda: hdr(10, 7, 2), None),
    "incompat-bit31": (lambda: hdr(16, 1 << 31, 4), E.UNSUPPORTED_FEATURE),
    "compat-ignored": (lambda: hdr(20, 0xFFFFFFFF, 4), None),
    **{f"reserved-header-{o}": (lambda o=o: hdr(o, 1, 1), E.RESERVED_NONZERO) for o in (25, 31, 52, 59)},
    "align-13": (lambda: hdr(24, 13, 1), E.BAD_ALIGNMENT),
    "align-12-accepted-header": (lambda: hdr(24, 12, 1), E.INDEX_BOUNDS),
    # 9-11
    "index-offset-below-A": (lambda: hdr(32, 32, 8), E.INDEX_BOUNDS),
    "index-offset-unaligned": (lambda: hdr(32, 65, 8), E.INDEX_BOUNDS),
    "index-size-31": (lambda: hdr(40, 31, 8), E.INDEX_BOUNDS),
    "index-size-32": (lambda: hdr(40, 32, 8), E.FILE_SIZE_MISMATCH),
    "index-size-limit": (lambda: hdr(40, 64 << 20, 8), E.FILE_SIZE_MISMATCH),
    "index-size-limit+1": (lambda: hdr(40, (64 << 20) + 1, 8), E.INDEX_BOUNDS),
    "index-end-overflows": (lambda: hdr(32, U64 - 64, 8), E.FILE_SIZE_MISMATCH),
    "truncated-index": (lambda: base()[:-1], E.FILE_SIZE_MISMATCH),
    # 13-15
    **{f"reserved-index-{o}": (lambda o=o: idx(o, 1, 1), E.RESERVED_NONZERO) for o in (12, 15, 24, 31)},
    "tensor-count-limit": (lambda: idx(4, 262_144, 4), E.INDEX_LAYOUT),
    "meta-count-limit": (lambda: idx(8, 65_536, 4), E.INDEX_LAYOUT),
    "meta-count-limit+1": (lambda: idx(8, 65_537, 4), E.LIMIT_EXCEEDED),
    "heap-size-overflows": (lambda: idx(16, U64 - 1, 8), E.INDEX_LAYOUT),
    # 16-18 names
    "name-len-0": (lambda: ent(0, 0, 0, 2), E.LIMIT_EXCEEDED),
    "name-len-257": (lambda: ent(0, 0, 257, 2), E.LIMIT_EXCEEDED),
    "name-len-256-past-heap": (lambda: ent(0, 0, 256, 2), E.INDEX_LAYOUT),
    "name-256": (lambda: names("n" * 256), None),
    "name-0x21-0x7e": (lambda: names("!", "~"), None),
    "name-0x7f": (lambda: renamed(names("a"), b"\x7f"), E.BAD_NAME),
    "name-0x80": (lambda: renamed(names("a"), b"\x80"), E.BAD_NAME),
    "name-quote-backslash": (lambda: renamed(names("ab", "b"), b'a"\\'), E.UNSORTED),
    "names-prefix-first": (lambda: names("a", "ab"), None),
    "names-longer-first": (lambda: renamed(names("aa", "b"), b"aba"), E.UNSORTED),
    "names-shorter-second-same-prefix": (lambda: renamed(names("ab", "b"), b"aba"), E.UNSORTED),
    # 19-24 entries
    "dtype-0": (lambda: ent(0, 2, 0, 2), E.BAD_DTYPE),
    "dtype-18": (lambda: ent(0, 2, 18, 2), E.BAD_DTYPE),
    "rank-8": (lambda: one(bytes(1), shape=(1,) * 8), None),
    "rank-8-dim-7-set": (lambda: ent(0, 4, 7, 1, one(bytes(1), shape=(1,) * 8)), E.BAD_SHAPE),
    "dim-beyond-rank-last": (lambda: ent(0, 32 + 8 * 7, 1, 8), E.BAD_SHAPE),
    **{f"reserved-entry-{o}": (lambda o=o: ent(0, o, 1, 1), E.RESERVED_NONZERO) for o in (5, 7, 12, 15, 96, 127)},
    "empty-huge-dims": (
        lambda: ent(2, 32, 2**40, 8, ent(2, 40, 2**40, 8, ent(2, 48, 0, 8, ent(2, 4, 3, 1)))),
        E.SIZE_OVERFLOW,
    ),
    "empty-dim-over-2^48": (lambda: ent(2, 40, 2**48 + 1, 8), E.SIZE_OVERFLOW),
    "empty-at-limit": (lambda: ent(2, 40, 2**46, 8), None),  # I32: 4 * 2^46 = 2^48
    "empty-over-limit": (lambda: ent(2, 40, 2**46 + 1, 8), E.SIZE_OVERFLOW),
    "product-over-2^48": (lambda: ent(3, 32, 2**49, 8), E.SIZE_OVERFLOW),
    "product-overflows-u64": (lambda: ent(0, 32, 2**40, 8, ent(0, 40, 2**40, 8)), E.SIZE_OVERFLOW),
    "u8-2^48": (lambda: ent(3, 32, 2**48, 8), E.SIZE_MISMATCH),
    "empty-with-offset": (lambda: ent(2, 16, 64, 8), E.BAD_OFFSET),
    "data-at-0": (lambda: ent(0, 16, 0, 8), E.BAD_OFFSET),
    "data-past-u64": (lambda: ent(3, 16, U64 - 64, 8), E.OUT_OF_BOUNDS),  # offset + 70 wraps
    "data-past-index": (lambda: ent(0, 16, 4096, 8), E.OUT_OF_BOUNDS),
    "data-not-in-name-order": (swapped_data, None),
    "data-ends-at-index": (lambda: one(bytes(64)), None),
    # 25-27 metadata
    "key-len-0": (lambda: fix_crcs(patch(base(), meta_entry(base()), 0, 4)), E.LIMIT_EXCEEDED),
    "key-len-257": (lambda: fix_crcs(patch(base(), meta_entry(base()), 257, 4)), E.LIMIT_EXCEEDED),
    "key-past-heap": (lambda: fix_crcs(patch(base(), meta_entry(base()), 200, 4)), E.INDEX_LAYOUT),
    "keys-unsorted": (lambda: renamed(base(), b"abcdk3"), E.UNSORTED),
    "value-len-16MiB+1": (lambda: fix_crcs(patch(base(), meta_entry(base()) + 4, (16 << 20) + 1, 4)), E.LIMIT_EXCEEDED),
    "value-len-16MiB": (lambda: fix_crcs(patch(base(), meta_entry(base()) + 4, 16 << 20, 4)), E.INDEX_LAYOUT),
    "value-nul": (lambda: renamed(one(meta={"k": "ab"}), b"xka\x00"), E.BAD_UTF8),
    "value-max-code-point": (lambda: one(meta={"k": "\U0010ffff\ue000\ud7ff"}), None),
    "heap-leftover": (heap_leftover, E.INDEX_LAYOUT),
    # 28-31
    "gap-before-data": (gap_before_data, E.GAP),
    "pad-after-header": (pad_after_header, E.NONZERO_PADDING),
    "empty-tensor-crc": (lambda: fix_crcs(patch(base(), entry_offset(base(), 2) + 8, 1, 4), data=False), E.DATA_CRC),
    "bool-0-1": (lambda: one(bytes([0, 1, 1, 0]), dtype=np.bool_), None),
    "bool-255": (lambda: fix_crcs(patch(one(bytes([0, 1, 1, 0]), dtype=np.bool_), 67, 255, 1)), E.BAD_BOOL),
}
# UTF-8 values the strict check must refuse (overlong, surrogate, > U+10FFFF, truncated, bad lead/continuation)
for bad in [
    b"\xc0\x80",
    b"\xe0\x80\x80",
    b"\xf0\x80\x80\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc3",
    b"\xc3\x28",
    b"\x80",
    b"\xf8\x88\x80\x80\x80",
]:
    CASES[f"utf8-bad-{bad.hex()}"] = (
        lambda bad=bad: renamed(one(meta={"k": "v" * len(bad)}), b"x" + b"k" + bad),
        E.BAD_UTF8,
    )


def _params():
    out = []
    for name, (_, want) in CASES.items():
        out.append(pytest.param(name, want, id=name, marks=pytest.mark.spec("KDTR.4.3")))
    return out


@pytest.fixture(scope="module")
def cpp_reader(request):
    try:
        return tools.binary("kdtr-inspect")
    except tools.ToolMissing as e:
        (pytest.fail if request.config.getoption("--require-tools") else pytest.skip)(str(e))


@pytest.mark.parametrize("reader", ["cpp"])
@pytest.mark.parametrize("case,want", _params())
def test_check_boundary(reader, cpp_reader, case, want, tmp_path):
    data = bytes(CASES[case][0]())
    py = describe(data)
    got = py["code"] if not py["ok"] else None
    assert got == (want.tag if want else None), f"{case}: Python reader said {py}"
    p = tmp_path / "f.kdtr"
    p.write_bytes(data)
    assert comparable(tools.inspect(p)) == comparable(py)
    if py["ok"]:
        f = kdtr.loads(data)
        assert all(f[n].shape == t.shape for n, t in f.infos.items())  # every accepted tensor is an array


@pytest.mark.spec("KDTR.3.10")
@pytest.mark.parametrize("reader", ["python"])
def test_empty_tensors_with_huge_dims(reader):
    """At the bound an empty tensor is an ordinary (empty) array; one past it, or [2^40, 2^40, 0], is E22."""
    f = kdtr.loads(bytes(CASES["empty-at-limit"][0]()))
    assert f["c"].shape == (0, 2**46) and f["c"].size == 0
    for case in ("empty-over-limit", "empty-huge-dims", "empty-dim-over-2^48"):
        with pytest.raises(kdtr.KdtrError) as e:
            kdtr.loads(bytes(CASES[case][0]()))
        assert e.value.code == E.SIZE_OVERFLOW, case

"""Generate the KDTR golden corpus: kdtr/corpus/valid/<case>.kdtr, files both readers accept, and
kdtr/corpus/invalid/Ecc_<case>.kdtr, files both readers refuse with code cc.

    python -m kdtr.gen_corpus     # from the repository root; `make corpus` runs it

Every file is a small valid file with one thing changed, and the CRCs fixed again where the targeted check
comes after them, so that exactly the named check fires first. Three groups:
- PER_CODE: one file per error code, the classic golden set;
- BOUNDARY: each check at its limit, just outside (refused) and just inside (accepted, or stopped by a
  later check with another code): a check that only a far-away file reaches survives `<` for `<=`, one
  reserved byte forgotten, a swapped tie-break;
- EDGES: paths one file per code leaves unreached: alignments above 64, the first and the last byte of
  each pad, a rank-0 BOOL tensor's value, a data CRC or BOOL byte in the last byte or the last tensor.
conformance/test_kdtr_checks.py runs both readers over every file (with data verification on and off);
kdtr/coverage_gate.py fails unless every rejecting branch of both readers is taken by at least one of
these files alone; meta/test_layout.py fails when the committed files differ from what this makes.
"""

from __future__ import annotations

import pathlib
import shutil
import struct

import numpy as np

from .errors import Code
from .testing import entry_offset, fix_crcs, fix_header_crc, index_offset, patch
from .writer import dumps

OUT = pathlib.Path(__file__).resolve().parent / "corpus"
A = 64
U64 = 2**64
E = Code


def base(**kw) -> bytearray:
    """Tensors a (F32 2x3), b (BOOL 4), c (I32 0x2, empty), d (U8 70); metadata k1, k2."""
    t = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 0, 1, 1], bool),
        "c": np.zeros((0, 2), np.int32),
        "d": np.arange(70, dtype=np.uint8),
    }
    return bytearray(dumps(t, {"k1": "v1", "k2": "v\u00e4rde"}, **kw))


def one(data: bytes = b"\x01", *, name="x", dtype=np.uint8, shape=None, meta=None, align_log2=6) -> bytearray:
    """One tensor `name` of `data`'s bytes as `dtype` (shape (-1,) unless given)."""
    a = np.frombuffer(data, dtype).reshape(shape if shape is not None else (-1,))
    return bytearray(dumps({name: a}, meta or {}, align_log2=align_log2))


def two(align_log2: int) -> bytearray:
    """Tensors x (U8 1) and y (U8 3), data at A and 2A, the index at 3A."""
    return bytearray(dumps({"x": np.ones(1, np.uint8), "y": np.full(3, 9, np.uint8)}, align_log2=align_log2))


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


def data_offset(b, i) -> int:
    return struct.unpack_from("<Q", b, entry_offset(b, i) + 16)[0]


def heap(b) -> int:
    io = index_offset(b)
    T, M = struct.unpack_from("<II", b, io + 4)
    return io + 32 + 128 * T + 8 * M


def meta_entry(b) -> int:
    io = index_offset(b)
    T = struct.unpack_from("<I", b, io + 4)[0]
    return io + 32 + 128 * T


def byte_set(pos, value, b, *, crcs=True):
    """b[pos] = value, CRCs fixed (data CRCs too) unless crcs=False."""
    b[pos] = value
    return fix_crcs(b) if crcs else b


def renamed(b, new: bytes) -> bytearray:
    """Heap bytes replaced in place (same lengths), CRCs fixed."""
    h = heap(b)
    b[h : h + len(new)] = new
    return fix_crcs(b)


def names(*ns) -> bytearray:
    return bytearray(dumps({n: np.zeros(1, np.uint8) for n in ns}))


def gap_at(b, at: int, n: int, moved: list[int]) -> bytearray:
    """n zero bytes inserted at file offset `at`; the index offset and the given entries' offsets follow."""
    b[at:at] = bytes(n)
    patch(b, 32, index_offset(b) + n, 8)
    for i in moved:
        patch(b, entry_offset(b, i) + 16, data_offset(b, i) + n, 8)
    return fix_crcs(b)


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


def _entry(i, field, value, size):
    return lambda b: ent(i, field, value, size, b)


def _heap_byte(pos, value):
    return lambda b: byte_set(heap(b) + pos, value, b)


# One file per error code, from base(); heap layout of base(): "abcd" then "k1" "v1" "k2" "v\xc3\xa4rde".
PER_CODE = {
    "truncated": (lambda b: b[:50], E.TRUNCATED),
    "bad_magic": (lambda b: patch(b, 1, ord("X"), 1), E.BAD_MAGIC),
    "big_endian": (lambda b: patch(b, 12, 0x04030201, 4), E.BAD_ENDIAN),
    "header_crc": (lambda b: patch(b, 60, struct.unpack_from("<I", b, 60)[0] ^ 1, 4), E.HEADER_CRC),
    "version": (lambda b: hdr(8, 2, 2, b), E.UNSUPPORTED_VERSION),
    "incompat_flag": (lambda b: hdr(16, 1, 4, b), E.UNSUPPORTED_FEATURE),
    "reserved_header": (lambda b: hdr(30, 1, 1, b), E.RESERVED_NONZERO),
    "alignment": (lambda b: hdr(24, 5, 1, b), E.BAD_ALIGNMENT),
    "not_finalized": (lambda b: hdr(32, 0, 8, b), E.NOT_FINALIZED),
    "index_unaligned": (lambda b: hdr(32, index_offset(b) + 1, 8, b), E.INDEX_BOUNDS),
    "trailing_bytes": (lambda b: b + bytes(64), E.FILE_SIZE_MISMATCH),
    "index_crc": (lambda b: patch(b, heap(b), ord("z"), 1), E.INDEX_CRC),
    "index_magic": (lambda b: idx(3, ord("Y"), 1, b), E.INDEX_MAGIC),
    "too_many_tensors": (lambda b: idx(4, 262_145, 4, b), E.LIMIT_EXCEEDED),
    "heap_size": (lambda b: idx(16, struct.unpack_from("<Q", b, index_offset(b) + 16)[0] + 1, 8, b), E.INDEX_LAYOUT),
    "bad_name": (_heap_byte(0, 0x20), E.BAD_NAME),
    "duplicate_name": (_heap_byte(1, ord("a")), E.DUPLICATE_NAME),
    "unsorted_names": (_heap_byte(0, ord("e")), E.UNSORTED),
    "bad_dtype": (_entry(0, 2, 99, 2), E.BAD_DTYPE),
    "bad_rank": (_entry(0, 4, 9, 1), E.BAD_RANK),
    "dim_beyond_rank": (_entry(0, 32 + 8 * 5, 1, 8), E.BAD_SHAPE),
    "size_overflow": (lambda b: _entry(0, 40, 1 << 47, 8)(_entry(0, 32, 1 << 47, 8)(b)), E.SIZE_OVERFLOW),
    # empty, but [2^40, 2^40, 0] cannot be an array: itemsize x nonzero dims is bounded too (check 21)
    "empty_huge_dims": (
        lambda b: _entry(2, 4, 3, 1)(_entry(2, 48, 0, 8)(_entry(2, 40, 1 << 40, 8)(_entry(2, 32, 1 << 40, 8)(b)))),
        E.SIZE_OVERFLOW,
    ),
    "size_mismatch": (_entry(0, 32, 3, 8), E.SIZE_MISMATCH),
    "bad_offset": (_entry(0, 16, 65, 8), E.BAD_OFFSET),
    "out_of_bounds": (lambda b: _entry(3, 16, index_offset(b), 8)(b), E.OUT_OF_BOUNDS),
    "bad_meta_key": (_heap_byte(4, 0x20), E.BAD_META_KEY),
    "duplicate_meta_key": (_heap_byte(9, ord("1")), E.DUPLICATE_META_KEY),
    "bad_utf8": (_heap_byte(7, 0xFF), E.BAD_UTF8),
    "overlap": (lambda b: _entry(1, 16, data_offset(b, 0), 8)(b), E.OVERLAP),
    "gap": (lambda b: gap_at(b, index_offset(b), A, []), E.GAP),
    "nonzero_padding": (lambda b: byte_set(data_offset(b, 0) + 24, 1, b), E.NONZERO_PADDING),
    "data_crc": (lambda b: byte_set(data_offset(b, 0), 0x55, b, crcs=False), E.DATA_CRC),
    "bad_bool": (lambda b: byte_set(data_offset(b, 1), 2, b), E.BAD_BOOL),
}

# Each check at its limit: builder() -> bytes, and the code of the first check that fails (None: accepted).
BOUNDARY = {
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
    "index-size-limit-plus-1": (lambda: hdr(40, (64 << 20) + 1, 8), E.INDEX_BOUNDS),
    "index-end-overflows": (lambda: hdr(32, U64 - 64, 8), E.FILE_SIZE_MISMATCH),
    "truncated-index": (lambda: base()[:-1], E.FILE_SIZE_MISMATCH),
    # 13-15
    **{f"reserved-index-{o}": (lambda o=o: idx(o, 1, 1), E.RESERVED_NONZERO) for o in (12, 15, 24, 31)},
    "tensor-count-limit": (lambda: idx(4, 262_144, 4), E.INDEX_LAYOUT),
    "meta-count-limit": (lambda: idx(8, 65_536, 4), E.INDEX_LAYOUT),
    "meta-count-limit-plus-1": (lambda: idx(8, 65_537, 4), E.LIMIT_EXCEEDED),
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
    "empty-dim-over-2pow48": (lambda: ent(2, 40, 2**48 + 1, 8), E.SIZE_OVERFLOW),
    "empty-at-limit": (lambda: ent(2, 40, 2**46, 8), None),  # I32: 4 * 2^46 = 2^48
    "empty-over-limit": (lambda: ent(2, 40, 2**46 + 1, 8), E.SIZE_OVERFLOW),
    "product-over-2pow48": (lambda: ent(3, 32, 2**49, 8), E.SIZE_OVERFLOW),
    "product-overflows-u64": (lambda: ent(0, 32, 2**40, 8, ent(0, 40, 2**40, 8)), E.SIZE_OVERFLOW),
    "u8-2pow48": (lambda: ent(3, 32, 2**48, 8), E.SIZE_MISMATCH),
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
    "value-len-16MiB-plus-1": (
        lambda: fix_crcs(patch(base(), meta_entry(base()) + 4, (16 << 20) + 1, 4)),
        E.LIMIT_EXCEEDED,
    ),
    "value-len-16MiB": (lambda: fix_crcs(patch(base(), meta_entry(base()) + 4, 16 << 20, 4)), E.INDEX_LAYOUT),
    "value-nul": (lambda: renamed(one(meta={"k": "ab"}), b"xka\x00"), E.BAD_UTF8),
    "value-max-code-point": (lambda: one(meta={"k": "\U0010ffff\ue000\ud7ff"}), None),
    "heap-leftover": (heap_leftover, E.INDEX_LAYOUT),
    # 28-31
    "gap-before-data": (lambda: gap_at(one(b"\x07"), 64, 64, [0]), E.GAP),
    "pad-after-header": (lambda: byte_set(100, 1, one(b"\x01", align_log2=7)), E.NONZERO_PADDING),
    "empty-tensor-crc": (lambda: fix_crcs(patch(base(), entry_offset(base(), 2) + 8, 1, 4), data=False), E.DATA_CRC),
    "bool-0-1": (lambda: one(bytes([0, 1, 1, 0]), dtype=np.bool_), None),
    "bool-255": (lambda: byte_set(67, 255, one(bytes([0, 1, 1, 0]), dtype=np.bool_)), E.BAD_BOOL),
}
# UTF-8 values the strict check must refuse (overlong, surrogate, > U+10FFFF, truncated, bad lead/continuation)
for _bad in [
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
    BOUNDARY[f"utf8-bad-{_bad.hex()}"] = (
        lambda bad=_bad: renamed(one(meta={"k": "v" * len(bad)}), b"x" + b"k" + bad),
        E.BAD_UTF8,
    )

# Paths a file per code leaves unreached: an off-by-one there (a pad read one byte short, an alignment taken
# as 64, the BOOL check skipping rank 0 or the last byte) passes every file above.
EDGES = {
    "align-128-pad-after-header-first-byte": (lambda: byte_set(64, 1, one(align_log2=7)), E.NONZERO_PADDING),
    "align-128-pad-after-header-last-byte": (lambda: byte_set(127, 1, one(align_log2=7)), E.NONZERO_PADDING),
    "align-4096-pad-after-header-last-byte": (lambda: byte_set(4095, 1, one(align_log2=12)), E.NONZERO_PADDING),
    "pad-after-data-first-byte": (lambda: byte_set(65, 1, two(6)), E.NONZERO_PADDING),
    "pad-after-data-last-byte": (lambda: byte_set(127, 1, two(6)), E.NONZERO_PADDING),
    "pad-after-last-tensor-last-byte": (lambda: byte_set(191, 1, two(6)), E.NONZERO_PADDING),
    "align-4096-pad-after-data-last-byte": (lambda: byte_set(8191, 1, two(12)), E.NONZERO_PADDING),
    "align-4096-pad-after-last-tensor-last-byte": (lambda: byte_set(12287, 1, two(12)), E.NONZERO_PADDING),
    "align-128-offset-not-a-multiple": (lambda: ent(1, 16, 320, 8, two(7)), E.BAD_OFFSET),
    "align-4096-offset-below-A": (lambda: ent(0, 16, 4032, 8, two(12)), E.BAD_OFFSET),
    "align-4096-index-offset-unaligned": (lambda: hdr(32, 3 * 4096 + 64, 8, two(12)), E.INDEX_BOUNDS),
    "align-4096-gap-before-index": (lambda: gap_at(two(12), 3 * 4096, 4096, []), E.GAP),
    "align-4096-gap-before-data": (lambda: gap_at(two(12), 4096, 4096, [0, 1]), E.GAP),
    "align-4096-overlap": (lambda: ent(1, 16, 4096, 8, two(12)), E.OVERLAP),
    "align-4096-index-crc": (lambda: byte_set(heap(two(12)), ord("z"), two(12), crcs=False), E.INDEX_CRC),
    "align-4096-data-crc": (lambda: byte_set(4096, 7, two(12), crcs=False), E.DATA_CRC),
    "align-4096-every-dtype": (lambda: bytearray(every_dtype(align_log2=12)), None),
    "rank0-bool-true": (lambda: one(b"\x01", dtype=np.bool_, shape=()), None),
    "rank0-bool-2": (lambda: byte_set(64, 2, one(b"\x01", dtype=np.bool_, shape=())), E.BAD_BOOL),
    "bool-first-byte-3": (lambda: byte_set(64, 3, one(bytes([0, 1, 1, 0, 1]), dtype=np.bool_)), E.BAD_BOOL),
    "bool-in-the-last-tensor": (
        lambda: byte_set(192 + 4, 2, bytearray(dumps({"a": np.ones(3, np.uint8), "b": np.ones(70, bool)}))),
        E.BAD_BOOL,
    ),
    "data-crc-last-byte-of-the-last-tensor": (
        lambda: byte_set(data_offset(base(), 3) + 69, 0, base(), crcs=False),
        E.DATA_CRC,
    ),
}


def every_dtype(**kw) -> bytes:
    import ml_dtypes

    dtypes = [
        np.bool_,
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e5m2,
    ]
    every = {f"t{code:02d}": np.arange(6).astype(dt).reshape(2, 3) for code, dt in enumerate(dtypes, start=1)}
    return dumps(every, {"kdtr.note": "one tensor per dtype code"}, **kw)


VALID = {
    "empty": lambda: dumps({}),
    "base": lambda: bytes(base()),
    "every_dtype": every_dtype,
    "align4096_rank8": lambda: dumps(
        {"x": np.ones((1, 2, 1, 2, 1, 2, 1, 2), np.float32), "zero": np.zeros((3, 0))}, align_log2=12
    ),
}


def cases() -> dict[str, tuple[bytes, Code | None]]:
    """Every corpus file by case name: (bytes, the code both readers must give, None when they accept)."""
    out: dict[str, tuple[bytes, Code | None]] = {name: (make(), None) for name, make in VALID.items()}
    out.update({name: (bytes(make(base())), code) for name, (make, code) in PER_CODE.items()})
    for table in (BOUNDARY, EDGES):
        for name, (make, code) in table.items():
            assert name not in out, f"two corpus cases named {name}"
            out[name] = (bytes(make()), code)
    return out


def path_of(name: str, code: Code | None) -> str:
    """A case's file, relative to kdtr/corpus: valid/NAME.kdtr, or invalid/Ecc_NAME.kdtr."""
    return f"valid/{name}.kdtr" if code is None else f"invalid/{code.tag}_{name}.kdtr"


def generate() -> dict[str, bytes]:
    """Every corpus file's bytes by its path relative to kdtr/corpus."""
    return {path_of(name, code): data for name, (data, code) in cases().items()}


def main() -> None:
    """Rewrite kdtr/corpus/valid and kdtr/corpus/invalid (files of cases that are gone go too)."""
    files = generate()
    for sub in ("valid", "invalid"):
        shutil.rmtree(OUT / sub, ignore_errors=True)
    for rel, data in files.items():
        p = OUT / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    print(f"wrote {len(files)} files under {OUT}")


if __name__ == "__main__":
    main()

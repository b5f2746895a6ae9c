"""Generate the KDTR golden corpus: kdtr/corpus/valid/*.kdtr and one invalid file per error code.

Run `python tools/gen_kdtr_corpus.py` after changing the format; conformance/test_kdtr.py fails when the
committed files differ from what this script makes (the corpus is stale).
Each invalid file is a valid base file with one field changed and the CRCs fixed again where the
targeted check comes after them, so that exactly the named check fires first.
"""

from __future__ import annotations

import pathlib
import struct
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from kdtr import dumps
from kdtr.testing import entry_offset, fix_crcs, fix_header_crc, index_offset, patch

OUT = pathlib.Path(__file__).resolve().parent.parent / "kdtr" / "corpus"
A = 64


def base() -> bytearray:
    """Tensors a (F32 2x3), b (BOOL 4), c (I32 0x2, empty), d (U8 70); metadata k1, k2."""
    t = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 0, 1, 1], bool),
        "c": np.zeros((0, 2), np.int32),
        "d": np.arange(70, dtype=np.uint8),
    }
    return bytearray(dumps(t, {"k1": "v1", "k2": "v\u00e4rde"}))


def heap(buf) -> int:
    io = index_offset(buf)
    T, M = struct.unpack_from("<II", buf, io + 4)
    return io + 32 + 128 * T + 8 * M


def _entry(i, field, value, size):
    def f(b):
        return fix_crcs(patch(b, entry_offset(b, i) + field, value, size))

    return f


def _gap(b):
    io = index_offset(b)
    b[io:io] = bytes(A)
    return fix_header_crc(patch(b, 32, io + A, 8))


def _heap_byte(pos, value):
    def f(b):
        b[heap(b) + pos] = value
        return fix_crcs(b)

    return f


# heap layout of base(): "abcd" then "k1" "v1" "k2" "v\xc3\xa4rde"
INVALID = {
    "E01_truncated": lambda b: b[:50],
    "E02_bad_magic": lambda b: patch(b, 1, ord("X"), 1),
    "E03_big_endian": lambda b: patch(b, 12, 0x04030201, 4),
    "E04_header_crc": lambda b: patch(b, 60, struct.unpack_from("<I", b, 60)[0] ^ 1, 4),
    "E05_version": lambda b: fix_header_crc(patch(b, 8, 2, 2)),
    "E06_incompat_flag": lambda b: fix_header_crc(patch(b, 16, 1, 4)),
    "E07_reserved_header": lambda b: fix_header_crc(patch(b, 30, 1, 1)),
    "E08_alignment": lambda b: fix_header_crc(patch(b, 24, 5, 1)),
    "E09_not_finalized": lambda b: fix_header_crc(patch(b, 32, 0, 8)),
    "E10_index_unaligned": lambda b: fix_header_crc(patch(b, 32, index_offset(b) + 1, 8)),
    "E11_trailing_bytes": lambda b: b + bytes(64),
    "E12_index_crc": lambda b: patch(b, heap(b), ord("z"), 1),
    "E13_index_magic": lambda b: fix_crcs(patch(b, index_offset(b) + 3, ord("Y"), 1)),
    "E14_too_many_tensors": lambda b: fix_crcs(patch(b, index_offset(b) + 4, 262_145, 4)),
    "E15_heap_size": lambda b: fix_crcs(
        patch(b, index_offset(b) + 16, struct.unpack_from("<Q", b, index_offset(b) + 16)[0] + 1, 8)
    ),
    "E16_bad_name": _heap_byte(0, 0x20),
    "E17_duplicate_name": _heap_byte(1, ord("a")),
    "E18_unsorted_names": _heap_byte(0, ord("e")),
    "E19_bad_dtype": _entry(0, 2, 99, 2),
    "E20_bad_rank": _entry(0, 4, 9, 1),
    "E21_dim_beyond_rank": _entry(0, 32 + 8 * 5, 1, 8),
    "E22_size_overflow": lambda b: _entry(0, 40, 1 << 47, 8)(_entry(0, 32, 1 << 47, 8)(b)),
    # empty, but [2^40, 2^40, 0] cannot be an array: itemsize x nonzero dims is bounded too (check 21)
    "E22_empty_huge_dims": lambda b: _entry(2, 4, 3, 1)(
        _entry(2, 48, 0, 8)(_entry(2, 40, 1 << 40, 8)(_entry(2, 32, 1 << 40, 8)(b)))
    ),
    "E23_size_mismatch": _entry(0, 32, 3, 8),
    "E24_bad_offset": _entry(0, 16, 65, 8),
    "E25_out_of_bounds": lambda b: _entry(3, 16, index_offset(b), 8)(b),
    "E26_bad_meta_key": _heap_byte(4, 0x20),
    "E27_duplicate_meta_key": _heap_byte(9, ord("1")),
    "E28_bad_utf8": _heap_byte(7, 0xFF),
    "E29_overlap": lambda b: _entry(1, 16, struct.unpack_from("<Q", b, entry_offset(b, 0) + 16)[0], 8)(b),
    "E30_gap": _gap,
    "E31_nonzero_padding": lambda b: fix_crcs(
        patch(b, struct.unpack_from("<Q", b, entry_offset(b, 0) + 16)[0] + 24, 1, 1)
    ),
    "E33_data_crc": lambda b: patch(b, struct.unpack_from("<Q", b, entry_offset(b, 0) + 16)[0], 0x55, 1),
    "E34_bad_bool": lambda b: fix_crcs(patch(b, struct.unpack_from("<Q", b, entry_offset(b, 1) + 16)[0], 2, 1)),
}


def valid_files() -> dict[str, bytes]:
    import ml_dtypes

    every = {
        f"t{code:02d}": np.arange(6).astype(dt).reshape(2, 3)
        for code, dt in enumerate(
            [
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
            ],
            start=1,
        )
    }
    return {
        "empty": dumps({}),
        "base": bytes(base()),
        "every_dtype": dumps(every, {"kdtr.note": "one tensor per dtype code"}),
        "align4096_rank8": dumps(
            {"x": np.ones((1, 2, 1, 2, 1, 2, 1, 2), np.float32), "zero": np.zeros((3, 0))}, align_log2=12
        ),
    }


def generate() -> dict[str, bytes]:
    files = {f"valid/{k}.kdtr": v for k, v in valid_files().items()}
    files.update({f"invalid/{k}.kdtr": bytes(f(base())) for k, f in INVALID.items()})
    return files


if __name__ == "__main__":
    for rel, data in generate().items():
        p = OUT / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    print(f"wrote {len(generate())} files under {OUT}")

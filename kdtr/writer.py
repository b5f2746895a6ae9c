"""KDTR v1 canonical writer (FORMAT.md §2): only files that the readers open.

`dumps` checks every limit a reader enforces before it allocates anything for the output, and raises
`KdtrError` with the code a reader would give the file and the limit in the message. Publishing a file
atomically is kdtr/publish.py.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping

import numpy as np

from .errors import Code, KdtrError, sanitize
from .format import (
    DEFAULT_ALIGN_LOG2,
    DTYPES,
    ENDIAN_TAG,
    ENTRY_SIZE,
    HEADER_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_MAGIC,
    MAGIC,
    MAX_BYTES,
    MAX_INDEX,
    MAX_META,
    MAX_RANK,
    MAX_TENSORS,
    MAX_VALUE,
    META_ENTRY_SIZE,
    _strict_utf8,
    align_up,
    dtype_code,
    numpy_dtype,
    shape_size,
    valid_name,
)


def _name_bytes(n, i: int, what: str, bad: Code) -> bytes:
    """A name or key as bytes, checked as the reader checks it (length E14, then bytes)."""
    if not isinstance(n, str):
        raise KdtrError(bad, f"{what} must be a str, not {type(n).__name__}", entry=i, name=sanitize(repr(n).encode()))
    b = n.encode("utf-8", "surrogatepass")
    if not 1 <= len(b) <= 256:
        raise KdtrError(Code.LIMIT_EXCEEDED, f"{what}_len {len(b)} outside 1..256", entry=i, name=sanitize(b))
    if not valid_name(b):
        raise KdtrError(bad, f"{what} has bytes outside 0x21..0x7E", entry=i, name=sanitize(b))
    return b


def _plan(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str], align_log2: int):
    """Check every limit and lay the file out without copying any data: (tensor entries, metadata)."""
    if not isinstance(align_log2, int | np.integer) or not 6 <= align_log2 <= 12:
        raise KdtrError(Code.BAD_ALIGNMENT, f"align_log2 {align_log2} outside 6..12")
    if len(tensors) > MAX_TENSORS or len(metadata) > MAX_META:
        raise KdtrError(
            Code.LIMIT_EXCEEDED,
            f"tensor_count {len(tensors)} / meta_count {len(metadata)} over the limits {MAX_TENSORS} / {MAX_META}",
        )
    A = 1 << align_log2
    # names, keys and values first: they alone decide the index size, which is checked before any array
    named = sorted((_name_bytes(n, i, "name", Code.BAD_NAME), n) for i, n in enumerate(tensors))
    heap_size = sum(len(nb) for nb, _ in named)
    meta = []
    keyed = sorted((_name_bytes(k, j, "key", Code.BAD_META_KEY), k) for j, k in enumerate(metadata))
    for j, (kb, k) in enumerate(keyed):
        v = metadata[k]
        if not isinstance(v, str):
            raise KdtrError(Code.BAD_UTF8, f"value must be a str, not {type(v).__name__}", entry=j, name=sanitize(kb))
        vb = v.encode("utf-8", "surrogatepass")  # a lone surrogate then fails the strict check below
        if len(vb) > MAX_VALUE:
            raise KdtrError(Code.LIMIT_EXCEEDED, f"value_len {len(vb)} > 16 MiB", entry=j, name=sanitize(kb))
        if not _strict_utf8(vb):
            raise KdtrError(Code.BAD_UTF8, "value is not strict UTF-8 without NUL", entry=j, name=sanitize(kb))
        meta.append((kb, vb))
        heap_size += len(kb) + len(vb)
    index_size = INDEX_HEADER_SIZE + ENTRY_SIZE * len(named) + META_ENTRY_SIZE * len(meta) + heap_size
    if index_size > MAX_INDEX:
        raise KdtrError(Code.INDEX_BOUNDS, f"index_size {index_size} outside 32..{MAX_INDEX}")
    entries, data_end = [], A
    for i, (nb, n) in enumerate(named):
        arr = np.asarray(tensors[n])
        try:
            code = dtype_code(arr.dtype)
        except ValueError as e:
            raise KdtrError(Code.BAD_DTYPE, str(e), entry=i, name=sanitize(nb)) from None
        if arr.ndim > MAX_RANK:
            raise KdtrError(Code.BAD_RANK, f"rank {arr.ndim} > 8", entry=i, name=sanitize(nb))
        size = shape_size(DTYPES[code][1], arr.shape)
        if size is None:
            raise KdtrError(
                Code.SIZE_OVERFLOW, "itemsize x product of the nonzero dims exceeds 2^48", entry=i, name=sanitize(nb)
            )
        entries.append((nb, code, arr, size))
        data_end += align_up(size, A)
    if data_end + index_size > MAX_BYTES:
        raise KdtrError(Code.HOST_LIMIT, f"file is {data_end + index_size} bytes, more than 2^48")
    return entries, meta


def dumps(
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
    *,
    align_log2: int = DEFAULT_ALIGN_LOG2,
) -> bytes:
    """Canonical KDTR bytes: data in name order, every pad and reserved byte zero, no timestamps.

    The same arrays and metadata always give the same bytes, whatever the insertion order. Anything a
    reader would reject (name, dtype, rank, size, counts, index over 64 MiB, file over 2^48 bytes)
    raises KdtrError with the reader's code before any output is built.
    """
    entries, meta = _plan(tensors, dict(metadata or {}), align_log2)
    A = 1 << align_log2
    out = bytearray(A)  # header placeholder + zero pad up to A
    rows = []
    for nb, code, arr, size in entries:
        data = np.ascontiguousarray(arr, dtype=numpy_dtype(code)).tobytes()
        offset = 0
        if size:
            offset = len(out)
            out += data
            out += bytes(align_up(len(out), A) - len(out))
        rows.append((nb, code, arr.shape, offset, size, zlib.crc32(data)))
    index_offset = len(out)

    heap = b"".join(r[0] for r in rows) + b"".join(kb + vb for kb, vb in meta)
    idx = bytearray(struct.pack("<4sIIIQQ", INDEX_MAGIC, len(rows), len(meta), 0, len(heap), 0))
    for nb, code, shape, offset, nbytes, crc in rows:
        dims = list(shape) + [0] * (MAX_RANK - len(shape))
        idx += struct.pack("<HHB3xI4xQQ8Q32x", len(nb), code, len(shape), crc, offset, nbytes, *dims)
    idx += b"".join(struct.pack("<II", len(kb), len(vb)) for kb, vb in meta) + heap
    out += idx
    hdr = struct.pack(
        "<8sHHIIIB7xQQI8x", MAGIC, 1, 0, ENDIAN_TAG, 0, 0, align_log2, index_offset, len(idx), zlib.crc32(idx)
    )
    hdr += struct.pack("<I", zlib.crc32(hdr))
    out[:HEADER_SIZE] = hdr
    return bytes(out)

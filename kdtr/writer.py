"""KDTR v1 canonical writer (FORMAT.md §2): only files that the readers open.

`dumps` checks every limit a reader enforces before it allocates anything for the output, and raises
`KdtrError` with the code a reader would give the file and the limit in the message. Publishing a file
atomically is kdtr/publish.py.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import NamedTuple

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


# ndarray subclasses whose values are all there is to them (a memmap is an array over a file)
_PLAIN = (np.ndarray, np.memmap)


def _plain_array(value, i: int, nb: bytes) -> np.ndarray:
    """The array to store: a plain ndarray (or anything np.asarray makes one of). A subclass is refused
    (E19): a masked array's mask, a matrix's 2-D semantics, a recarray's field access would be silently
    dropped, and a reader would get back something else than was written."""
    if isinstance(value, np.ndarray) and type(value) not in _PLAIN:
        kind = "a masked array's mask" if isinstance(value, np.ma.MaskedArray) else "what the subclass adds"
        raise KdtrError(
            Code.BAD_DTYPE,
            f"{type(value).__module__}.{type(value).__qualname__} is an ndarray subclass; {kind} cannot be stored "
            "(pass np.asarray(x) to store the values alone, or x.filled(v) for a masked array)",
            entry=i,
            name=sanitize(nb),
        )
    return np.asarray(value)


class Entry(NamedTuple):
    """One tensor as laid out: name bytes, dtype code, the array, its byte size and absolute offset."""

    name: bytes
    code: int
    array: np.ndarray
    nbytes: int
    offset: int  # data in name order, each at a multiple of A; 0 when empty


def plan(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str], align_log2: int):
    """Check every limit and lay the file out without copying any data: (entries in name order, metadata as
    (key, value) bytes, index offset). KdtrError with the reader's code for anything a reader would reject."""
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
        arr = _plain_array(tensors[n], i, nb)
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
        entries.append(Entry(nb, code, arr, size, data_end if size else 0))
        data_end += align_up(size, A)
    if data_end + index_size > MAX_BYTES:
        raise KdtrError(Code.HOST_LIMIT, f"file is {data_end + index_size} bytes, more than 2^48")
    return entries, meta, data_end


def dumps(
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
    *,
    align_log2: int = DEFAULT_ALIGN_LOG2,
) -> bytes:
    """Canonical KDTR bytes: data in name order, every pad and reserved byte zero, no timestamps.

    The same arrays and metadata always give the same bytes, whatever the insertion order. Anything a
    reader would reject (name, dtype, rank, size, counts, index over 64 MiB, file over 2^48 bytes)
    raises KdtrError with the reader's code before any output is built, and so does an ndarray subclass
    (a masked array, a matrix: E19), whose extras a file cannot carry.
    """
    entries, meta, index_offset = plan(tensors, dict(metadata or {}), align_log2)
    out = bytearray(index_offset)  # header placeholder, zero pads, data slots
    crcs = []
    for e in entries:
        data = np.ascontiguousarray(e.array, dtype=numpy_dtype(e.code)).tobytes()
        out[e.offset : e.offset + e.nbytes] = data
        crcs.append(zlib.crc32(data))
    header, index = header_and_index(entries, crcs, meta, align_log2, index_offset)
    out[:HEADER_SIZE] = header
    return bytes(out + index)


def header_and_index(entries, crcs, meta, align_log2: int, index_offset: int) -> tuple[bytes, bytes]:
    """The 64-byte header and the index block of a file laid out by plan(), with each tensor's data CRC."""
    heap = b"".join(e.name for e in entries) + b"".join(kb + vb for kb, vb in meta)
    idx = bytearray(struct.pack("<4sIIIQQ", INDEX_MAGIC, len(entries), len(meta), 0, len(heap), 0))
    for e, crc in zip(entries, crcs, strict=True):
        shape = e.array.shape
        dims = list(shape) + [0] * (MAX_RANK - len(shape))
        idx += struct.pack("<HHB3xI4xQQ8Q32x", len(e.name), e.code, len(shape), crc, e.offset, e.nbytes, *dims)
    idx += b"".join(struct.pack("<II", len(kb), len(vb)) for kb, vb in meta) + heap
    hdr = struct.pack(
        "<8sHHIIIB7xQQI8x", MAGIC, 1, 0, ENDIAN_TAG, 0, 0, align_log2, index_offset, len(idx), zlib.crc32(idx)
    )
    return hdr + struct.pack("<I", zlib.crc32(hdr)), bytes(idx)

"""Tools for building deliberately broken KDTR files (golden corpus, mutation tests) and large ones.

`patch` overwrites a little-endian field; `fix_crcs` recomputes the header, index and (optionally)
data CRCs, so a mutation reaches the structural checks instead of stopping at a CRC. `sparse_file` writes
a canonical file whose large zero tensors are holes, for the bounded-memory tests.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

from .format import DEFAULT_ALIGN_LOG2, ENTRY_SIZE, HEADER_SIZE, INDEX_HEADER_SIZE, numpy_dtype
from .writer import header_and_index, plan


def patch(buf: bytearray, offset: int, value: int, size: int) -> bytearray:
    buf[offset : offset + size] = value.to_bytes(size, "little", signed=value < 0)
    return buf


def index_offset(buf) -> int:
    return struct.unpack_from("<Q", buf, 32)[0]


def entry_offset(buf, i: int) -> int:
    """File offset of tensor entry i (for patching its fields)."""
    return index_offset(buf) + INDEX_HEADER_SIZE + ENTRY_SIZE * i


def fix_crcs(buf: bytearray, *, data: bool = True) -> bytearray:
    io, isz = struct.unpack_from("<QQ", buf, 32)
    if data and 0 < io <= len(buf) and io + isz <= len(buf) and isz >= INDEX_HEADER_SIZE:
        T = struct.unpack_from("<I", buf, io + 4)[0]
        for i in range(min(T, (isz - INDEX_HEADER_SIZE) // ENTRY_SIZE)):
            e = io + INDEX_HEADER_SIZE + ENTRY_SIZE * i
            off, nb = struct.unpack_from("<QQ", buf, e + 16)
            if off + nb <= len(buf):
                struct.pack_into("<I", buf, e + 8, zlib.crc32(bytes(buf[off : off + nb])))
    if io + isz <= len(buf):
        struct.pack_into("<I", buf, 48, zlib.crc32(bytes(buf[io : io + isz])))
    return fix_header_crc(buf)


def fix_header_crc(buf: bytearray) -> bytearray:
    struct.pack_into("<I", buf, 60, zlib.crc32(bytes(buf[: HEADER_SIZE - 4])))
    return buf


def zeros_crc32(n: int, chunk: int = 1 << 24) -> int:
    """CRC-32 of n zero bytes, through one buffer of `chunk` bytes."""
    zero, crc = bytes(min(n, chunk)), 0
    for off in range(0, n, chunk):
        crc = zlib.crc32(zero[: min(chunk, n - off)], crc)
    return crc


def sparse_file(
    path, tensors, zeros, metadata=None, *, align_log2: int = DEFAULT_ALIGN_LOG2, data_crc: bool = True
) -> None:
    """Write the canonical KDTR file of `tensors` plus, for each name -> (shape, dtype) of `zeros`, a tensor of
    zeros left as a hole: a valid file of any size that takes no disk for those and no memory to write
    (the bytes are exactly kdtr.dumps' for the same arrays). data_crc=False leaves the holes' CRCs 0 (not
    computed: for files meant to fail before check 30)."""
    holes = {n: np.broadcast_to(np.zeros((), dt), shape) for n, (shape, dt) in zeros.items()}
    entries, meta, index_offset = plan({**tensors, **holes}, dict(metadata or {}), align_log2)
    crcs = []
    with open(path, "wb") as f:
        f.truncate(index_offset)
        for e in entries:
            if e.name.decode() in holes:
                crcs.append(zeros_crc32(e.nbytes) if data_crc else 0)
                continue
            data = np.ascontiguousarray(e.array, dtype=numpy_dtype(e.code)).tobytes()
            f.seek(e.offset)
            f.write(data)
            crcs.append(zlib.crc32(data))
        header, index = header_and_index(entries, crcs, meta, align_log2, index_offset)
        f.seek(0)
        f.write(header)
        f.seek(index_offset)
        f.write(index)


def is_sparse(path) -> bool:
    """Whether the file takes less disk than its size (the file system keeps holes)."""
    st = os.stat(path)
    return st.st_blocks * 512 < st.st_size // 2

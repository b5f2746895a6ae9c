"""Tools for building deliberately broken KDTR files (golden corpus, mutation tests).

`patch` overwrites a little-endian field; `fix_crcs` recomputes the header, index and (optionally)
data CRCs, so a mutation reaches the structural checks instead of stopping at a CRC.
"""

from __future__ import annotations

import struct
import zlib

from .format import ENTRY_SIZE, HEADER_SIZE, INDEX_HEADER_SIZE


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

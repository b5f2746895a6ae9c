"""KDTR v1 reader and the format's constants (normative text: kdtr/FORMAT.md).

The reader runs the checks of FORMAT.md §3 in exactly the listed order, with the same codes and messages
as the C++ reader in kdtr/include/kdtr.hpp, so that both reject a given file alike. All size arithmetic
is done on Python ints compared against 2**64 and 2**48 explicitly, mirroring the C++ checked u64
arithmetic. Tensor payloads are returned as read-only zero-copy numpy views. The writer is
kdtr/writer.py, publishing a file kdtr/publish.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import mmap
import os
import stat
import zlib

import numpy as np

from .errors import Code, KdtrArgumentError, KdtrError, sanitize

MAGIC = b"\x89KDTR\r\n\x1a"
INDEX_MAGIC = b"KDIX"
ENDIAN_TAG = 0x01020304
ENDIAN_TAG_SWAPPED = 0x04030201
HEADER_SIZE = 64
INDEX_HEADER_SIZE = 32
ENTRY_SIZE = 128
META_ENTRY_SIZE = 8
MAX_RANK = 8
MAX_NAME = 256
MAX_TENSORS = 262_144
MAX_META = 65_536
MAX_VALUE = 16 << 20
MAX_INDEX = 64 << 20
MAX_BYTES = 1 << 48  # file size, tensor size and every partial size product
U64 = 1 << 64
DEFAULT_ALIGN_LOG2 = 6

# dtype code -> (name, itemsize, numpy dtype or None when ml_dtypes is missing)
try:
    import ml_dtypes as _mld

    _BF16, _E4M3, _E5M2 = np.dtype(_mld.bfloat16), np.dtype(_mld.float8_e4m3fn), np.dtype(_mld.float8_e5m2)
except ImportError:  # pragma: no cover - ml_dtypes is a declared dependency
    _BF16 = _E4M3 = _E5M2 = None

DTYPES: dict[int, tuple[str, int, np.dtype | None]] = {
    1: ("BOOL", 1, np.dtype(np.bool_)),
    2: ("U8", 1, np.dtype("u1")),
    3: ("I8", 1, np.dtype("i1")),
    4: ("U16", 2, np.dtype("<u2")),
    5: ("I16", 2, np.dtype("<i2")),
    6: ("U32", 4, np.dtype("<u4")),
    7: ("I32", 4, np.dtype("<i4")),
    8: ("U64", 8, np.dtype("<u8")),
    9: ("I64", 8, np.dtype("<i8")),
    10: ("F16", 2, np.dtype("<f2")),
    11: ("BF16", 2, _BF16),
    12: ("F32", 4, np.dtype("<f4")),
    13: ("F64", 8, np.dtype("<f8")),
    14: ("C64", 8, np.dtype("<c8")),
    15: ("C128", 16, np.dtype("<c16")),
    16: ("F8_E4M3FN", 1, _E4M3),
    17: ("F8_E5M2", 1, _E5M2),
}
# raw fallbacks when ml_dtypes is absent: same bytes, tagged with the KDTR name
_RAW: dict[int, np.dtype] = {2: np.dtype("<u2"), 1: np.dtype("u1")}


def dtype_code(dt: np.dtype) -> int:
    """KDTR dtype code of a numpy dtype; ValueError naming the dtype when it has none."""
    dt = np.dtype(dt)
    base = dt.newbyteorder("<") if dt.byteorder == ">" else dt
    for code, (_, _, npdt) in DTYPES.items():
        if npdt is not None and base == npdt:
            return code
    raise ValueError(f"dtype {dt} has no KDTR v1 code (supported: {', '.join(n for n, _, _ in DTYPES.values())})")


def numpy_dtype(code: int) -> np.dtype:
    """The numpy dtype a tensor of KDTR dtype `code` is read as."""
    _name, size, npdt = DTYPES[code]
    return npdt if npdt is not None else _RAW[size]


def align_up(x: int, a: int) -> int:
    """x rounded up to a multiple of a."""
    return (x + a - 1) // a * a


_NAME_BYTES = bytes(range(0x21, 0x7F))


def valid_name(b: bytes) -> bool:
    """A tensor name or metadata key: 1..256 bytes in 0x21..0x7E."""
    return 1 <= len(b) <= MAX_NAME and not b.translate(None, _NAME_BYTES)  # deletes the allowed bytes


def shape_size(itemsize: int, dims) -> int | None:
    """FORMAT.md check 21: the tensor's byte size, or None when itemsize times the product of the nonzero
    dims exceeds 2^48. Bounding the zero-dim case too keeps every accepted shape representable as an
    array (numpy refuses [2^40, 2^40, 0] of float32)."""
    p = itemsize
    for d in dims:
        if d:
            p *= d
            if p > MAX_BYTES:
                return None
    return 0 if 0 in dims else p


def check_file_size(fsize: int) -> None:
    """FORMAT.md check 1, on the size alone (a path is checked before it is mapped)."""
    if fsize < HEADER_SIZE + INDEX_HEADER_SIZE:
        raise KdtrError(Code.TRUNCATED, f"file is {fsize} bytes, shorter than 96")
    if fsize > MAX_BYTES:
        raise KdtrError(Code.HOST_LIMIT, f"file is {fsize} bytes, more than 2^48")


# ------------------------------------------------------------------------------------------- reader
@dataclasses.dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype_code: int
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    crc32: int

    @property
    def dtype_name(self) -> str:
        """The KDTR dtype name ("F32")."""
        return DTYPES[self.dtype_code][0]


class KdtrFile:
    """A validated KDTR file: `infos` (name -> TensorInfo), `metadata`, and zero-copy tensor views."""

    def __init__(self, buf, infos: dict[str, TensorInfo], metadata: dict[str, str], align_log2: int):
        self._buf = buf
        self.infos = infos
        self.metadata = metadata
        self.align_log2 = align_log2

    def __contains__(self, name: str) -> bool:
        return name in self.infos

    def __getitem__(self, name: str) -> np.ndarray:
        """The tensor `name` as a read-only array (a view over the file for non-empty tensors)."""
        info = self.infos.get(name)
        if info is None:
            raise KdtrError(Code.NOT_FOUND, "no tensor of that name", name=sanitize(str(name).encode()))
        dt = numpy_dtype(info.dtype_code)
        if info.nbytes == 0:
            a = np.zeros(info.shape, dt)
            a.flags.writeable = False
            return a
        a = np.frombuffer(self._buf, dtype=dt, count=info.nbytes // dt.itemsize, offset=info.offset)
        return a.reshape(info.shape)

    def tensors(self) -> dict[str, np.ndarray]:
        """Every tensor, in name order."""
        return {n: self[n] for n in self.infos}


def _u16(b, o):
    return int.from_bytes(b[o : o + 2], "little")


def _u32(b, o):
    return int.from_bytes(b[o : o + 4], "little")


def _u64(b, o):
    return int.from_bytes(b[o : o + 8], "little")


# (what, code for bad bytes, code for a repeat): checks 16-18 for tensor names, 25 for metadata keys
_TENSOR_NAME = ("name", Code.BAD_NAME, Code.DUPLICATE_NAME)
_META_KEY = ("key", Code.BAD_META_KEY, Code.DUPLICATE_META_KEY)


def _take_name(idx: bytes, heap0: int, pos: int, S: int, length: int, prev: bytes | None, entry: int, kind):
    """The next name or key from the string heap, in check order: length (E14), inside the heap (E15),
    bytes 0x21..0x7E, strictly after the previous one (repeat, then E18). Returns (bytes, new heap position)."""
    what, bad, dup = kind
    if not 1 <= length <= MAX_NAME:
        raise KdtrError(Code.LIMIT_EXCEEDED, f"{what}_len {length} outside 1..256", entry=entry)
    if pos + length > S:
        raise KdtrError(Code.INDEX_LAYOUT, f"{what} runs past the string heap", entry=entry)
    nb = idx[heap0 + pos : heap0 + pos + length]
    if not valid_name(nb):
        raise KdtrError(bad, f"{what} has bytes outside 0x21..0x7E", entry=entry, name=sanitize(nb))
    if prev is not None and nb == prev:
        raise KdtrError(dup, f"{what} repeats the previous entry", entry=entry, name=sanitize(nb))
    if prev is not None and nb < prev:
        raise KdtrError(Code.UNSORTED, f"{what}s are not in ascending byte order", entry=entry, name=sanitize(nb))
    return nb, pos + length


def _strict_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8", "strict")  # rejects overlongs, surrogates, > U+10FFFF
    except UnicodeDecodeError:
        return False
    return b"\x00" not in b


def _byte_view(buf):
    """`buf` as one-byte items: an mmap as it is, anything else through a C-contiguous memoryview."""
    if isinstance(buf, mmap.mmap):
        return buf
    try:
        return memoryview(buf).cast("B")
    except TypeError:
        raise KdtrArgumentError(
            Code.IO,
            "kdtr.loads: buf must be a C-contiguous bytes-like object (bytes, bytearray, memoryview, mmap), "
            f"not {type(buf).__name__}",
        ) from None


@contextlib.contextmanager
def _allocation_is_an_error(what: str):
    """MemoryError (the index copy, a tensor's check under an address-space limit) as KdtrError E91."""
    try:
        yield
    except MemoryError:
        raise KdtrError(Code.ALLOC, f"cannot allocate memory to check {what}") from None


def loads(buf, *, verify_data: bool = True, check_bool: bool = True, max_index_size: int = MAX_INDEX) -> KdtrFile:
    """Validate `buf` (bytes, bytearray, memoryview or mmap) and return a KdtrFile over it.

    Any file it does not accept raises KdtrError with the check's code (FORMAT.md §3), E91 ALLOC when the
    memory to check it cannot be had; `buf` that is not a bytes-like object raises KdtrError E90 naming it (a
    KdtrArgumentError, which is a TypeError too).
    """
    view = _byte_view(buf)
    with _allocation_is_an_error("the file"):
        infos, metadata, align_log2 = _check_structure(lambda o, n: bytes(view[o : o + n]), len(view), max_index_size)
        _check_data(view, infos, verify_data, check_bool)
    return KdtrFile(buf, infos, metadata, align_log2)


def _check_structure(read, fsize: int, max_index_size: int):
    """Checks 1-29 (everything but the data) of a file of `fsize` bytes whose bytes read(offset, n) returns:
    the header, the index (one private copy, validated from then on: no double fetch) and the pads.
    Returns (infos, metadata, align_log2)."""
    # 1
    check_file_size(fsize)
    h = read(0, HEADER_SIZE)
    # 2-4
    if h[:8] != MAGIC:
        raise KdtrError(Code.BAD_MAGIC, f"magic is {h[:8].hex()}, expected {MAGIC.hex()}")
    tag = _u32(h, 12)
    if tag != ENDIAN_TAG:
        why = "written by a big-endian writer" if tag == ENDIAN_TAG_SWAPPED else f"endian tag 0x{tag:08x}"
        raise KdtrError(Code.BAD_ENDIAN, why)
    if zlib.crc32(h[:60]) != _u32(h, 60):
        raise KdtrError(Code.HEADER_CRC, f"header CRC 0x{_u32(h, 60):08x} != computed 0x{zlib.crc32(h[:60]):08x}")
    # 5-8
    if _u16(h, 8) != 1:
        raise KdtrError(Code.UNSUPPORTED_VERSION, f"major version {_u16(h, 8)}, this reader knows 1")
    if _u32(h, 16) != 0:
        raise KdtrError(Code.UNSUPPORTED_FEATURE, f"incompat_flags 0x{_u32(h, 16):08x}")
    if any(h[25:32]) or any(h[52:60]):
        raise KdtrError(Code.RESERVED_NONZERO, "reserved header bytes are not zero")
    align_log2 = h[24]
    if not 6 <= align_log2 <= 12:
        raise KdtrError(Code.BAD_ALIGNMENT, f"align_log2 {align_log2} outside 6..12")
    A = 1 << align_log2
    # 9-11
    index_offset, index_size = _u64(h, 32), _u64(h, 40)
    if index_offset == 0:
        raise KdtrError(Code.NOT_FINALIZED, "index_offset is 0 (file was never finalized)")
    if index_offset < A or index_offset % A:
        raise KdtrError(Code.INDEX_BOUNDS, f"index_offset {index_offset} is not a positive multiple of A={A}")
    if not INDEX_HEADER_SIZE <= index_size <= max_index_size:
        raise KdtrError(Code.INDEX_BOUNDS, f"index_size {index_size} outside 32..{max_index_size}")
    if index_offset + index_size >= U64:
        raise KdtrError(Code.FILE_SIZE_MISMATCH, "index_offset + index_size overflows 64 bits")
    if index_offset + index_size != fsize:
        raise KdtrError(Code.FILE_SIZE_MISMATCH, f"index ends at {index_offset + index_size}, file is {fsize} bytes")
    # 12: private copy of the index, validated from here on (no double fetch from the mapping)
    idx = read(index_offset, index_size)
    if zlib.crc32(idx) != _u32(h, 48):
        raise KdtrError(Code.INDEX_CRC, f"index CRC 0x{_u32(h, 48):08x} != computed 0x{zlib.crc32(idx):08x}")
    # 13-15
    if idx[:4] != INDEX_MAGIC:
        raise KdtrError(Code.INDEX_MAGIC, f"index magic is {idx[:4].hex()}, expected {INDEX_MAGIC.hex()}")
    if any(idx[12:16]) or any(idx[24:32]):
        raise KdtrError(Code.RESERVED_NONZERO, "reserved index header bytes are not zero")
    T, M, S = _u32(idx, 4), _u32(idx, 8), _u64(idx, 16)
    if T > MAX_TENSORS or M > MAX_META:
        raise KdtrError(
            Code.LIMIT_EXCEEDED, f"tensor_count {T} / meta_count {M} over the limits {MAX_TENSORS} / {MAX_META}"
        )
    total = INDEX_HEADER_SIZE + ENTRY_SIZE * T + META_ENTRY_SIZE * M + S
    if total >= U64 or total != index_size:
        raise KdtrError(Code.INDEX_LAYOUT, f"32+128*{T}+8*{M}+{S} != index_size {index_size}")
    heap0 = INDEX_HEADER_SIZE + ENTRY_SIZE * T + META_ENTRY_SIZE * M
    pos = 0
    infos: dict[str, TensorInfo] = {}
    prev = None
    # 16-24 per tensor entry
    for i in range(T):
        e = idx[INDEX_HEADER_SIZE + ENTRY_SIZE * i : INDEX_HEADER_SIZE + ENTRY_SIZE * (i + 1)]
        nb, pos = _take_name(idx, heap0, pos, S, _u16(e, 0), prev, i, _TENSOR_NAME)
        prev = nb
        name = nb.decode("ascii")
        shown = sanitize(nb)
        code = _u16(e, 2)
        if code not in DTYPES:
            raise KdtrError(Code.BAD_DTYPE, f"unknown dtype code {code}", entry=i, name=shown)
        rank = e[4]
        if rank > MAX_RANK:
            raise KdtrError(Code.BAD_RANK, f"rank {rank} > 8", entry=i, name=shown)
        dims = [_u64(e, 32 + 8 * d) for d in range(MAX_RANK)]
        if any(dims[rank:]):
            raise KdtrError(Code.BAD_SHAPE, "dims beyond the rank are not zero", entry=i, name=shown)
        if any(e[5:8]) or any(e[12:16]) or any(e[96:128]):
            raise KdtrError(Code.RESERVED_NONZERO, "reserved entry bytes are not zero", entry=i, name=shown)
        size = shape_size(DTYPES[code][1], dims[:rank])
        if size is None:
            raise KdtrError(
                Code.SIZE_OVERFLOW, "itemsize x product of the nonzero dims exceeds 2^48", entry=i, name=shown
            )
        nbytes, offset = _u64(e, 24), _u64(e, 16)
        if size != nbytes:
            raise KdtrError(Code.SIZE_MISMATCH, f"nbytes {nbytes} != dims x itemsize {size}", entry=i, name=shown)
        if (nbytes == 0 and offset != 0) or (nbytes != 0 and (offset % A or offset < A)):
            raise KdtrError(Code.BAD_OFFSET, f"offset {offset} (nbytes {nbytes}, A={A})", entry=i, name=shown)
        if offset + nbytes > index_offset:
            raise KdtrError(
                Code.OUT_OF_BOUNDS,
                f"data at {offset} of {nbytes} bytes runs past the index at {index_offset}",
                entry=i,
                name=shown,
            )
        infos[name] = TensorInfo(name, code, tuple(dims[:rank]), offset, nbytes, _u32(e, 8))
    # 25-26 metadata entries
    metadata: dict[str, str] = {}
    prev = None
    m0 = INDEX_HEADER_SIZE + ENTRY_SIZE * T
    for j in range(M):
        klen, vlen = _u32(idx, m0 + 8 * j), _u32(idx, m0 + 8 * j + 4)
        kb, pos = _take_name(idx, heap0, pos, S, klen, prev, j, _META_KEY)
        prev = kb
        key = kb.decode("ascii")
        shown = sanitize(kb)
        if vlen > MAX_VALUE:
            raise KdtrError(Code.LIMIT_EXCEEDED, f"value_len {vlen} > 16 MiB", entry=j, name=shown)
        if pos + vlen > S:
            raise KdtrError(Code.INDEX_LAYOUT, "value runs past the string heap", entry=j, name=shown)
        vb = idx[heap0 + pos : heap0 + pos + vlen]
        pos += vlen
        if not _strict_utf8(vb):
            raise KdtrError(Code.BAD_UTF8, "value is not strict UTF-8 without NUL", entry=j, name=shown)
        metadata[key] = vb.decode("utf-8")
    # 27
    if pos != S:
        raise KdtrError(Code.INDEX_LAYOUT, f"string heap has {S - pos} unreferenced bytes")
    # 28 coverage: every data byte belongs to exactly one tensor or one pad
    cur = A
    order = sorted((inf for inf in infos.values() if inf.nbytes), key=lambda t: t.offset)
    for inf in order:
        if inf.offset < cur:
            raise KdtrError(
                Code.OVERLAP, f"data at {inf.offset} overlaps bytes before {cur}", name=sanitize(inf.name.encode())
            )
        if inf.offset > cur:
            raise KdtrError(
                Code.GAP, f"gap of {inf.offset - cur} bytes before the data", name=sanitize(inf.name.encode())
            )
        cur = align_up(inf.offset + inf.nbytes, A)
    if cur != index_offset:
        raise KdtrError(Code.GAP, f"gap of {index_offset - cur} bytes before the index")
    # 29 padding
    if any(read(HEADER_SIZE, A - HEADER_SIZE)):
        raise KdtrError(Code.NONZERO_PADDING, "bytes between the header and the first alignment are not zero")
    for inf in order:
        end = inf.offset + inf.nbytes
        if any(read(end, align_up(end, A) - end)):
            raise KdtrError(Code.NONZERO_PADDING, "pad after the data is not zero", name=sanitize(inf.name.encode()))
    return infos, metadata, align_log2


CHUNK = 1 << 20  # BOOL bytes are checked through chunks of this size (memory stays bounded, as in C++)


def _check_data(view, infos: dict[str, TensorInfo], verify_data: bool, check_bool: bool) -> None:
    """Checks 30-31 on the file's bytes: data CRCs, then BOOL bytes (each only when asked)."""
    if verify_data:
        for inf in infos.values():
            crc = zlib.crc32(view[inf.offset : inf.offset + inf.nbytes]) if inf.nbytes else 0
            if crc != inf.crc32:
                raise KdtrError(
                    Code.DATA_CRC,
                    f"data CRC 0x{inf.crc32:08x} != computed 0x{crc:08x}",
                    name=sanitize(inf.name.encode()),
                )
    if check_bool:
        for inf in infos.values():
            if inf.dtype_code != 1:
                continue
            for off in range(inf.offset, inf.offset + inf.nbytes, CHUNK):
                n = min(CHUNK, inf.offset + inf.nbytes - off)
                if (np.frombuffer(view, np.uint8, n, off) > 1).any():
                    raise KdtrError(Code.BAD_BOOL, "BOOL byte other than 0 or 1", name=sanitize(inf.name.encode()))


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of `path` if it is a regular file, else KdtrError E90.

    Opened with O_NONBLOCK (a FIFO without a writer would otherwise hang open) and checked with fstat
    before anything is read, as the C++ reader's FileSource does.
    """
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise KdtrError(Code.IO, f"{p}: {e.strerror} (errno {e.errno})") from e
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise KdtrError(Code.IO, f"{p}: not a regular file")
    return fd


def _pread(fd: int, path: str):
    """read(offset, n) over a descriptor, for _check_structure: KdtrError E90 when the file cannot give the
    bytes it claimed to have (an I/O error, or it shrank since fstat)."""

    def read(offset: int, n: int) -> bytes:
        try:
            b = os.pread(fd, n, offset)
        except OSError as e:
            raise KdtrError(Code.IO, f"{path}: {e.strerror} (errno {e.errno})") from e
        if len(b) != n:
            raise KdtrError(Code.IO, f"{path}: file ended early (changed while read)")
        return b

    return read


def load(
    path: str | os.PathLike, *, verify_data: bool = True, check_bool: bool = True, max_index_size: int = MAX_INDEX
) -> KdtrFile:
    """Validate the regular file `path` and map it read-only; the returned views keep the mapping alive.

    The header, the index and the pads are read and checked before anything is mapped (a few KiB and the
    index, whatever the file's size), so a file that fails them costs no more than that; only then is the
    file mapped, and validated again in full, data included, so the views are exactly the bytes checked.
    Only KdtrError escapes: E90 IO when the path cannot be read, E91 ALLOC when the file cannot be mapped
    (an address-space limit) or the memory to check it cannot be had.
    """
    fd = open_regular(path)
    p = os.fspath(path)
    try:
        fsize = os.fstat(fd).st_size
        with _allocation_is_an_error(p):
            _check_structure(_pread(fd, p), fsize, max_index_size)
        try:
            mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except OSError as e:
            code = Code.ALLOC if e.errno == errno.ENOMEM else Code.IO
            raise KdtrError(code, f"{p}: cannot map its {fsize} bytes: {e.strerror} (errno {e.errno})") from e
    finally:
        os.close(fd)
    return loads(mm, verify_data=verify_data, check_bool=check_bool, max_index_size=max_index_size)

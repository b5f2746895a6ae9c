"""KDTR error codes (FORMAT.md §3). The codes are stable: the C++ reader uses the same numbers."""

from __future__ import annotations

import enum


class Code(enum.IntEnum):
    TRUNCATED = 1
    BAD_MAGIC = 2
    BAD_ENDIAN = 3
    HEADER_CRC = 4
    UNSUPPORTED_VERSION = 5
    UNSUPPORTED_FEATURE = 6
    RESERVED_NONZERO = 7
    BAD_ALIGNMENT = 8
    NOT_FINALIZED = 9
    INDEX_BOUNDS = 10
    FILE_SIZE_MISMATCH = 11
    INDEX_CRC = 12
    INDEX_MAGIC = 13
    LIMIT_EXCEEDED = 14
    INDEX_LAYOUT = 15
    BAD_NAME = 16
    DUPLICATE_NAME = 17
    UNSORTED = 18
    BAD_DTYPE = 19
    BAD_RANK = 20
    BAD_SHAPE = 21
    SIZE_OVERFLOW = 22
    SIZE_MISMATCH = 23
    BAD_OFFSET = 24
    OUT_OF_BOUNDS = 25
    BAD_META_KEY = 26
    DUPLICATE_META_KEY = 27
    BAD_UTF8 = 28
    OVERLAP = 29
    GAP = 30
    NONZERO_PADDING = 31
    HOST_LIMIT = 32
    DATA_CRC = 33
    BAD_BOOL = 34
    IO = 90
    ALLOC = 91
    NOT_FOUND = 92

    @property
    def tag(self) -> str:
        """'E07' style tag used in messages, golden file names and the C++ CLI."""
        return f"E{self.value:02d}"


def sanitize(b: bytes) -> str:
    """A name as messages show it: bytes 0x21..0x7E except '"' and '\\' as they are, anything else as \\xNN.

    The C++ reader (kdtr::sanitize) uses the same rule, so both readers print the same text; at most the
    first 256 bytes are shown.
    """
    return "".join(chr(c) if 0x21 <= c <= 0x7E and c not in (0x22, 0x5C) else f"\\x{c:02x}" for c in b[:256])


class KdtrError(Exception):
    """The only exception a KDTR reader (and, for what it cannot write, the writer) lets escape.

    `code` is stable across versions and across the Python and C++ readers; `entry` is the index of the
    tensor (or metadata) entry that failed, or None for file-level checks; `name` is the sanitized name;
    `message` the text after the colon. str() is the same text as the C++ `Error::what()`.
    """

    def __init__(self, code: Code, message: str, *, entry: int | None = None, name: str | None = None):
        self.code = Code(code)
        self.entry = entry
        self.name = name
        self.message = message
        where = ""
        if entry is not None:
            where += f" entry {entry}"
        if name:
            where += f' "{name}"'
        super().__init__(f"KDTR {self.code.tag} {self.code.name}{where}: {message}")


class KdtrArgumentError(KdtrError, TypeError):
    """`kdtr.loads` given something that is not a bytes-like object at all (a str, an int, None): a KdtrError
    like every other refusal of a reader (code E90 IO: there is nothing to read as a file), and a TypeError, as
    the caller's bug it is."""

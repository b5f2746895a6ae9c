"""The JSON description of a KDTR file, as `kdtr-inspect` prints it; used to compare the two readers."""

from __future__ import annotations

import zlib

from .errors import KdtrError
from .format import DTYPES, loads


def error_dict(e: KdtrError) -> dict:
    """A rejection as kdtr-inspect prints it: code, entry (None for file-level checks), name, message."""
    return {
        "ok": False,
        "code": e.code.tag,
        "entry": e.entry,
        "name": e.name or "",
        "message": e.message,
        "error": str(e),
    }


def describe(buf, *, verify: bool = True) -> dict:
    """Validate `buf` with the Python reader and describe it as kdtr-inspect does."""
    try:
        f = loads(buf, verify_data=verify)
    except KdtrError as e:
        return error_dict(e)
    mv = memoryview(buf)
    return {
        "ok": True,
        "align_log2": f.align_log2,
        "tensors": [
            {
                "name": t.name,
                "dtype": DTYPES[t.dtype_code][0],
                "shape": list(t.shape),
                "offset": t.offset,
                "nbytes": t.nbytes,
                "crc32": t.crc32,
                "data_crc32": zlib.crc32(mv[t.offset : t.offset + t.nbytes]) if t.nbytes else 0,
            }
            for t in f.infos.values()
        ],
        "metadata": dict(f.metadata),
    }


def comparable(d: dict) -> dict:
    """What must agree between readers: the whole rejection (code, entry, name, message), or the content."""
    if not d["ok"]:
        return {k: d[k] for k in ("ok", "code", "entry", "name", "message", "error")}
    return {k: d[k] for k in ("ok", "align_log2", "tensors", "metadata")}

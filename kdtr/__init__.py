"""KDTR v1: the binary tensor container shared by the Python harness and the C++ engine (FORMAT.md)."""

from .errors import Code, KdtrArgumentError, KdtrError
from .format import DTYPES, KdtrFile, TensorInfo, dtype_code, load, loads
from .publish import save
from .writer import dumps

__all__ = [
    "DTYPES",
    "Code",
    "KdtrArgumentError",
    "KdtrError",
    "KdtrFile",
    "TensorInfo",
    "dtype_code",
    "dumps",
    "load",
    "loads",
    "save",
]

"""atheris (libFuzzer for Python) target over the Python KDTR reader, with every check on.

    .venv/bin/python -m kdtr.fuzz CORPUS_DIR -max_total_time=60 -dict=kdtr/tools/kdtr.dict   # from the repo root

The custom mutator recomputes the CRCs of 15 of every 16 mutants (kdtr.testing.fix_crcs), so mutations
reach the checks behind them while inputs stay real KDTR files. An accepted input must give every tensor
as an array, be taken by the writer, re-read with the same content, and, when its data is in name order
and its informational header fields are 0, be its own canonical re-serialization. Anything other than
KdtrError escaping the reader, or a broken property, is a crash (the input is written as an artifact).
"""

from __future__ import annotations

import gc
import struct
import sys
import types

import atheris

import kdtr
from kdtr.testing import fix_crcs


def instrument_kdtr() -> int:
    """Add atheris's coverage instrumentation to every function of the loaded kdtr modules; returns how many.

    `python -m kdtr.fuzz` imports the kdtr package before this module runs, so atheris.instrument_imports
    (which instruments modules as they are imported) would find nothing left to instrument; the functions are
    patched in place instead (nested functions and lambdas with the function that holds them)."""
    funcs = [
        o
        for o in gc.get_objects()
        if isinstance(o, types.FunctionType) and (o.__module__ or "").partition(".")[0] == "kdtr"
    ]
    for fn in funcs:
        atheris.instrument_func(fn)
    return len(funcs)


def check(data: bytes) -> None:
    """The properties of one input (also used by the tests on the corpus)."""
    try:
        f = kdtr.loads(data)
    except kdtr.KdtrError:
        return
    arrays = f.tensors()  # every accepted shape is readable as an array
    for name, a in arrays.items():
        info = f.infos[name]
        assert a.shape == info.shape and a.nbytes == info.nbytes, name
    out = kdtr.dumps(arrays, f.metadata, align_log2=f.align_log2)  # the writer takes what the reader took
    g = kdtr.loads(out)
    assert g.metadata == f.metadata and list(g.infos) == list(f.infos)
    for name, a in arrays.items():
        assert g[name].tobytes() == a.tobytes() and g[name].dtype == a.dtype, name
    minor, compat = struct.unpack_from("<H", data, 10)[0], struct.unpack_from("<I", data, 20)[0]
    offsets = [t.offset for t in f.infos.values() if t.nbytes]
    if minor == 0 and compat == 0 and offsets == sorted(offsets):
        assert out == bytes(data), "a valid file with its data in name order is not canonical"


def mutate(data: bytes, max_size: int, seed: int) -> bytes:
    """libFuzzer's own mutation, then CRCs fixed up for 15 of every 16 mutants."""
    data = atheris.Mutate(data, max_size)
    if seed % 16 and len(data) >= 64:
        data = bytes(fix_crcs(bytearray(data)))
    return data


if __name__ == "__main__":
    print(f"INFO: instrumented {instrument_kdtr()} functions of the kdtr package", file=sys.stderr)
    atheris.Setup(sys.argv, check, custom_mutator=mutate)
    atheris.Fuzz()

"""Hypothesis strategies shared by the suites (the array-api-tests `hh` module)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

# ------------------------------------------------------------------------------------------- KDTR
KDTR_DTYPES = [np.dtype(d) for d in (np.bool_, np.uint8, np.int8, "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2",
                                     ml_dtypes.bfloat16, "<f4", "<f8", "<c8", "<c16", ml_dtypes.float8_e4m3fn,
                                     ml_dtypes.float8_e5m2)]
NAME_CHARS = "".join(chr(c) for c in range(0x21, 0x7F))


def kdtr_names(max_size: int = 12):
    return st.text(NAME_CHARS, min_size=1, max_size=max_size)


@st.composite
def kdtr_array(draw):
    dt = draw(st.sampled_from(KDTR_DTYPES), label="dtype")
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=8, min_side=0, max_side=3), label="shape")
    n = int(np.prod(shape)) if shape else 1
    raw = draw(st.binary(min_size=n * dt.itemsize, max_size=n * dt.itemsize), label="bytes")
    a = np.frombuffer(raw, np.uint8).view(dt) if dt.kind != "b" else np.frombuffer(raw, np.uint8).astype(bool)
    return a.reshape(shape)


def kdtr_contents():
    tensors = st.dictionaries(kdtr_names(), kdtr_array(), max_size=6)
    values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
    metadata = st.dictionaries(kdtr_names().filter(lambda k: not k.startswith("kdtr.")), values, max_size=4)
    return st.tuples(tensors, metadata, st.sampled_from([6, 7, 12]))

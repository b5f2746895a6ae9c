"""Meta tests of harness.compare (array-api-tests' meta_tests idea): the helpers themselves must be right."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from harness.compare import assert_bit_exact, assert_close, check_bit_exact, check_close, ulp_distance

FLOATS = [np.float16, np.float32, np.float64]


@given(x=st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_ulp_distance_of_next_float_is_one(x):
    a = np.array([x], np.float32)
    b = np.nextafter(a, np.float32(np.inf))
    assert ulp_distance(a, b)[0] == 1


@given(
    a=hnp.arrays(np.float32, 8, elements=st.floats(width=32, allow_nan=False)),
    b=hnp.arrays(np.float32, 8, elements=st.floats(width=32, allow_nan=False)),
)
def test_ulp_distance_symmetric_and_zero_iff_equal(a, b):
    d = ulp_distance(a, b)
    assert (d == ulp_distance(b, a)).all()
    assert ((d == 0) == (a == b)).all()  # -0 and +0 are 0 ulp apart, and compare equal


def test_ulp_distance_crosses_zero_and_handles_float64_extremes():
    assert ulp_distance(np.array([-0.0]), np.array([0.0]))[0] == 0
    tiny = np.array([np.finfo(np.float32).smallest_subnormal], np.float32)
    assert ulp_distance(-tiny, tiny)[0] == 2
    big = np.array([np.finfo(np.float64).max])
    assert ulp_distance(-big, big)[0] == 2 * 0x7FEFFFFFFFFFFFFF
    assert ulp_distance(np.array([np.nan]), np.array([np.nan]))[0] == np.iinfo(np.uint64).max


def test_bit_exact_rejects_signed_zero_and_nan_payloads():
    with pytest.raises(AssertionError, match="not bit-exact"):
        assert_bit_exact(np.array([0.0], np.float32), np.array([-0.0], np.float32), what="y")
    q1 = np.array([0x7FC00000], np.uint32).view(np.float32)
    q2 = np.array([0x7FC00001], np.uint32).view(np.float32)
    with pytest.raises(AssertionError):
        assert_bit_exact(q1, q2, what="y")
    assert_bit_exact(q1, q1.copy(), what="y")


def test_bit_exact_bf16_and_bool():
    a = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    b = a.copy()
    b[1] = ml_dtypes.bfloat16(2.015625)
    assert check_bit_exact(a, b, what="y").first_index == (1,)
    assert check_bit_exact(np.array([True]), np.array([True]), what="m") is None


@given(a=hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6)), data=st.data())
def test_first_index_is_first_in_c_order(a, data):
    b = a.copy()
    flips = data.draw(st.lists(st.integers(0, a.size - 1), min_size=1, max_size=4, unique=True))
    b.reshape(-1)[flips] ^= 1
    m = check_bit_exact(b, a, what="y")
    assert m.first_index == tuple(np.argwhere(a != b)[0]) and m.count == len(flips)


def test_message_names_output_clause_window_and_worst():
    a = np.ones(20, np.float32)
    b = a.copy()
    b[7] = np.nextafter(np.float32(1), np.float32(2))
    b[12] = 1.5
    with pytest.raises(AssertionError) as e:
        assert_close(b, a, max_ulp=1, what="out", spec_id="TV.4.1", context={"bs": 2})
    msg = str(e.value)
    for s in (
        "'out'",
        "[TV.4.1]",
        "1 / 20",
        "first mismatch at (12,)",
        "worst: ulp=",
        "3fc00000",
        "^^^^^^^^",
        "bs=2",
        "repro",
    ):
        assert s in msg, (s, msg)


def test_tolerance_must_be_explicit_and_both_or_neither():
    a = np.ones(3, np.float32)
    with pytest.raises(ValueError, match=r"both|together"):
        assert_close(a, a, rtol=1e-3, what="y")
    with pytest.raises(ValueError, match="exactly one"):
        assert_close(a, a, what="y")
    with pytest.raises(ValueError, match="exactly one"):
        assert_close(a, a, max_ulp=1, rtol=0.0, atol=0.0, what="y")


def test_preconditions_dtype_and_shape():
    with pytest.raises(AssertionError, match="dtype"):
        assert_bit_exact(np.ones(2, np.float32), np.ones(2, np.float64), what="y")
    with pytest.raises(AssertionError, match="shape"):
        assert_bit_exact(np.ones(2), np.ones(3), what="y")
    with pytest.raises(TypeError):
        assert_bit_exact([1.0], np.ones(1), what="y")


@pytest.mark.parametrize("dt", FLOATS)
def test_close_nan_and_inf_positions_must_match(dt):
    e = np.array([np.nan, np.inf, 1.0], dt)
    assert check_close(e.copy(), e, rtol=1e-3, atol=0.0, what="y") is None
    for bad in ([1.0, np.inf, 1.0], [np.nan, 1e4, 1.0], [np.nan, -np.inf, 1.0], [np.nan, np.inf, np.nan]):
        assert check_close(np.array(bad, dt), e, rtol=1e-1, atol=1e9 if dt != np.float16 else 6e4, what="y") is not None


@given(x=hnp.arrays(np.float64, 16, elements=st.floats(-1e6, 1e6)), r=st.floats(1e-6, 1e-2))
def test_rel_tolerance_boundary(x, r):
    assert check_close(x * (1 + r / 2), x, rtol=r, atol=0.0, what="y") is None
    bumped = x + np.where(x == 0, 1.0, np.abs(x) * r * 4)
    assert check_close(bumped, x, rtol=r, atol=0.0, what="y") is not None

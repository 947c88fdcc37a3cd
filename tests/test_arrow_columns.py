"""Arrays built from buffers equal the ones pyarrow builds from the same lists."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spag.data.columns import build_array


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text()), max_size=40))
def test_strings(values):
    got = build_array(values, pa.string())
    got.validate(full=True)
    assert got.equals(pa.array(values, type=pa.string()))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False)), max_size=40),
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), max_size=40),
)
def test_numbers(floats, ints):
    f = build_array(floats, pa.float64())
    i = build_array(ints, pa.int64())
    f.validate(full=True)
    i.validate(full=True)
    assert f.equals(pa.array(floats, type=pa.float64()))
    assert i.equals(pa.array(ints, type=pa.int64()))

"""Arrow arrays built from Python lists through their buffers.

``pyarrow.array`` on a Python list imports pandas the first time it is called
(a quarter of a second or more), which the light steps (judging, rewards)
cannot afford on every run. These builders produce the same arrays from the
raw buffers and never touch pandas.
"""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence

import pyarrow as pa

_INT32_MAX = 2**31 - 1


def _validity(values: Sequence[object]) -> pa.Buffer | None:
    """Validity bitmap (LSB first) of ``values``, or None when nothing is null."""
    if None not in values:
        return None
    bits = bytearray((len(values) + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i >> 3] |= 1 << (i & 7)
    return pa.py_buffer(bytes(bits))


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A ``string`` array (``large_string`` beyond 2 GiB of text)."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = [0, *itertools.accumulate(map(len, encoded))]
    large = offsets[-1] > _INT32_MAX
    offset_buf = pa.py_buffer(array.array("q" if large else "i", offsets).tobytes())
    arr_type = pa.large_string() if large else pa.string()
    return pa.Array.from_buffers(
        arr_type, len(values), [_validity(values), offset_buf, pa.py_buffer(b"".join(encoded))]
    )


def float64_array(values: Sequence[float | None]) -> pa.Array:
    data = array.array("d", [0.0 if v is None else v for v in values])
    return pa.Array.from_buffers(
        pa.float64(), len(values), [_validity(values), pa.py_buffer(data.tobytes())]
    )


def int64_array(values: Sequence[int | None]) -> pa.Array:
    data = array.array("q", [0 if v is None else v for v in values])
    return pa.Array.from_buffers(
        pa.int64(), len(values), [_validity(values), pa.py_buffer(data.tobytes())]
    )


_BUILDERS = {pa.string(): string_array, pa.float64(): float64_array, pa.int64(): int64_array}


def build_array(values: Sequence[object], arrow_type: pa.DataType) -> pa.Array:
    """An array of ``arrow_type`` (string, float64 or int64) holding ``values``."""
    arr = _BUILDERS[arrow_type](values)
    return arr if arr.type == arrow_type else arr.cast(arrow_type)

"""bitwise.where and bitwise.kept select the bits np.where selects."""

from __future__ import annotations

import numpy as np
import pytest

from mil_passes.reference import bitwise


def _values(dtype, rng, count=4000) -> np.ndarray:
    info = np.finfo(dtype)
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, info.smallest_subnormal, -info.smallest_subnormal, info.max],
        dtype,
    )
    payload = np.array([0x7FF8_0000_0000_1234], np.uint64).view(np.float64).astype(dtype)  # a NaN with a payload
    return np.concatenate([special, payload, (rng.standard_normal(count) * 100).astype(dtype)])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_where_has_the_bits_of_np_where(dtype):
    rng = np.random.default_rng(1)
    a, b = _values(dtype, rng), _values(dtype, rng)[::-1].copy()
    mask = rng.random(a.size) < 0.5
    cases = [
        (mask, a, b),  # arrays
        (mask, a, 2.0),  # a scalar made one of a's dtype
        (mask[::2], a[::2], b[1::2]),  # strided
        (mask.reshape(-1, 1)[:5], a[:7], b[:7]),  # broadcast
        (np.asarray(True), a[3], b[3]),  # 0-d
        (np.asarray(False), a[3], b[3]),
    ]
    for m, x, y in cases:
        got = bitwise.where(m, x, y)
        expected = np.where(m, x, np.asarray(y, dtype))
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_kept_is_x_or_positive_zero(dtype):
    rng = np.random.default_rng(2)
    x = _values(dtype, rng)
    keep = rng.random(x.size) < 0.5
    for part, mask in ((x, keep), (x[::3], keep[::3]), (x[5], keep[5])):
        expected = np.where(mask, part, np.zeros((), dtype))
        got = bitwise.kept(part, mask)
        assert got.dtype == dtype and got.tobytes() == expected.tobytes()

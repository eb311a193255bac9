"""rounded.evaluate and rounded.along run in blocks of about CHUNK elements: each element (each row)
comes out as it does alone, broadcast operands included."""

from __future__ import annotations

import numpy as np

from mil_passes.reference import rounded
from mil_passes.reference.kernels import activation, core


def _elu(fn, x, alpha):
    return np.where(x > 0, x, alpha * fn.expm1(np.minimum(x, 0.0)))


def test_evaluate_blocks_match_each_element_alone():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, rounded.CHUNK // 2 + 7)) * 4).astype(np.float32)
    alpha = np.array([[0.5], [1.0], [2.0]], np.float32)  # broadcast along the rows
    whole = rounded.evaluate(_elu, np.float32, x, alpha)
    assert whole.shape == x.shape and whole.dtype == np.float64
    picks = rng.integers(0, x.size, 200)
    for flat in picks:
        row, column = divmod(int(flat), x.shape[1])
        alone = rounded.evaluate(_elu, np.float32, x[row, column], alpha[row, 0])
        assert alone.tobytes() == whole[row, column].tobytes()


def test_evaluate_of_scalar_and_empty():
    assert rounded.evaluate(activation._gelu_exact, np.float32, np.float32(1.5)).shape == ()
    assert rounded.evaluate(activation._gelu_exact, np.float32, np.zeros((0, 4), np.float32)).shape == (0, 4)


def test_along_blocks_match_each_row_alone():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 700, 97)) * 6).astype(np.float32)  # 1,400 rows: several blocks
    whole = rounded.along(core._softmax_rows, np.float32, x, (2,))
    for row in rng.integers(0, 700, 20):
        alone = rounded.along(core._softmax_rows, np.float32, x[1, row : row + 1], (1,))
        assert alone.tobytes() == whole[1, row : row + 1].tobytes()
    middle = rounded.along(core._softmax_rows, np.float32, x, (1,))  # a moved axis
    np.testing.assert_array_equal(middle[0, :, 5], rounded.along(core._softmax_rows, np.float32, x[0, :, 5], (0,)))

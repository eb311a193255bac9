"""reverse_sequence against a per-slice numpy reversal (tf.reverse_sequence's definition)."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import assert_same, run
from mil_passes.reference.errors import PredictionError


def _expected(x: np.ndarray, lengths, seq_axis: int, batch_axis: int) -> np.ndarray:
    out = x.copy()
    for b, length in enumerate(lengths):
        index = [slice(None)] * x.ndim
        index[batch_axis] = b
        index[seq_axis] = slice(0, length)
        out[tuple(index)] = np.flip(x[tuple(index)], axis=seq_axis - (batch_axis < seq_axis))
    return out


@pytest.mark.parametrize(
    "seq_axis, batch_axis, lengths",
    [
        (1, 0, [7, 2, 3, 5]),  # coremltools' own smoke test's layout
        (0, 1, [0, 1, 3, 2]),
        (-1, 0, [1, 4, 2, 7]),
        (2, 3, [1, 2, 3, 4, 3]),
    ],
)
def test_reverse_sequence_reverses_the_first_lengths_of_each_slice(seq_axis, batch_axis, lengths):
    shape = {(1, 0): (4, 7, 3, 5), (0, 1): (3, 4, 2, 5), (-1, 0): (4, 3, 2, 7), (2, 3): (2, 3, 4, 5)}[
        (seq_axis, batch_axis)
    ]
    x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    build = lambda x: mb.reverse_sequence(
        x=x, lengths=np.array(lengths, np.int32), seq_axis=seq_axis, batch_axis=batch_axis
    )
    (got,) = run(build, {"x": x})
    assert_same(got, _expected(x, lengths, seq_axis % x.ndim, batch_axis))


def test_reverse_sequence_refuses_lengths_out_of_range_naming_the_op_and_input():
    x = np.zeros((2, 3), np.float32)
    build = lambda x: mb.reverse_sequence(x=x, lengths=np.array([1, 4], np.int32), seq_axis=1, batch_axis=0)
    with pytest.raises(PredictionError, match=r"reverse_sequence '.*': input 'lengths' has 4, outside \[0, 3\]"):
        run(build, {"x": x})

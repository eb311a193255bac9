"""The one reading of slice and reshape parameters, checked against coremltools' own readings."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil._deployment_compatibility import AvailableTarget
from coremltools.converters.mil.mil.ops.defs._utils import solve_slice_by_index_slice
from coremltools.converters.mil.mil.ops.defs.iOS15.tensor_transformation import reshape as reshape_ios15
from coremltools.converters.mil.mil.ops.defs.iOS17.tensor_transformation import reshape as reshape_ios17
from hypothesis import given
from hypothesis import strategies as st

from mil_passes import semantics

shapes = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@st.composite
def slice_params(draw):
    shape = draw(shapes)
    rank = len(shape)
    bound = st.integers(-8, 8)
    flags = st.lists(st.booleans(), min_size=rank, max_size=rank)
    squeeze = [draw(st.booleans()) and draw(st.booleans()) for _ in range(rank)]
    begin = draw(st.lists(bound, min_size=rank, max_size=rank))
    for axis, squeezed in enumerate(squeeze):  # a squeezed axis must name an element
        if squeezed:
            begin[axis] = draw(st.integers(-shape[axis], shape[axis] - 1))
    return dict(
        shape=shape,
        begin=begin,
        end=draw(st.lists(bound, min_size=rank, max_size=rank)),
        stride=draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=rank, max_size=rank)),
        begin_mask=draw(flags),
        end_mask=draw(flags),
        squeeze_mask=squeeze,
    )


@given(slice_params())
def test_slice_by_index_reads_what_coremltools_reads(params):
    x = np.arange(int(np.prod(params["shape"]))).reshape(params["shape"])
    expected = x[solve_slice_by_index_slice(*params.values())]  # coremltools squeezes after slicing
    squeeze_axes = tuple(a for a, s in enumerate(params["squeeze_mask"]) if s)
    expected = np.squeeze(expected, axis=squeeze_axes) if squeeze_axes else expected
    positions, squeezed = semantics.slice_by_index_positions(*params.values())
    got = x[semantics.numpy_index(positions)]
    got = np.squeeze(got, axis=squeezed) if squeezed else got
    np.testing.assert_array_equal(got, expected)
    assert squeezed == squeeze_axes


@given(shapes, st.data())
def test_slice_by_size_reads_begin_and_size_elements(shape, data):
    begin = [data.draw(st.integers(-d, d - 1)) for d in shape]
    size = [data.draw(st.sampled_from([-1, *range(0, d - (b % d) + 1)])) for b, d in zip(begin, shape)]
    x = np.arange(int(np.prod(shape))).reshape(shape)
    got = x[semantics.numpy_index(semantics.slice_by_size_positions(shape, begin, size))]
    for axis, (b, s) in enumerate(zip(begin, size)):
        assert got.shape[axis] == (shape[axis] - b % shape[axis] if s == -1 else s)
    if got.size:
        assert got.flat[0] == x[tuple(b % d for b, d in zip(begin, shape))]


def test_stride_zero_is_refused():
    with pytest.raises(ValueError, match="stride is 0"):
        semantics.slice_positions(4, 0, 4, 0)


def test_as_slice_runs_down_past_position_zero():
    positions = range(5)[3::-1]
    assert list(range(5)[semantics.as_slice(positions)]) == [3, 2, 1, 0]


@given(shapes, st.lists(st.integers(0, 4), min_size=1, max_size=5))
def test_reshape_zeros_follow_each_opset_as_coremltools_does(x_shape, target):
    assert semantics.reshape_zeros(AvailableTarget.iOS17, x_shape, target) == reshape_ios17.replace_zeros_in_shape(
        list(x_shape), list(target)
    )
    try:
        expected = reshape_ios15.replace_zeros_in_shape(list(x_shape), list(target))
    except ValueError:
        with pytest.raises(ValueError, match="rank"):
            semantics.reshape_zeros(AvailableTarget.iOS15, x_shape, target)
    else:
        assert semantics.reshape_zeros(AvailableTarget.iOS15, x_shape, target) == expected


def test_reshape_zeros_copy_run_time_dims_as_they_are():
    batch = object()
    assert semantics.reshape_zeros(AvailableTarget.iOS17, [batch, 32, 1], [0, 4, 8]) == [batch, 4, 8]
    assert semantics.reshape_zeros(AvailableTarget.iOS17, [32], [0, 0]) == [1, 32]


@pytest.mark.parametrize(
    "opset, x_shape, target, expected",
    [
        (AvailableTarget.iOS17, [2, 3, 4], [0, -1], [3, 8]),  # iOS17: 0 copies from the right
        (AvailableTarget.iOS15, [2, 3, 4], [0, -1, 0], [2, 3, 4]),
        (AvailableTarget.iOS15, [2, 3, 4], [-1], [24]),
    ],
)
def test_reshape_shape_solves_zeros_then_minus_one(opset, x_shape, target, expected):
    assert semantics.reshape_shape(opset, x_shape, target) == expected
    assert np.zeros(x_shape).reshape(expected).shape == tuple(expected)


def test_reshape_shape_refuses_two_minus_ones():
    with pytest.raises(ValueError, match="more than one -1"):
        semantics.reshape_shape(AvailableTarget.iOS17, [2, 3], [-1, -1])

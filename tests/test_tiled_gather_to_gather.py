"""webnn::tiled_gather_to_gather: gather_along_axis by tiled indices is one gather, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops
from mil_passes.passes.tiled_gather_to_gather import TiledIndices
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing.strategies import programs
from mil_passes.rewriter import Declined
from pass_helpers import would_rewrite, evaluates, only_op

PASS = "webnn::tiled_gather_to_gather"


def detector(boxes=(2, 6, 4), keep=3, reps=None, expand_axis=-1, axis=1, opset=ct.target.iOS17):
    """The docstring's example: ``gather_along_axis(boxes, tile(expand_dims(idx, [-1]), reps), axis)``."""

    def build():
        @mb.program(
            input_specs=[mb.TensorSpec(boxes), mb.TensorSpec((boxes[0], keep), dtype=types.int32)],
            opset_version=opset,
        )
        def prog(x, idx):
            tiled = mb.tile(x=mb.expand_dims(x=idx, axes=[expand_axis]), reps=reps or [1, 1, boxes[-1]])
            return mb.gather_along_axis(x=x, indices=tiled, axis=axis, name="picked")

        return prog

    return build


def feeds(seed=0, boxes=(2, 6, 4), keep=3):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(boxes).astype(np.float32),
        "idx": rng.integers(0, boxes[1], (boxes[0], keep)).astype(np.int32),
    }


def test_the_docstring_example_becomes_one_gather():
    after = check_pass(detector(), PASS, inputs=feeds())
    assert op_counts(after) == {"gather": 1}
    gather = only_op(after, "gather")
    assert int(gather.axis.val) == 1 and int(gather.batch_dims.val) == 1


@given(st.integers(0, 2**16), st.integers(1, 3), st.integers(1, 5), st.integers(1, 4))
def test_any_sizes_give_the_same_bits(seed, batch, keep, width):
    boxes = (batch, 5, width)
    check_pass(detector(boxes, keep), PASS, inputs=feeds(seed, boxes, keep))


def test_a_matrix_gathered_along_its_first_axis_needs_no_batch_axes():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((6, 4)), mb.TensorSpec((3,), dtype=types.int32)])
        def prog(x, idx):
            tiled = mb.tile(x=mb.expand_dims(x=idx, axes=[1]), reps=[1, 4])
            return mb.gather_along_axis(x=x, indices=tiled, axis=0, name="picked")

        return prog

    inputs = {"x": np.arange(24, dtype=np.float32).reshape(6, 4), "idx": np.array([5, 0, 2], np.int32)}
    assert op_counts(check_pass(build, PASS, inputs=inputs)) == {"gather": 1}


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(boxes=(2, 3, 4), keep=4, expand_axis=1, reps=[1, 3, 1]), "expanded on the last axis"),
        (dict(axis=0, keep=6), "the axis before it"),
        (dict(opset=ct.target.iOS15), "iOS16"),
    ],
)
def test_refusals_say_why(kwargs, reason):
    prog = detector(**kwargs)()
    match = TiledIndices().match(only_op(prog, "gather_along_axis"))
    assert isinstance(match, Declined) and reason in match.reason


def test_indices_not_tiled_are_not_a_candidate():
    @mb.program(input_specs=[mb.TensorSpec((2, 6, 4)), mb.TensorSpec((2, 3, 4), dtype=types.int32)])
    def prog(x, idx):
        return mb.gather_along_axis(x=x, indices=idx, axis=1)

    assert TiledIndices().match(only_op(prog, "gather_along_axis")) is None


@given(programs(plant=[PASS]))
def test_random_programs_with_the_plant_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [op for op in iter_ops(after) if op.op_type == "gather_along_axis" and would_rewrite(TiledIndices(), op)]

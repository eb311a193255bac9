"""webnn::cast_before_data_movement: a narrowing cast of int32 data movement moves above it, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops
from mil_passes.passes.cast_before_data_movement import CastOfMovedInt32
from mil_passes.testing import check_pass
from mil_passes.testing.strategies import programs
from mil_passes.rewriter import Declined
from pass_helpers import would_rewrite, evaluates, only_op

PASS = "webnn::cast_before_data_movement"
MASK = {"mask": np.array([[1, 1, 1, 0]], np.int32)}


def bert_mask(dtype="fp16"):
    """The docstring's example: BERT's int32 mask expanded twice, then cast."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 4), dtype=types.int32)], opset_version=ct.target.iOS17)
        def prog(mask):
            expanded = mb.expand_dims(x=mb.expand_dims(x=mask, axes=[1]), axes=[2])
            return mb.cast(x=expanded, dtype=dtype, name="mask_fp16")

        return prog

    return build


def test_the_docstring_example_casts_first():
    after = check_pass(bert_mask(), PASS, inputs=MASK)
    assert [op.op_type for op in iter_ops(after) if op.op_type != "const"] == ["cast", "expand_dims", "expand_dims"]
    assert all(op.outputs[0].dtype == types.fp16 for op in iter_ops(after) if op.op_type == "expand_dims")


MOVES = {
    "reshape": lambda v: mb.reshape(x=v, shape=[2, 2]),
    "transpose": lambda v: mb.transpose(x=v, perm=[1, 0]),
    "tile": lambda v: mb.tile(x=v, reps=[2, 1]),
    "slice_by_index": lambda v: mb.slice_by_index(x=v, begin=[0, 1], end=[1, 3]),
    "slice_by_size": lambda v: mb.slice_by_size(x=v, begin=[0, 1], size=[1, 2]),
    "squeeze": lambda v: mb.squeeze(x=v, axes=[0]),
    "concat": lambda v: mb.concat(values=(v, np.array([[7, -3, 0, 1]], np.int32)), axis=0),
}


MOVED_INPUT = {move: "values" if move == "concat" else "x" for move in MOVES}


@pytest.mark.parametrize("move", sorted(MOVES))
@pytest.mark.parametrize("dtype", ["fp16", "int16", "bool", "uint8"])
def test_each_data_movement_and_narrow_type_gives_the_same_bits(move, dtype):
    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 4), dtype=types.int32)], opset_version=ct.target.iOS17)
        def prog(mask):
            return mb.cast(x=MOVES[move](mask), dtype=dtype, name="out")

        return prog

    after = check_pass(build, PASS, inputs={"mask": np.array([[1, -2, 300, 0]], np.int32)})
    moved = only_op(after, move)
    domain = getattr(moved.input_spec.input_types[MOVED_INPUT[move]], "type_domain", None)  # concat: none
    takes = domain is None or types.string_to_builtin(dtype) in domain
    assert (moved.outputs[0].dtype != types.int32) == takes  # tile, concat, … take no int16 or uint8


def test_a_cast_to_fp32_is_not_a_candidate():
    prog = bert_mask("fp32")()
    assert CastOfMovedInt32().match(only_op(prog, "cast")) is None


def test_data_movement_read_twice_is_refused():
    @mb.program(input_specs=[mb.TensorSpec((1, 4), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(mask):
        expanded = mb.expand_dims(x=mask, axes=[1])
        return mb.cast(x=expanded, dtype="fp16"), mb.add(x=expanded, y=1)

    match = CastOfMovedInt32().match(only_op(prog, "cast"))
    assert isinstance(match, Declined) and "other readers" in match.reason


def test_a_concat_of_two_run_time_values_is_refused():
    @mb.program(input_specs=[mb.TensorSpec((1, 4), dtype=types.int32)] * 2, opset_version=ct.target.iOS17)
    def prog(a, b):
        return mb.cast(x=mb.concat(values=(a, b), axis=0), dtype="fp16")

    match = CastOfMovedInt32().match(only_op(prog, "cast"))
    assert isinstance(match, Declined) and "several values" in match.reason


@given(programs(plant=[PASS]))
def test_random_programs_with_the_plant_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [op for op in iter_ops(after) if op.op_type == "cast" and would_rewrite(CastOfMovedInt32(), op)]

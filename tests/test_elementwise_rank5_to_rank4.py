"""webnn::elementwise_rank5_to_rank4: an elementwise op on rank-5 tensors becomes a rank-4 one
between reshapes, bit for bit; what it leaves."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol

from mil_passes.ir import iter_ops
from mil_passes.lint import lint
from mil_passes.passes.elementwise_rank5_to_rank4 import Rank5Elementwise, merge_axis, merged
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pass
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing.strategies import OPSETS, programs
from pass_helpers import evaluates, only_op

PASS = "webnn::elementwise_rank5_to_rank4"


def binary(op_type, x_shape, y_shape):
    def build():
        @mb.program(input_specs=[mb.TensorSpec(x_shape), mb.TensorSpec(y_shape)], opset_version=ct.target.iOS17)
        def prog(x, y):
            return getattr(mb, op_type)(x=x, y=y, name="y_out")

        return prog

    return build


@pytest.mark.parametrize(
    "x_shape, y_shape",
    [
        ((2, 1, 4, 8, 16), (1, 1, 4, 8, 16)),  # the docstring's
        ((2, 3, 4, 5, 6), (2, 3, 4, 5, 6)),
        ((2, 3, 4, 5, 6), (4, 5, 6)),
        ((2, 3, 4, 5, 6), (1, 1, 1, 5, 6)),
    ],
)
@pytest.mark.parametrize("op_type", ["add", "mul", "maximum", "real_div"])
def test_rank5_becomes_rank4_with_the_same_bits(op_type, x_shape, y_shape):
    after = check_pass(binary(op_type, x_shape, y_shape), PASS)
    (op,) = [op for op in iter_ops(after) if op.op_type == op_type]
    assert op.outputs[0].rank == 4 and op_counts(after)["reshape"] == 3


def test_a_chain_stays_in_rank_4_after_merge_consecutive_reshapes():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 3, 4, 5, 6))], opset_version=ct.target.iOS17)
        def prog(x):
            return mb.exp(x=mb.relu(x=mb.mul(x=x, y=2.0)), name="y_out")

        return prog

    after = check_pass(build, PASS)
    for name in ("common::merge_consecutive_reshapes", "common::noop_elimination", "common::dead_code_elimination"):
        run_pass(after, name)
    shapes = [(op.op_type, tuple(op.outputs[0].shape)) for op in iter_ops(after) if op.op_type != "const"]
    assert shapes == [
        ("reshape", (6, 4, 5, 6)),
        ("mul", (6, 4, 5, 6)),
        ("relu", (6, 4, 5, 6)),
        ("exp", (6, 4, 5, 6)),
        ("reshape", (2, 3, 4, 5, 6)),
    ]


def test_merge_axes():
    assert merge_axis((2, 1, 4, 8, 16), [(1, 1, 4, 8, 16)]) == 0
    assert merge_axis((2, 3, 4, 5, 6), [(2, 1, 4, 1, 6)]) is None
    assert merge_axis((2, 3, 4, 5, 6), [(1, 1, 4, 5, 6)]) == 0
    assert merge_axis((2, 3, 4, 5, 6), [(2, 3, 1, 5, 6)]) == 0
    assert merge_axis((2, 3, 4, 5, 6), [(2, 1, 1, 5, 6)]) == 1
    assert merged((4, 5, 6), 0) == (1, 4, 5, 6) and merged((2, 3, 4, 5, 6), 3) == (2, 3, 4, 30)


@pytest.mark.parametrize(
    "x_shape, y_shape, reason",
    [
        ((2, 3, 4, 5, 6), (2, 1, 4, 1, 6), "no two adjacent axes merge"),
        ((2, get_new_symbol(), 4, 5, 6), (4, 5, 6), "known only at run time"),
    ],
)
def test_declines_say_why(x_shape, y_shape, reason):
    match = Rank5Elementwise().match(only_op(binary("add", x_shape, y_shape)(), "add"))
    assert isinstance(match, Declined) and reason in match.reason


def test_rank4_is_not_a_candidate():
    assert Rank5Elementwise().match(only_op(binary("add", (2, 3, 4, 5), (2, 3, 4, 5))(), "add")) is None


def test_lint_names_the_pass():
    (finding,) = [f for f in lint(binary("add", (2, 1, 4, 8, 16), (4, 8, 16))()) if f.rule == "rank5-elementwise"]
    assert finding.fix == PASS and finding.severity == "info"


def test_a_scalar_and_a_select_keep_their_bits():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 3, 1, 5, 6))], opset_version=ct.target.iOS17)
        def prog(x):
            doubled = mb.mul(x=x, y=np.float32(2))
            return mb.select(cond=mb.greater(x=x, y=0.0), a=doubled, b=np.zeros((5, 6), np.float32), name="y_out")

        return prog

    after = check_pass(build, PASS)
    assert all(op.outputs[0].rank <= 4 for op in iter_ops(after) if op.op_type in ("mul", "greater", "select"))


@given(st.sampled_from(OPSETS).flatmap(lambda opset: programs(opset, plant=[PASS])))
def test_random_programs_with_the_plant_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [
        op for op in iter_ops(after) if op.op_type in Rank5Elementwise.op_types and Rank5Elementwise().match(op)
    ]

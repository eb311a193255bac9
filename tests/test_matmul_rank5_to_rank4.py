"""webnn::matmul_rank5_to_rank4: a rank-5 batched matmul (or linear) becomes a rank-4 one between
reshapes, bit for bit; what it leaves."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol

from mil_passes.rewriter import Declined
from mil_passes.lint import lint
from mil_passes.passes.matmul_rank5_to_rank4 import Rank5Matmul
from mil_passes.testing import check_pass, op_counts
from pass_helpers import only_op

PASS = "webnn::matmul_rank5_to_rank4"


def matmul(x_shape, y_shape, **flags):
    def build():
        @mb.program(input_specs=[mb.TensorSpec(x_shape), mb.TensorSpec(y_shape)], opset_version=ct.target.iOS17)
        def prog(x, y):
            return mb.matmul(x=x, y=y, name="y_out", **flags)

        return prog

    return build


@pytest.mark.parametrize(
    "x_shape, y_shape, flags, reshapes",
    [
        ((2, 3, 4, 8, 16), (2, 3, 4, 8, 16), {"transpose_y": True}, 3),  # the docstring's
        ((2, 3, 4, 8, 16), (1, 1, 4, 16, 5), {}, 3),  # y broadcast whole
        ((2, 3, 4, 8, 16), (16, 5), {}, 2),  # a matrix stays as it is
        ((2, 3, 4, 16, 8), (4, 16, 5), {"transpose_x": True}, 3),
    ],
)
def test_rank5_becomes_rank4_with_the_same_bits(x_shape, y_shape, flags, reshapes):
    after = check_pass(matmul(x_shape, y_shape, **flags), PASS)
    assert op_counts(after) == {"matmul": 1, "reshape": reshapes}
    assert len(only_op(after, "matmul").x.shape) == 4


def test_a_rank5_linear_becomes_rank4():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 3, 4, 8, 16))], opset_version=ct.target.iOS17)
        def prog(x):
            weight = np.linspace(-1, 1, 5 * 16, dtype=np.float32).reshape(5, 16)
            return mb.linear(x=x, weight=weight, bias=np.ones(5, np.float32), name="y_out")

        return prog

    after = check_pass(build, PASS)
    assert op_counts(after) == {"linear": 1, "reshape": 2}


@pytest.mark.parametrize(
    "x_shape, y_shape, reason",
    [
        ((2, 3, 4, 8, 16), (1, 3, 4, 16, 5), "broadcast against each other"),
        ((2, get_new_symbol(), 4, 8, 16), (16, 5), "known only at run time"),
    ],
)
def test_refusals_say_why(x_shape, y_shape, reason):
    match = Rank5Matmul().match(only_op(matmul(x_shape, y_shape)(), "matmul"))
    assert isinstance(match, Declined) and reason in match.reason


def test_rank4_is_not_a_candidate():
    assert Rank5Matmul().match(only_op(matmul((2, 4, 8, 16), (2, 4, 16, 5))(), "matmul")) is None


def test_lint_names_the_pass():
    (finding,) = [f for f in lint(matmul((2, 3, 4, 8, 16), (16, 5))()) if f.rule == "ane-rank5-matmul"]
    assert finding.fix == PASS and finding.severity == "warning"

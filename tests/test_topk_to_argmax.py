"""webnn::topk_to_argmax: a descending k=1 topk read for its index is a reduce_argmax, bit for bit,
ties and NaN included; what it leaves (an ascending one: NaN sorts last there, argmin picks it)."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.rewriter import Declined
from mil_passes.lint import lint
from mil_passes.passes.topk_to_argmax import IndexOfTopOne
from mil_passes.testing import check_pass, op_counts
from pass_helpers import only_op

PASS = "webnn::topk_to_argmax"
TIES = {"x": np.array([[1.0, 3.0, 3.0, np.nan, 2.0, np.nan], [-0.0, 0.0, -1.0, -1.0, 5.0, 5.0]], np.float32)}


def topk(k=1, ascending=False, read="indices", axis=-1):
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 6))], opset_version=ct.target.iOS17)
        def prog(x):
            values, indices = mb.topk(x=x, k=k, axis=axis, ascending=ascending, name="t")
            return {"indices": [indices], "values": [values], "both": [values, indices]}[read]

        return prog

    return build


def test_the_index_of_the_top_one_is_an_argmax_with_the_same_ties_and_nans():
    after = check_pass(topk(), PASS, inputs=TIES)
    assert op_counts(after) == {"reduce_argmax": 1}


def test_an_ascending_topk_is_left_because_of_nan():
    match = IndexOfTopOne().match(only_op(topk(ascending=True)(), "topk"))
    assert isinstance(match, Declined) and "NaN" in match.reason


def test_axis_zero_keeps_its_dims():
    after = check_pass(topk(axis=0), PASS, inputs=TIES)
    assert only_op(after, "reduce_argmax").outputs[0].shape == (1, 6)


@pytest.mark.parametrize(
    "k, read, reason", [(2, "indices", None), (1, "values", "values are read"), (1, "both", "values are read")]
)
def test_what_it_leaves(k, read, reason):
    prog = topk(k=k, read=read)()
    match = IndexOfTopOne().match(only_op(prog, "topk"))
    if reason is None:
        assert match is None
    else:
        assert isinstance(match, Declined) and reason in match.reason


def test_lint_names_the_pass_for_the_index_and_not_for_a_k_of_two():
    (finding,) = [f for f in lint(topk()()) if f.rule == "ane-topk-sort"]
    assert finding.fix == PASS and finding.severity == "error"
    (left,) = [f for f in lint(topk(k=2)()) if f.rule == "ane-topk-sort"]
    assert left.fix is None

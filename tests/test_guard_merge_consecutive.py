"""webnn::guard_merge_consecutive_relus / _reshapes: a relu (reshape) in a cond branch reading one
outside no longer makes the merge raise; values are kept (bit for bit) on both branches."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass
from mil_passes.testing import run_pass

CASES = {
    "relu": ("webnn::guard_merge_consecutive_relus", "common::merge_consecutive_relus"),
    "reshape": ("webnn::guard_merge_consecutive_reshapes", "common::merge_consecutive_reshapes"),
}
X = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
FEEDS = [{"x": X}, {"x": -X}]  # the branch taken: the sum of x is positive, then negative


def pair_across_blocks(op_type: str):
    """``op_type`` of x outside, ``op_type`` of it inside a cond branch (the fuzzer's programs)."""

    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        p = mb.greater(x=mb.reduce_sum(x=x), y=0.0)
        first = mb.relu(x=x, name="first") if op_type == "relu" else mb.reshape(x=x, shape=[3, 2], name="first")

        def inner():
            return mb.relu(x=first) if op_type == "relu" else mb.reshape(x=first, shape=[6])

        def other():
            return mb.relu(x=x) if op_type == "relu" else mb.reshape(x=x, shape=[6])

        return mb.cond(pred=p, _true_fn=inner, _false_fn=other, name="out")

    return prog


@pytest.mark.parametrize("op_type", list(CASES))
def test_the_merge_raises_without_the_guard(op_type):
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises((KeyError, ValueError)):  # which, depends on where the ops sit
        run_pass(pair_across_blocks(op_type), CASES[op_type][1])


@pytest.mark.parametrize("op_type", list(CASES))
def test_the_guarded_pair_keeps_its_values(op_type):
    guard, merge = CASES[op_type]
    after = check_pass(lambda: pair_across_blocks(op_type), guard, inputs=FEEDS[0])
    run_pass(after, merge)
    for feeds in FEEDS:
        assert_equivalent(pair_across_blocks(op_type), after, feeds)


@pytest.mark.parametrize("op_type", list(CASES))
def test_a_pair_in_one_block_is_left_to_the_merge(op_type):
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        if op_type == "relu":
            return mb.relu(x=mb.relu(x=x))
        return mb.reshape(x=mb.reshape(x=x, shape=[3, 2]), shape=[6])

    before = str(prog)
    run_pass(prog, CASES[op_type][0])
    assert str(prog) == before

"""webnn::guard_rank0_expand_dims_swap: a rank-0 result read in a cond branch no longer makes
common::rank0_expand_dims_swap raise; one read in its own block is left to the pass."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_rank0_expand_dims_swap"
FEEDS = [{"x": np.array([1.0, 2.0], np.float32)}, {"x": np.array([-1.0, -2.0], np.float32)}]


def rank0_read_in_branch(*, nested=True):
    """docs/reproducers/rank0_expand_dims_swap_nested_reader_raises.py's program."""

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=ct.target.iOS17)
    def prog(x):
        total = mb.reduce_sum(x=x, axes=[0], keep_dims=False, name="total")
        difference = mb.sub(x=np.float32(1.0), y=total, name="difference")
        wide = mb.expand_dims(x=difference, axes=[0], name="wide")
        if not nested:
            return wide, mb.relu(x=difference, name="chosen")
        chosen = mb.cond(
            pred=mb.greater(x=total, y=np.float32(0.0)),
            _true_fn=lambda: mb.identity(x=difference),
            _false_fn=lambda: mb.identity(x=total),
            name="chosen",
        )
        return wide, chosen

    return prog


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(KeyError):
        run_pass(rank0_read_in_branch(), "common::rank0_expand_dims_swap")


def test_the_readers_read_an_identity_and_the_pass_then_leaves_it():
    after = check_pass(rank0_read_in_branch, PASS, inputs=FEEDS[0])
    run_pass(after, "common::rank0_expand_dims_swap")
    for feeds in FEEDS:
        assert_equivalent(rank0_read_in_branch(), after, feeds)
    run_pass(after, "common::noop_elimination")  # as DEFAULT does later
    assert op_counts(after) == op_counts(rank0_read_in_branch())


def test_readers_in_the_same_block_are_left_to_the_pass():
    prog = rank0_read_in_branch(nested=False)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before

"""webnn::guard_fuse_stack_split: a split of a stack with an unread (or unsqueezed) output no
longer makes common::fuse_stack_split raise; a fully squeezed one is still fused."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_stack_split"
X = {"x": np.array([[1.0, -2.0, 3.0]], np.float32)}


def stack_split(readers: str):
    """``split(stack(relu(x), x))`` along 0; ``readers``: ``both`` squeezed, ``one`` (the first
    output read by nothing), ``relu`` (the first output read by a relu)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        stacked = mb.stack(values=(mb.relu(x=x, name="a"), x), axis=0, name="s")
        first, second = mb.split(x=stacked, num_splits=2, axis=0, name="p")
        y = mb.squeeze(x=second, axes=[0], name="y")
        if readers == "both":
            return y, mb.squeeze(x=first, axes=[0], name="z")
        if readers == "relu":
            return y, mb.relu(x=first, name="z")
        return y

    return prog


@pytest.mark.parametrize("readers, error", [("one", IndexError), ("relu", AttributeError)])
def test_the_pass_raises_without_the_guard(readers, error):
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(error):
        run_pass(stack_split(readers), "common::fuse_stack_split")


@pytest.mark.parametrize("readers", ["one", "relu"])
def test_the_stack_is_read_via_an_identity_and_keeps_its_values(readers):
    after = check_pass(lambda: stack_split(readers), PASS, inputs=X)
    run_pass(after, "common::fuse_stack_split")
    assert_equivalent(stack_split(readers), after, X)


def test_a_fully_squeezed_split_is_left_to_the_pass():
    prog = stack_split("both")
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, "common::fuse_stack_split")
    assert "split" not in op_counts(prog)

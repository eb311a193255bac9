"""webnn::guard_fuse_conv_bias: a lower-rank const added to a transposed conv gets full rank,
and common::fuse_conv_bias no longer raises."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_conv_bias"
X = {"x": np.array([[[1.0, -2.0, 3.0]]], np.float32)}


def transposed_conv_plus(bias, op="add", conv="conv"):
    """docs/reproducers/fuse_conv_bias_transposed_bias_raises.py's program (``op`` of the bias;
    ``conv``: "conv" or "conv_transpose", which the pass also folds a bias into)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 1, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        if conv == "conv":
            y = mb.conv(x=x, weight=np.array([[[1.0]], [[-2.0]]], np.float32), name="y")
        else:  # conv_transpose's weight is [C_in, C_out, K]
            y = mb.conv_transpose(x=x, weight=np.array([[[1.0], [-2.0]]], np.float32), name="y")
        t = mb.transpose(x=y, perm=[2, 1, 0], name="t")
        return getattr(mb, op)(x=t, y=bias, name="out")

    return prog


@pytest.mark.parametrize("conv", ["conv", "conv_transpose"])
def test_the_pass_raises_without_the_guard(conv):
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(IndexError):
        run_pass(transposed_conv_plus(np.array([1.0, 2.0], np.float32), conv=conv), "common::fuse_conv_bias")


@pytest.mark.parametrize("conv", ["conv", "conv_transpose"])
@pytest.mark.parametrize("op", ["add", "sub"])
def test_the_bias_gets_full_rank_and_the_pass_then_keeps_the_values(op, conv):
    build = lambda: transposed_conv_plus(np.array([1.0, 2.0], np.float32), op, conv)  # noqa: E731
    after = check_pass(build, PASS, inputs=X)
    bias = after.functions["main"].outputs[0].op.y
    assert bias.val.shape == (1, 1, 2)
    run_pass(after, "common::fuse_conv_bias")
    assert_equivalent(build(), after, X)


def test_a_full_rank_bias_is_left_to_the_pass():
    prog = transposed_conv_plus(np.ones((1, 2, 1), np.float32))
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before

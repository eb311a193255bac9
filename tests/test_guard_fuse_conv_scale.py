"""webnn::guard_fuse_conv_scale: ``const / conv(x)`` keeps its meaning; ``conv(x) / const`` is
still folded into the conv."""

from __future__ import annotations

import numpy as np

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_conv_scale"
X = {"x": np.array([[[1.0, 4.0]]], np.float32)}


def divide(*, const_first=True):
    """docs/reproducers/fuse_conv_scale_const_numerator.py's program (``2 / conv(x)``)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 1, 2))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=np.full((1, 1, 1), 0.5, np.float32), name="y")
        if const_first:
            return mb.real_div(x=np.float32(2.0), y=y, name="out")
        return mb.real_div(x=y, y=np.float32(2.0), name="out")

    return prog


def test_the_pass_miscompiles_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    prog = divide()
    run_pass(prog, "common::fuse_conv_scale")
    try:
        assert_equivalent(divide(), prog, X)
    except AssertionError:
        return
    raise AssertionError("coremltools no longer folds const / conv as conv / const")


def test_const_over_conv_keeps_its_values():
    after = check_pass(divide, PASS, inputs=X)
    run_pass(after, "common::fuse_conv_scale")
    assert op_counts(after)["real_div"] == 1
    assert_equivalent(divide(), after, X)


def test_conv_over_const_is_left_to_the_pass():
    prog = divide(const_first=False)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, "common::fuse_conv_scale")
    assert "real_div" not in op_counts(prog)

"""webnn::guard_fuse_prelu: a one-element alpha no longer makes common::fuse_prelu raise."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_prelu"
X = {"x": np.array([-2.0, 3.0], np.float32).reshape(1, 2, 1, 1)}


def prelu_pattern(alpha):
    """``relu(x) + alpha * relu(-x)`` (the fuzzreach branch's minimized reproducer)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 1, 1))], opset_version=ct.target.iOS17)
    def prog(x):
        neg = mb.relu(x=mb.mul(x=x, y=np.float32(-1.0)), name="neg")
        scaled = mb.mul(x=neg, y=alpha, name="scaled")
        return mb.add(x=mb.relu(x=x, name="pos"), y=scaled, name="out")

    return prog


ONE = np.full((1, 1, 1, 1), -0.1, np.float32)


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="alpha"):
        run_pass(prelu_pattern(ONE), "common::fuse_prelu")


def test_the_alpha_is_spread_and_the_pass_then_keeps_the_values():
    after = check_pass(lambda: prelu_pattern(ONE), PASS, inputs=X)
    run_pass(after, "common::fuse_prelu")
    run_pass(after, "common::dead_code_elimination")
    assert op_counts(after)["prelu"] == 1
    assert_equivalent(prelu_pattern(ONE), after, X)


@pytest.mark.parametrize(
    "alpha", [np.array([-0.1, -0.2], np.float32).reshape(1, 2, 1, 1), np.float32(-0.1)], ids=["per-channel", "scalar"]
)
def test_other_alphas_are_left_to_the_pass(alpha):
    prog = prelu_pattern(alpha)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before


def widening_alpha():
    """The fuzzer's minimal program (seed 1): ``transpose(x, [0, 2, 3, 1])`` of a one-channel x, and
    ``relu(t) + alpha * relu(-t)`` with a ``(1, 1, 1, 2)`` alpha that widens the output."""

    @mb.program(input_specs=[mb.TensorSpec((1, 1, 1, 1))], opset_version=ct.target.iOS17)
    def prog(x):
        t = mb.transpose(x=x, perm=[0, 2, 3, 1])
        negative = mb.relu(x=mb.mul(x=t, y=-1.0))
        return mb.add(x=mb.relu(x=t), y=mb.mul(x=negative, y=np.full((1, 1, 1, 2), -0.25, np.float32)), name="out")

    return prog


def test_a_widening_alpha_makes_the_pass_raise_without_the_guard():
    with pytest.raises(ValueError):
        run_pass(widening_alpha(), "common::fuse_prelu")


def test_a_widening_alpha_is_hidden_and_keeps_its_values():
    feeds = {"x": np.array([[[[-3.0]]]], np.float32)}
    after = check_pass(widening_alpha, PASS, inputs=feeds)
    run_pass(after, "common::fuse_prelu")
    assert "prelu" not in op_counts(after)
    assert_equivalent(widening_alpha(), after, feeds)


def transposed_on_shared_input():
    """The fuzzer's program (seed 1): the transposed form, its input read by another op too."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 2, 2))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.add(x=x, y=1.0, name="y")
        t = mb.transpose(x=y, perm=[0, 2, 3, 1])
        negative = mb.relu(x=mb.mul(x=t, y=-1.0))
        out = mb.add(x=mb.relu(x=t), y=mb.mul(x=negative, y=np.array([-0.25, 0.5], np.float32)), name="out")
        return out, mb.relu(x=y, name="other")

    return prog


def test_a_shared_transpose_input_makes_the_pass_take_the_perm_as_x_without_the_guard():
    with pytest.raises(ValueError, match="perm"):
        run_pass(transposed_on_shared_input(), "common::fuse_prelu")


def test_a_shared_transpose_input_is_fused_with_the_right_root():
    feeds = {"x": np.linspace(-4.0, 3.0, 8, dtype=np.float32).reshape(1, 2, 2, 2)}
    after = check_pass(transposed_on_shared_input, PASS, inputs=feeds)
    run_pass(after, "common::fuse_prelu")
    assert op_counts(after)["prelu"] == 1
    assert_equivalent(transposed_on_shared_input(), after, feeds)

"""webnn::guard_fuse_gelu_exact: a shared ``mul(0.5, x)`` no longer makes common::fuse_gelu_exact
raise; the gelu is still fused and the other reader keeps its value."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_gelu_exact"
FUSION = "common::fuse_gelu_exact"
X = {"x": np.array([-2.0, -0.5, 0.0, 0.75, 3.0], np.float32)}


def gelu_third_form(*, shared_half=True):
    """The pass's third form, ``(0.5 * x) * (1 + erf(x / sqrt(2)))``, the fuzzer's program."""

    @mb.program(input_specs=[mb.TensorSpec((5,))], opset_version=ct.target.iOS17)
    def prog(x):
        one_plus_erf = mb.add(x=mb.erf(x=mb.real_div(x=x, y=np.float32(2**0.5))), y=1.0)
        half = mb.mul(x=0.5, y=x, name="half")
        y = mb.mul(x=one_plus_erf, y=half, name="y")
        return (y, mb.reshape(x=half, shape=[-1], name="other")) if shared_half else y

    return prog


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="active output"):
        run_pass(gelu_third_form(), FUSION)


def test_the_gelu_gets_its_own_half_and_is_fused():
    after = check_pass(gelu_third_form, PASS, inputs=X)
    assert op_counts(after)["mul"] == 3
    run_pass(after, FUSION)
    assert op_counts(after)["gelu"] == 1
    assert_equivalent(gelu_third_form(), after, X, rtol=1e-6, atol=1e-7)  # a fusion: gelu's own rounding


def test_an_unshared_half_is_left_to_the_pass():
    prog = gelu_third_form(shared_half=False)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before

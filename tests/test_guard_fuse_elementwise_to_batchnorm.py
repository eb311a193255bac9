"""webnn::guard_fuse_elementwise_to_batchnorm: an fp16 x * c + d no longer makes
common::fuse_elementwise_to_batchnorm raise; fp32 ones are still fused."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_fuse_elementwise_to_batchnorm"


def scale_then_shift(dtype=types.fp16):
    """docs/reproducers/fuse_elementwise_to_batchnorm_fp16_raises.py's program."""
    np_dtype = types.nptype_from_builtin(dtype)

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 3, 3), dtype=dtype)], opset_version=ct.target.iOS17)
    def prog(x):
        scaled = mb.mul(x=x, y=np.array([2.0, 3.0], np_dtype).reshape(1, 2, 1, 1), name="scaled")
        return mb.add(x=scaled, y=np.array([1.0, -1.0], np_dtype).reshape(1, 2, 1, 1), name="out")

    return prog


X = {"x": np.linspace(-4, 4, 18, dtype=np.float16).reshape(1, 2, 3, 3)}


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="fp16"):
        run_pass(scale_then_shift(), "common::fuse_elementwise_to_batchnorm")


def test_fp16_is_hidden_from_the_pass_and_keeps_its_values():
    after = check_pass(scale_then_shift, PASS, inputs=X)
    run_pass(after, "common::fuse_elementwise_to_batchnorm")
    assert "batch_norm" not in op_counts(after)
    assert_equivalent(scale_then_shift(), after, X)


def test_fp32_is_left_to_the_pass():
    prog = scale_then_shift(types.fp32)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, "common::fuse_elementwise_to_batchnorm")
    assert op_counts(prog)["batch_norm"] == 1

"""webnn::guard_int_op_canonicalization: a requantization across a reshape survives
common::int_op_canonicalization; an exact round trip is still canonicalized."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

import mil_passes
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_int_op_canonicalization"
X = {"x": np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)}


def requantize(scale_out=0.25, *, zero_point_out=None, dtype_out="int8", per_axis=False):
    """``quantize(reshape(dequantize(quantize(x, 0.5))), scale_out)``: the pass's pattern (the
    program of docs/reproducers/int_op_canonicalization_requantize.py)."""

    @mb.program(input_specs=[mb.TensorSpec((2, 2))], opset_version=ct.target.iOS17)
    def prog(x):
        scale = np.array([0.5, 0.5], np.float32) if per_axis else np.float32(0.5)
        axis = {"axis": 1} if per_axis else {}
        q = mb.quantize(input=x, scale=scale, output_dtype="int8", name="q", **axis)
        real = mb.dequantize(input=q, scale=scale, name="real", **axis)
        flat = mb.reshape(x=real, shape=[4], name="flat")
        extra = {} if zero_point_out is None else {"zero_point": zero_point_out}
        return mb.quantize(input=flat, scale=np.float32(scale_out), output_dtype=dtype_out, name="out", **extra)

    return prog


@pytest.mark.parametrize(
    "kwargs",
    [{"scale_out": 0.25}, {"scale_out": 0.5, "zero_point_out": np.int8(3)}, {"scale_out": 0.5, "per_axis": True}],
    ids=["other-scale", "other-zero-point", "per-axis"],
)
def test_a_requantization_survives_the_pass(kwargs):
    after = check_pass(lambda: requantize(**kwargs), PASS, inputs=X)
    assert op_counts(after)["identity"] == 1
    run_pass(after, "common::int_op_canonicalization")
    assert op_counts(after)["quantize"] == 2  # the requantization is still there
    assert_equivalent(requantize(**kwargs), after, X)


def test_the_pass_drops_it_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    prog = requantize()
    run_pass(prog, "common::int_op_canonicalization")
    run_pass(prog, "common::dead_code_elimination")
    assert op_counts(prog)["quantize"] == 1


def test_an_exact_round_trip_is_left_to_the_pass():
    prog = requantize(scale_out=0.5)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before


def test_the_pipeline_keeps_the_requantization():
    base = ct.PassPipeline.DEFAULT
    base.remove_passes({"common::add_fp16_cast"})
    after = requantize()
    run_pass(after, mil_passes.pipeline(base))
    assert_equivalent(requantize(), after, X)
    assert "identity" not in op_counts(after)  # noop_elimination removed the guard's identity

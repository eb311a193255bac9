"""webnn::guard_distributive_quantized_binary_op_scale_normalization: a quantized add/sub whose
rescaling moves an int8 output is left as written; exact rescalings are left to the pass. Checked
on every pair of int8 inputs by the op formulas (mil_passes.reference)."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.reference import evaluate
from mil_passes.testing import op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_distributive_quantized_binary_op_scale_normalization"
NORMALIZATION = "common::distributive_quantized_binary_op_scale_normalization"
GRID_X, GRID_Y = (g.reshape(-1).astype(np.int8) for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128)))
EVERY_PAIR = {"a": GRID_X, "b": GRID_Y}


def quantized(s_x=0.25, s_y=0.1, s_z=0.1, op="add", relu=False, n=GRID_X.size):
    """``quantize(op(dequantize(a, s_x), dequantize(b, s_y)) [→ relu], s_z)`` on int8 inputs."""

    @mb.program(
        input_specs=[mb.TensorSpec((n,), dtype=types.int8), mb.TensorSpec((n,), dtype=types.int8)],
        opset_version=ct.target.iOS17,
    )
    def prog(a, b):
        x = mb.dequantize(input=a, scale=np.float32(s_x), zero_point=np.int8(0))
        y = mb.dequantize(input=b, scale=np.float32(s_y), zero_point=np.int8(0))
        s = getattr(mb, op)(x=x, y=y, name="s")
        if relu:
            s = mb.relu(x=s, name="r")
        return mb.quantize(input=s, scale=np.float32(s_z), zero_point=np.int8(0), output_dtype="int8", name="z")

    return prog


def outputs(prog, feeds=EVERY_PAIR) -> np.ndarray:
    return evaluate(prog, feeds)["z"]


def test_the_pass_moves_an_int8_output_by_one_without_the_guard():
    """The bug the guard answers: x = -101, y = 125 gives -127 as written, -128 rescaled."""
    feeds = {"a": np.array([-101], np.int8), "b": np.array([125], np.int8)}
    prog = quantized(n=1)
    assert outputs(prog, feeds).tolist() == [-127]  # round_half_even(-127.499998)
    run_pass(prog, NORMALIZATION)
    assert outputs(prog, feeds).tolist() == [-128]  # round_half_even(-127.5)


INEXACT = [
    dict(s_x=0.25, s_y=0.1, s_z=0.1),
    dict(s_x=0.25, s_y=0.1, s_z=0.1, op="sub"),
    dict(s_x=0.25, s_y=0.1, s_z=0.1, relu=True),
    dict(s_x=0.3, s_y=0.7, s_z=0.2),
]


@pytest.mark.parametrize("case", INEXACT, ids=str)
def test_an_inexact_rescaling_is_refused_and_every_pair_keeps_its_output(case):
    want = outputs(quantized(**case))
    after = quantized(**case)
    run_pass(after, NORMALIZATION)
    assert not np.array_equal(outputs(after), want)  # the pass alone changes an output
    guarded = quantized(**case)
    run_pass(guarded, PASS)
    assert op_counts(guarded)["identity"] == 1
    run_pass(guarded, NORMALIZATION)
    np.testing.assert_array_equal(outputs(guarded), want)


@pytest.mark.parametrize(
    "case", [dict(s_x=0.5, s_y=0.25, s_z=0.25), dict(s_x=0.5, s_y=0.25, s_z=0.125, op="sub")], ids=str
)
def test_an_exact_rescaling_is_left_to_the_pass(case):
    prog = quantized(**case)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, NORMALIZATION)
    assert str(prog) != before  # the pass rescaled it
    np.testing.assert_array_equal(outputs(prog), outputs(quantized(**case)))

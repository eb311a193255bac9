"""webnn::guard_dequantize_quantize_pair_elimination: an int8 value requantized to uint8 keeps
its dtype and its values (negatives clip to 0); a same-dtype round trip is still removed."""

from __future__ import annotations

import numpy as np

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.reference import evaluate
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_dequantize_quantize_pair_elimination"
ELIMINATION = "common::dequantize_quantize_pair_elimination"
X = {"x": np.array([-12.8, -0.5, 0.0, 0.7, 12.7], np.float32)}  # int8 [-128, -5, 0, 7, 127]


def round_trip(output_dtype: str):
    """``quantize(dequantize(q, 0.1), 0.1, output_dtype)`` of an int8 ``q`` (the fuzzer's program,
    zero points already dropped by nullify_redundant_quantization_zero_point)."""

    @mb.program(input_specs=[mb.TensorSpec((5,))], opset_version=ct.target.iOS17)
    def prog(x):
        q = mb.quantize(input=x, scale=np.float32(0.1), output_dtype="int8", name="q")
        d = mb.dequantize(input=q, scale=np.float32(0.1))
        return mb.quantize(input=d, scale=np.float32(0.1), output_dtype=output_dtype, name="t")

    return prog


def test_the_pass_changes_the_dtype_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    prog = round_trip("uint8")
    run_pass(prog, ELIMINATION)
    assert types.builtin_to_string(prog.functions["main"].outputs[0].dtype) == "int8"


def test_a_requantization_to_uint8_keeps_its_dtype_and_values():
    after = check_pass(lambda: round_trip("uint8"), PASS, inputs=X)
    run_pass(after, ELIMINATION)
    out = evaluate(after, X)["t"]
    assert out.dtype == np.uint8 and out.tolist() == [0, 0, 0, 7, 127]


def test_a_same_dtype_round_trip_is_left_to_the_pass():
    prog = round_trip("int8")
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, ELIMINATION)
    assert op_counts(prog)["quantize"] == 1 and "dequantize" not in op_counts(prog)

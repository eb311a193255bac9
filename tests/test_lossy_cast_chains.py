"""webnn::guard_cast_optimization beyond tests/test_guards.py's table: which cast chains to bool can
make a nonzero zero (rewritten), which common::cast_optimization fuses exactly (left), and WebNN's
uint8 condition under the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.guards.rewrites import loses_nonzero
from mil_passes.reference import evaluate
from mil_passes.testing import check_pass, op_counts
from mil_passes.runner import run_pass

PASS = "webnn::guard_cast_optimization"
FP32, FP16, INT32, INT8, UINT8, BOOL = types.fp32, types.fp16, types.int32, types.int8, types.uint8, types.bool


def chain_to_bool(dtype, steps, *, identity_after_first=False):
    """``cast(... cast(x, steps[0]) ..., "bool")`` of an input of ``dtype``."""

    @mb.program(input_specs=[mb.TensorSpec((5,), dtype=dtype)], opset_version=ct.target.iOS17)
    def prog(x):
        v = x
        for index, step in enumerate(steps):
            v = mb.cast(x=v, dtype=step, name=f"step_{index}")
            if index == 0 and identity_after_first:
                v = mb.identity(x=v, name="same")
        return mb.cast(x=v, dtype="bool", name="flag")

    return prog


FLOATS = {"x": np.array([0.3, -0.7, 0.0, 2.5, 1e-8], dtype=np.float32)}


@pytest.mark.parametrize(
    "steps, kept_casts",
    [(["int32"], 1), (["uint8"], 2), (["int16"], 2), (["fp16"], 1), (["int32", "fp32"], 2)],
    ids=["int32", "uint8-through-int32", "int16-through-int32", "fp16-underflow", "int32-then-fp32"],
)
def test_a_chain_that_can_make_a_nonzero_zero_becomes_not_equal(steps, kept_casts):
    after = check_pass(lambda: chain_to_bool(FP32, steps), PASS, inputs=FLOATS)
    assert op_counts(after) == {"cast": kept_casts, "not_equal": 1}


def test_an_identity_in_the_chain_does_not_hide_the_truncation():
    after = check_pass(lambda: chain_to_bool(FP32, ["int32"], identity_after_first=True), PASS, inputs=FLOATS)
    assert op_counts(after)["not_equal"] == 1


@pytest.mark.parametrize(
    "dtype, steps",
    [(INT8, ["int32"]), (BOOL, ["uint8"]), (FP16, ["fp32"]), (INT32, ["fp32"]), (FP32, [])],
    ids=["int8-widened", "bool-round-trip", "fp16-widened", "int-to-float", "direct-cast"],
)
def test_chains_cast_optimization_fuses_exactly_are_left_to_it(dtype, steps):
    prog = chain_to_bool(dtype, steps)
    before = op_counts(prog)
    run_pass(prog, PASS)
    assert op_counts(prog) == before


@pytest.mark.parametrize(
    "source, target, loses",
    [
        (FP32, INT32, True),
        (FP32, UINT8, True),
        (FP32, FP16, True),
        (FP16, FP32, False),
        (INT32, UINT8, True),
        (INT32, types.int16, True),
        (INT8, UINT8, False),
        (UINT8, INT32, False),
        (INT32, FP16, False),
        (FP32, BOOL, False),
        (BOOL, FP32, False),
    ],
)
def test_loses_nonzero(source, target, loses):
    assert loses_nonzero(source, target) is loses


def webnn_uint8_condition():
    """A WebNN converter's ``where(x, x, -10)`` of a float condition: WebNN booleans are uint8,
    so the condition is ``cast(x, "uint8")``, then cast to bool for MIL's select."""

    @mb.program(input_specs=[mb.TensorSpec((5,), dtype=FP32)], opset_version=ct.target.iOS17)
    def prog(x):
        cond_u8 = mb.cast(x=x, dtype="uint8", name="cond")
        cond = mb.cast(x=cond_u8, dtype="bool", name="cond_bool")
        return mb.select(cond=cond, a=x, b=np.float32(-10.0), name="out")

    return prog


@pytest.mark.parametrize("precision", [ct.precision.FLOAT32, ct.precision.FLOAT16], ids=["fp32", "fp16"])
def test_webnn_uint8_condition_feeding_select_equals_the_op_formula_under_the_pipeline(precision):
    """cast_optimization (DEFAULT's 3rd pass) would fuse the two casts long before
    webnn::canonicalize_uint8_select (after const_elimination) sees them: the guard runs first."""
    import mil_passes

    x = np.array([0.3, 1.7, 0.0, 2.5, 0.5029], dtype=np.float32)
    computed = np.float16 if precision == ct.precision.FLOAT16 else np.float32  # select's a, rounded
    want = np.where(x.astype(np.uint8) != 0, x.astype(computed), -10.0).astype(np.float32)
    results = {}
    for name, pipeline in (("DEFAULT", ct.PassPipeline.DEFAULT), ("pipeline", mil_passes.pipeline())):
        model = ct.convert(
            webnn_uint8_condition(),
            convert_to="mlprogram",
            compute_precision=precision,
            minimum_deployment_target=ct.target.iOS17,
            pass_pipeline=pipeline,
            skip_model_load=True,
        )
        prog = model._mil_program
        feed = x.astype(types.nptype_from_builtin(prog.functions["main"].inputs["x"].dtype))
        results[name] = evaluate(prog, {"x": feed})["out"]
    np.testing.assert_array_equal(results["pipeline"].astype(np.float32), want)
    # The bug the guard answers (if coremltools fixes it, the guard may go):
    assert (results["DEFAULT"] != -10).sum() > (want != -10).sum(), "DEFAULT no longer fuses the casts"

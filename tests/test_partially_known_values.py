"""webnn::guard_const_elimination beyond tests/test_guards.py's table: values beyond int32 and bools
keep their dtype, ``typed_value`` refuses what a dtype cannot hold, const_elimination's
``skip_const_by_size`` holds for the guard, and values coremltools infers wrong are folded right."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from mil_passes.guards.partially_known_values import typed_value
from mil_passes.testing import check_pass, op_counts
from mil_passes.runner import run_pass

PASS = "webnn::guard_const_elimination"
FP32, BOOL = types.fp32, types.bool


def slice_of_concat(part, dtype=FP32, *, read_by=None):
    """``concat(part, x)[:len(part)]`` (optionally read by ``add`` / ``concat`` with ``x``)."""
    n = len(part)

    @mb.program(input_specs=[mb.TensorSpec((n,), dtype=dtype)], opset_version=ct.target.iOS17)
    def prog(x):
        joined = mb.concat(values=(np.asarray(part, dtype=types.nptype_from_builtin(dtype)), x), axis=0, name="joined")
        window = mb.slice_by_index(x=joined, begin=[0], end=[n], name="window")
        if read_by == "add":
            return mb.add(x=window, y=x, name="out")
        if read_by == "concat":
            return mb.concat(values=(window, x), axis=0, name="out")
        return window

    return prog


def test_a_value_beyond_int32_stays_exact():
    after = check_pass(
        lambda: slice_of_concat([3.4e38], read_by="add"), PASS, inputs={"x": np.array([1.0], np.float32)}
    )
    const = [op for op in after.functions["main"].operations if op.op_type == "const" and op.outputs[0].shape == (1,)]
    assert any(op.val.val.tolist() == [np.float32(3.4e38)] for op in const)


def test_bools_stay_bools():
    prog = slice_of_concat([True, False], dtype=BOOL)
    run_pass(prog, PASS)
    run_pass(prog, "common::const_elimination")
    out = prog.functions["main"].outputs[0]
    assert out.dtype == BOOL and out.val.tolist() == [True, False]


def test_typed_value_refuses_a_value_its_dtype_cannot_hold():
    var = SimpleNamespace(val=np.array([0.5, 1], dtype=object), dtype=types.int32, shape=(2,))
    assert typed_value(var) is None
    var = SimpleNamespace(val=np.array([np.float32(0.5), 1], dtype=object), dtype=FP32, shape=(2,))
    np.testing.assert_array_equal(typed_value(var), np.array([0.5, 1.0], np.float32))
    var = SimpleNamespace(val=np.array([float("nan")], dtype=object), dtype=FP32, shape=(1,))
    assert np.isnan(typed_value(var)).all()


def test_const_eliminations_skip_const_by_size_holds_for_the_guard_in_the_pipeline():
    import mil_passes

    pipeline = mil_passes.pipeline()
    pipeline.set_options("common::const_elimination", {"skip_const_by_size": "1"})  # after pipeline()
    assert pipeline.get_options(PASS)[0].option_val == "1"
    guard = PASS_REGISTRY[PASS]
    guard.set_options(pipeline.get_options(PASS))
    prog = slice_of_concat([-10.5, 0.25], read_by="add")
    guard(prog)
    assert "slice_by_index" in op_counts(prog)  # 2 elements > 1: left, as const_elimination leaves it
    assert [str(r) for r in guard.last_result.declined] == [
        "slice_by_index 'window': a value has more than skip_const_by_size=1 elements"
    ]
    with pytest.raises(ValueError, match="skip_const_by_size must be a number"):
        guard.skip_const_by_size = "many"


def known_band_part_and_interleaved_concat(case: str):
    """A const ``band_part`` with -inf outside the band, or an interleaved ``concat`` of consts,
    read by an op that const_elimination folds too (the pipeline fuzzer's programs, seeds 0, 1)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=ct.target.iOS17)
    def prog(x):
        if case == "band_part":
            held = np.array([[2.5, 1.0, -65504.0], [-3.0, np.inf, 0.5], [-np.inf, 3.0, np.nan]], np.float16)
            band = mb.band_part(x=mb.identity(x=held), lower=1, upper=0)
            folded = mb.sub(x=mb.identity(x=np.ones((3, 3), np.float16)), y=band, name="out")
        else:
            a, b = (
                mb.identity(x=np.array([1.0, 2.0, 3.0], np.float32)),
                mb.identity(x=np.array([10.0, 20.0, 30.0], np.float32)),
            )
            folded = mb.mul(x=mb.concat(values=(a, b, a), axis=0, interleave=True), y=2.0, name="out")
        return folded, mb.relu(x=x)

    return prog


@pytest.mark.parametrize("case", ["band_part", "interleaved_concat"])
def test_values_coremltools_infers_wrong_are_folded_right(case):
    from mil_passes.reference import evaluate

    feeds = {"x": np.zeros(2, np.float32)}
    want = evaluate(known_band_part_and_interleaved_concat(case), feeds)["out"]
    alone = known_band_part_and_interleaved_concat(case)
    run_pass(alone, "common::const_elimination")
    assert not np.array_equal(evaluate(alone, feeds)["out"], want, equal_nan=True)  # the bug
    guarded = known_band_part_and_interleaved_concat(case)
    run_pass(guarded, PASS)
    run_pass(guarded, "common::const_elimination")
    np.testing.assert_array_equal(evaluate(guarded, feeds)["out"], want)

"""lint() rules and run_passes() on the built-in example and hand-made programs."""

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.examples import streaming_cache_program
from mil_passes.lint import lint
from mil_passes.optimize import format_report, run_passes

IOS17 = ct.target.iOS17


def window_program(begin, width, join=True, axis=-1):
    @mb.program(input_specs=[mb.TensorSpec((1, 4, 8)), mb.TensorSpec((1, 4, 40))], opset_version=IOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=axis, name="joined")
        window = mb.slice_by_index(x=joined, begin=[0, 0, begin], end=[0, 0, begin + width],
                                   end_mask=[True, True, False], name="window")
        return mb.stack(values=(window, window), axis=0, name="out") if join else window

    return prog


@pytest.mark.parametrize("begin, width", [(7, 8), (1, 16), (15, 24)])
def test_four_conditions_make_an_error(begin, width):
    (finding,) = lint(window_program(begin, width))
    assert finding.rule == "ane-refused-slice-of-concat" and finding.severity == "error"
    assert f"offset {begin}, width {width}" in finding.message
    assert "concat 'joined'" in finding.message and "stack 'out'" in finding.message


@pytest.mark.parametrize(
    "begin, width, join",
    [
        (8, 8, True),    # aligned offset
        (7, 9, True),    # width not a multiple of 8
        (7, 32, True),   # width a multiple of 32
        (7, 8, False),   # nothing joins the window
    ],
)
def test_any_condition_missing_is_only_a_warning(begin, width, join):
    (finding,) = lint(window_program(begin, width, join))
    assert finding.rule == "slice-of-concat" and finding.severity == "warning"


def test_cast_to_bool_before_select_is_flagged():
    @mb.program(input_specs=[mb.TensorSpec((3,), dtype=types.int32)], opset_version=IOS17)
    def prog(n):
        return mb.select(cond=mb.cast(x=n, dtype="bool", name="truth"), a=1.0, b=0.0, name="out")

    (finding,) = lint(prog)
    assert finding.rule == "non-bool-condition" and "cast 'truth' of int32 to bool" in finding.message


def test_surviving_shape_op_says_why():
    from coremltools.converters.mil.mil import get_new_symbol

    @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(), 4))], opset_version=IOS17)
    def prog(x):
        return mb.shape(x=x, name="dims")

    (finding,) = lint(prog)
    assert finding.rule == "runtime-shape" and "known only at run time" in finding.message


def test_lint_rejects_non_programs():
    with pytest.raises(TypeError, match="needs a coremltools MIL Program"):
        lint("model.mlpackage")


def test_run_passes_fixes_the_streaming_example_and_reports():
    prog = streaming_cache_program(layers=4, channels=16)
    report = run_passes(prog)
    assert sum(f.rule == "ane-refused-slice-of-concat" for f in report.findings_before) == 4
    assert report.findings_after == []
    assert [run.name for run in report.passes][-1] == "common::dead_code_elimination"
    table = format_report(report)
    assert "finding ane-refused-slice-of-concat" in table and "webnn::concat_slice_to_slice_concat" in table


def test_run_passes_rejects_unknown_pass_before_running():
    prog = streaming_cache_program(layers=2, channels=8)
    before = str(prog)
    with pytest.raises(ValueError, match="unknown pass 'webnn::nope'"):
        run_passes(prog, ["webnn::concat_slice_to_slice_concat", "webnn::nope"])
    assert str(prog) == before


def test_cuts_of_other_axes_than_the_concat_axis_are_not_windows():
    """slice-of-concat is a window on the concat's axis; a slice_by_size or split cutting only
    other axes (webnn::concat_slice_to_slice_concat refuses such a split) is not reported."""

    @mb.program(input_specs=[mb.TensorSpec((2, 4, 8)), mb.TensorSpec((2, 4, 7))], opset_version=IOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=-1, name="joined")
        first = mb.slice_by_size(x=joined, begin=[0, 0, 0], size=[1, -1, -1], name="first")
        last = mb.slice_by_size(x=joined, begin=[1, 0, -15], size=[1, 2, 15], name="last")
        top, bottom = mb.split(x=joined, num_splits=2, axis=0, name="halves")
        window = mb.slice_by_size(x=joined, begin=[0, 0, 7], size=[-1, -1, 8], name="window")
        head, tail = mb.split(x=joined, split_sizes=[7, 8], axis=2, name="parts")
        return first, last, top, bottom, window, head, tail

    assert [(f.rule, f.op) for f in lint(prog)] == [
        ("slice-of-concat", "window"), ("slice-of-concat", "parts"),
    ]

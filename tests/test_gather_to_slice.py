"""webnn::gather_to_slice: a gather by constant indices becomes slices, bit for bit; what it leaves."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.rewriter import Declined
from mil_passes.lint import lint
from mil_passes.passes.gather_to_slice import MAX_RUNS, GatherOfConstantIndices, runs_of
from mil_passes.runner import run_pass
from mil_passes.testing import check_pass, op_counts
from pass_helpers import only_op

PASS = "webnn::gather_to_slice"


def gather(indices, axis=1, shape=(2, 8, 3), dtype=types.fp32, opset=ct.target.iOS17):
    def build():
        @mb.program(input_specs=[mb.TensorSpec(shape, dtype=dtype)], opset_version=opset)
        def prog(x):
            return mb.gather(x=x, indices=np.asarray(indices, np.int32), axis=axis, name="g")

        return prog

    return build


def test_the_docstring_example_becomes_a_concat_of_two_slices():
    after = check_pass(gather([4, 5, 6, 7, 0]), PASS)
    assert op_counts(after) == {"slice_by_index": 2, "concat": 1}


@pytest.mark.parametrize(
    "indices, axis, ops",
    [
        ([2, 3, 4], 1, {"slice_by_index": 1}),
        ([-1], -2, {"slice_by_index": 1}),
        (5, 1, {"slice_by_index": 1}),  # a 0-d index: its axis squeezed
        ([1, 1, 2], 2, {"slice_by_index": 2, "concat": 1}),  # repeated
        ([7, 6, 5, 4], 1, {"slice_by_index": 4, "concat": 1}),  # reversed: four runs
        ([0, 1], 0, {"slice_by_index": 1}),
    ],
)
def test_constant_indices_become_slices_with_the_same_values(indices, axis, ops):
    after = check_pass(gather(indices, axis), PASS)
    assert op_counts(after) == ops


def test_more_runs_than_it_takes_stay_a_gather():
    build = gather([0, 2, 4, 6, 1])
    prog = build()
    match = GatherOfConstantIndices().match(only_op(prog, "gather"))
    assert isinstance(match, Declined) and f"at most {MAX_RUNS}" in match.reason


@pytest.mark.parametrize(
    "shape, indices, reason",
    [
        ((2, get_new_symbol(), 3), [0, 1], "known only at run time"),
        ((2, 8, 3), [[0, 1], [2, 3]], "0-d or 1-d"),
        ((2, 8, 3), [9], "out of range"),
    ],
)
def test_refusals_say_why(shape, indices, reason):
    prog = gather(indices, shape=shape)()
    before = str(prog)
    match = GatherOfConstantIndices().match(only_op(prog, "gather"))
    assert isinstance(match, Declined) and reason in match.reason
    run_pass(prog, PASS)
    assert str(prog) == before


def test_run_time_indices_are_not_a_candidate():
    @mb.program(input_specs=[mb.TensorSpec((2, 8)), mb.TensorSpec((3,), dtype=types.int32)])
    def prog(x, i):
        return mb.gather(x=x, indices=i, axis=1, name="g")

    assert GatherOfConstantIndices().match(only_op(prog, "gather")) is None


def test_runs_of_counts_negative_positions_from_the_end():
    assert runs_of(np.array([-2, -1, 0]), 5) == ((3, 5), (0, 1))
    assert runs_of(np.array([5]), 5) is None


def test_lint_names_the_pass_only_where_it_rewrites():
    (finding,) = [f for f in lint(gather([4, 5])()) if f.rule == "ane-gather"]
    assert finding.fix == PASS and finding.severity == "warning"
    (left,) = [f for f in lint(gather([0, 2, 4, 6, 1])()) if f.rule == "ane-gather"]
    assert left.fix is None and "CPU/GPU" in left.message


def test_a_gather_of_integer_data_in_several_runs_stays_a_gather():
    match = GatherOfConstantIndices().match(only_op(gather([4, 5, 0], dtype=types.int32)(), "gather"))
    assert isinstance(match, Declined) and "off the Neural Engine too" in match.reason
    assert op_counts(check_pass(gather([4, 5], dtype=types.int32), PASS)) == {"slice_by_index": 1}


def test_pipeline_cuts_a_window_of_the_concat_it_makes_in_one_run():
    """Found by the fuzzer (--seed 7): the second run of the pipeline cut the concat of the runs."""
    import mil_passes

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1,))], opset_version=ct.target.iOS17)
        def prog(x):
            joined = mb.concat(values=(mb.gather(x=x, indices=np.array([0, 0], np.int32), axis=0), [-10.0]), axis=0)
            return mb.slice_by_index(x=joined, begin=[0], end=[1], name="window")

        return prog

    after = check_pass(build, mil_passes.pipeline(ct.PassPipeline.EMPTY))  # the fuzz's "pipeline" target
    assert op_counts(after) == {"slice_by_index": 1}

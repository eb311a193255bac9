"""webnn::scatter_rank5_to_rank4: a scatter into a rank-5 tensor becomes a rank-4 one between reshapes,
bit for bit; what it leaves; the model it frees from the Neural Engine compiler's rejection."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

import mil_passes
from mil_passes.ir import iter_ops
from mil_passes.lint import lint_report
from mil_passes.passes.scatter_rank5_to_rank4 import (
    Merge,
    Rank5Scatter,
    ScatterRank5ToRank4,
    first_free_pair,
    merge_pair,
)
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pipeline
from mil_passes.testing import check_pass, op_counts
from mil_passes.testing.models import published
from pass_helpers import only_op

PASS = "webnn::scatter_rank5_to_rank4"
INT32 = types.int32


def shapes(prog) -> list[tuple[str, tuple[int, ...]]]:
    return [(op.op_type, tuple(op.outputs[0].shape)) for op in iter_ops(prog) if op.op_type != "const"]


def cache_write(opset=ct.target.iOS17, cache=(2, 1, 6, 3, 4)):
    """The docstring's program (smaller): this step's keys and values written at their positions on axis 2."""
    step = (*cache[:2], 1, *cache[3:])

    def build():
        specs = [mb.TensorSpec(cache), mb.TensorSpec(step, dtype=INT32), mb.TensorSpec(step)]

        @mb.program(input_specs=specs, opset_version=opset)
        def prog(kv, at, new):
            return mb.scatter_along_axis(data=kv, indices=at, updates=new, axis=2, mode="update", name="cache")

        return prog

    return build


def test_the_docstring_program_becomes_rank_4_with_the_same_bits():
    rng = np.random.default_rng(0)
    inputs = {
        "kv": rng.standard_normal((2, 1, 6, 3, 4)).astype(np.float32),
        "at": rng.integers(0, 6, (2, 1, 1, 3, 4)).astype(np.int32),
        "new": rng.standard_normal((2, 1, 1, 3, 4)).astype(np.float32),
    }
    after = check_pass(cache_write(), PASS, inputs=inputs)
    assert shapes(after) == [
        ("reshape", (2, 6, 3, 4)),
        ("reshape", (2, 1, 3, 4)),
        ("reshape", (2, 1, 3, 4)),
        ("scatter_along_axis", (2, 6, 3, 4)),
        ("reshape", (2, 1, 6, 3, 4)),
    ]
    assert only_op(after, "scatter_along_axis").axis.val == 1


def scatter(axis, indices, mode="update", opset=ct.target.iOS17, data=(2, 3, 4, 5, 2)):
    """``scatter`` of run-time updates into ``data`` at the const ``indices`` along ``axis``."""
    indices = np.array(indices, np.int32)
    updates = (*data[:axis], *indices.shape, *data[axis + 1 :])

    def build():
        @mb.program(input_specs=[mb.TensorSpec(data), mb.TensorSpec(updates)], opset_version=opset)
        def prog(x, u):
            return mb.scatter(
                data=x, indices=indices, updates=u, axis=axis - len(data) * (axis % 2), mode=mode, name="s"
            )

        return prog

    return build


@pytest.mark.parametrize("axis", range(5))
@pytest.mark.parametrize(
    "indices, mode, opset",
    [
        ([1, 0, 1], "update", ct.target.iOS17),  # a repeated index: the last write wins, as before
        ([[1, 0], [1, 1]], "add", ct.target.iOS17),  # rank-2 indices, accumulated
        ([-1, 0, -2], "update", ct.target.iOS16),  # negative indices count from the end before iOS17
    ],
)
def test_scatter_merges_two_axes_besides_its_own(axis, indices, mode, opset):
    after = check_pass(scatter(axis, indices, mode, opset), PASS)
    op = only_op(after, "scatter")
    pair = first_free_pair({axis})
    assert op.data.rank == 4 and op.axis.val == (axis if axis < pair else axis - 1)
    assert op_counts(after)["reshape"] == 3


def test_out_of_range_indices_are_dropped_as_before():
    """iOS17's ``validate_indices=False``: an index past the axis drops its update in rank 4 too."""

    def build():
        specs = [mb.TensorSpec((2, 3, 4, 5, 2)), mb.TensorSpec((2, 3, 4, 5, 2))]

        @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
        def prog(x, u):
            at = np.array([[[[[0, 9]]]]], np.int32) * np.ones((2, 3, 4, 5, 1), np.int32)
            return mb.scatter_along_axis(data=x, indices=at, updates=u, axis=-1, validate_indices=False, name="s")

        return prog

    after = check_pass(build, PASS)
    assert only_op(after, "scatter_along_axis").data.rank == 4


def scatter_nd(depth, data=(2, 3, 4, 5, 2), opset=ct.target.iOS17, indices=None):
    """``scatter_nd`` of 3 run-time slices at index tuples of ``depth`` axes (one repeated)."""
    if indices is None:
        indices = np.array([[i % size for size in data[:depth]] for i in (1, 0, 1)], np.int32)

    def build():
        @mb.program(input_specs=[mb.TensorSpec(data), mb.TensorSpec((3, *data[depth:]))], opset_version=opset)
        def prog(x, u):
            return mb.scatter_nd(data=x, indices=indices, updates=u, mode="add", name="s")

        return prog

    return build


@pytest.mark.parametrize("depth, merged", [(1, (2, 12, 5, 2)), (2, (2, 3, 20, 2)), (3, (2, 3, 4, 10))])
def test_scatter_nd_merges_two_axes_its_tuples_do_not_address(depth, merged):
    after = check_pass(scatter_nd(depth), PASS)
    assert tuple(only_op(after, "scatter_nd").data.shape) == merged


def test_scatter_nd_keeps_negative_indices_before_ios17():
    indices = np.array([[-1, 0], [1, -3], [-2, -1]], np.int32)
    after = check_pass(scatter_nd(2, opset=ct.target.iOS16, indices=indices), PASS)
    assert only_op(after, "scatter_nd").data.rank == 4


def test_const_data_is_reshaped_in_place():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 2, 3, 1, 4))], opset_version=ct.target.iOS17)
        def prog(u):
            zeros = np.zeros((1, 2, 3, 4, 4), np.float32)
            return mb.scatter(data=zeros, indices=np.array([2], np.int32), updates=u, axis=3, name="s")

        return prog

    after = check_pass(build, PASS)
    assert shapes(after) == [("reshape", (2, 3, 1, 4)), ("scatter", (2, 3, 4, 4)), ("reshape", (1, 2, 3, 4, 4))]


def test_pairs():
    assert first_free_pair({0}) == 1 and first_free_pair({2}) == 0 and first_free_pair({0, 1, 2}) == 3
    assert first_free_pair({0, 1, 2, 3}) is None
    assert merge_pair((2, 3, 4, 5, 6), 3) == (2, 3, 4, 30) and merge_pair((7, 2, 3), 1) == (7, 6)


@pytest.mark.parametrize(
    "build, reason",
    [
        (scatter_nd(4), "its index tuples address 4 of the 5 axes"),
        (scatter_nd(5), "its index tuples address 5 of the 5 axes"),
        (scatter(1, [0], data=(2, 3, get_new_symbol(), 5, 2)), "a size is known only at run time"),
        (scatter(1, [0], data=(2, 3, 4, 5, 2, 2)), "rank 6: only rank 5 is brought to 4"),
    ],
)
def test_declines_say_why(build, reason):
    op = next(op for op in iter_ops(build()) if op.op_type.startswith("scatter"))
    match = Rank5Scatter().match(op)
    assert isinstance(match, Declined) and reason in match.reason


def test_rank4_is_not_a_candidate():
    assert Rank5Scatter().match(only_op(scatter(1, [0], data=(2, 3, 4, 5))(), "scatter")) is None


def test_lint_names_the_pass_as_the_fix():
    (found,), declined = ScatterRank5ToRank4().find_matches(scatter(2, [0])())
    assert found.match == Merge(0, 0, 1) and declined == []
    findings, _ = lint_report(scatter(2, [0])())
    (finding,) = [f for f in findings if f.rule == "ane-rank5-scatter"]
    assert finding.fix == PASS


def test_pipeline_frees_the_pockettts_step_from_the_whole_model_rejection():
    """FluidAudio's PocketTTS step (smaller): its rank-5 cache scatter rejects the model; after
    ``pipeline()`` the scatter is rank 4 and the rule no longer fires."""
    before = published.rank5_scatter_step(width=32, heads=2, context=8)
    assert lint_report(before)[1].rejected_by == ["ane-rank5-scatter"]
    after = published.rank5_scatter_step(width=32, heads=2, context=8)
    run_pipeline(after, mil_passes.pipeline())
    findings, placement = lint_report(after)
    assert "ane-rank5-scatter" not in placement.rejected_by
    assert not [f for f in findings if f.rule == "ane-rank5-scatter"]
    assert only_op(after, "scatter_along_axis").data.rank == 4

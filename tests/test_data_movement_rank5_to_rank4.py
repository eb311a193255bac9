"""webnn::data_movement_rank5_to_rank4: data movement on a rank-5 tensor becomes a rank-4 op between
reshapes, bit for bit; reshapes through rank 5 become one; what it leaves; what pipeline() keeps in rank 5."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

import mil_passes
from mil_passes.ir import iter_ops
from mil_passes.lint import lint
from mil_passes.passes._rank5_pairs import axis_after_merge, merged_positions, tile_reps, transpose_perm
from mil_passes.passes.data_movement_rank5_to_rank4 import (
    DataMovementRank5ToRank4,
    Rank5DataMovement,
    ReshapeThroughRank5,
)
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pipeline
from mil_passes.testing import check_pass
from mil_passes.testing.models import published
from pass_helpers import only_op

PASS = "webnn::data_movement_rank5_to_rank4"
SHAPE = (2, 3, 1, 4, 2)


def shapes(prog) -> list[tuple[str, tuple[int, ...]]]:
    return [(op.op_type, tuple(op.outputs[0].shape)) for op in iter_ops(prog) if op.op_type != "const"]


def rank5_ops(prog) -> list[str]:
    """The ops that read or make a rank-5 tensor (consts aside)."""
    found = []
    for op in iter_ops(prog):
        read = [v for v in op.inputs.values() if not isinstance(v, (list, tuple))]
        read += [v for vs in op.inputs.values() if isinstance(vs, (list, tuple)) for v in vs]
        vars_ = [*op.outputs, *(v for v in read if v.op is None or v.op.op_type != "const")]
        if op.op_type != "const" and any(v.rank == 5 for v in vars_):
            found.append(op.op_type)
    return sorted(found)


def attention_heads(opset=ct.target.iOS17):
    """The docstring's program: heads split in rank 5, transposed, joined again."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 8, 64))], opset_version=opset)
        def prog(x):
            h = mb.reshape(x=x, shape=[1, 8, 2, 4, 8], name="h")
            t = mb.transpose(x=h, perm=[0, 2, 3, 1, 4], name="t")
            return mb.reshape(x=t, shape=[1, 8, 8, 8], name="y")

        return prog

    return build


def test_the_docstring_program_keeps_no_rank_5_tensor():
    after = check_pass(attention_heads(), PASS)
    assert shapes(after) == [("reshape", (8, 2, 4, 8)), ("transpose", (2, 4, 8, 8)), ("reshape", (1, 8, 8, 8))]
    assert list(only_op(after, "transpose").perm.val) == [1, 2, 0, 3]


def on_rank5(op_type, shape=SHAPE, dtype=types.fp32, opset=ct.target.iOS17, **params):
    """``op_type`` of a rank-5 input ``x`` (and a second input ``y`` where ``params`` names its shape)."""
    other = params.pop("y_shape", None)

    def op(x, y=None):
        if op_type == "concat":
            return mb.concat(values=(x, y), name="op", **params)
        if op_type == "slice_update":
            return mb.slice_update(x=x, update=y, name="op", **params)
        return getattr(mb, op_type)(x=x, name="op", **params)

    def build():
        if other is None:
            return mb.program(input_specs=[mb.TensorSpec(shape, dtype=dtype)], opset_version=opset)(lambda x: op(x))
        specs = [mb.TensorSpec(shape, dtype=dtype), mb.TensorSpec(other, dtype=dtype)]
        return mb.program(input_specs=specs, opset_version=opset)(lambda x, y: op(x, y))

    return build


CASES = {
    "transpose keeps 3, 4 together": ("transpose", {"perm": [2, 3, 4, 0, 1]}),
    "transpose moves the size-1 axis": ("transpose", {"perm": [4, 2, 0, 3, 1]}),
    "transpose, negative perm": ("transpose", {"perm": [-5, -2, -1, -3, -4]}),
    "slice inside an axis, whole after": ("slice_by_index", {"begin": [1, 1, 0, 0, 0], "end": [2, 3, 1, 4, 2]}),
    "slice with squeeze and masks": (
        "slice_by_index",
        {
            "begin": [1, 0, 0, 1, 0],
            "end": [0, 3, 1, 3, 2],
            "end_mask": [True, False, False, False, True],
            "squeeze_mask": [True, False, False, False, False],
        },
    ),
    "slice reversed, strided": (
        "slice_by_index",
        {
            "begin": [1, 2, 0, 3, 1],
            "end": [0, 0, 1, 0, 0],
            "stride": [-1, -2, 1, -1, -1],
            "end_mask": [True, True, False, True, True],
        },
    ),
    "slice_by_size": ("slice_by_size", {"begin": [0, -2, 0, 1, 0], "size": [2, 2, -1, 3, -1]}),
    "concat along 2": ("concat", {"axis": 2, "y_shape": (2, 3, 5, 4, 2)}),
    "concat along -1": ("concat", {"axis": -1, "y_shape": (2, 3, 1, 4, 3)}),
    "concat interleaved": ("concat", {"axis": 3, "interleave": True, "y_shape": (2, 3, 1, 4, 2)}),
    "split in sizes": ("split", {"axis": 3, "split_sizes": [1, 3]}),
    "split in parts": ("split", {"axis": 0, "num_splits": 2}),
    "tile": ("tile", {"reps": [2, 1, 3, 1, 2]}),
}


@pytest.mark.parametrize("case", CASES)
def test_rank5_data_movement_becomes_rank4_with_the_same_bits(case):
    op_type, params = CASES[case]
    after = check_pass(on_rank5(op_type, **dict(params)), PASS)
    moved = only_op(after, "slice_by_index" if op_type == "slice_by_size" else op_type)
    assert all(v.rank == 4 for v in (*moved.outputs, *_tensors_of(moved)))


def _tensors_of(op):
    return list(op.values) if op.op_type == "concat" else [op.x]


def test_slice_update_of_a_tensor_becomes_rank_4():
    params = {"begin": [0, 1, 0, 0, 0], "end": [2, 2, 1, 4, 2], "squeeze_mask": [False, True, False, False, False]}
    build = on_rank5("slice_update", y_shape=(2, 1, 4, 2), opset=ct.target.iOS18, **params)
    after = check_pass(build, PASS)
    op = only_op(after, "slice_update")
    assert op.x.rank == 4 and tuple(op.update.shape) == (2, 1, 4, 2)


def test_int_and_const_operands_keep_their_bits():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 3, 1, 4, 2), dtype=types.int32)], opset_version=ct.target.iOS17)
        def prog(x):
            piece = np.arange(2 * 3 * 2 * 4 * 2, dtype=np.int32).reshape(2, 3, 2, 4, 2)
            return mb.concat(values=(x, piece), axis=2, name="op")

        return prog

    after = check_pass(build, PASS)
    (joined,) = [v for v in only_op(after, "concat").values if v.op.op_type == "const"]
    assert joined.rank == 4


def test_reshapes_through_rank_5_become_one():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 6, 4))], opset_version=ct.target.iOS17)
        def prog(x):
            five = mb.expand_dims(x=mb.reshape(x=x, shape=[2, 3, 2, 4]), axes=[0], name="five")
            return mb.squeeze(x=five, axes=[0], name="four"), mb.reshape(x=five, shape=[12, 4], name="two")

        return prog

    after = check_pass(build, PASS)
    assert [op.op_type for op in iter_ops(after) if op.op_type != "const"] == ["reshape", "reshape"]
    assert rank5_ops(after) == []


def test_split_and_squeeze_of_a_cache_leave_no_rank_5_tensor():
    """The PocketTTS cache read: split into keys and values, each squeezed."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((2, 1, 6, 2, 4))], opset_version=ct.target.iOS17)
        def prog(cache):
            k, v = mb.split(x=cache, num_splits=2, axis=0)
            k = mb.transpose(x=mb.squeeze(x=k, axes=[0]), perm=[0, 2, 1, 3])
            return mb.add(x=k, y=mb.transpose(x=mb.squeeze(x=v, axes=[0]), perm=[0, 2, 1, 3]), name="y")

        return prog

    after = check_pass(build, PASS)
    assert rank5_ops(after) == ["reshape"]  # the input's one reshape to rank 4
    assert only_op(after, "split").x.rank == 4


@pytest.mark.parametrize(
    "build, reason",
    [
        (on_rank5("transpose", shape=(2, 3, 2, 3, 2), perm=[4, 3, 2, 1, 0]), "no two adjacent axes merge"),
        (
            on_rank5(
                "slice_by_index", shape=(2, 3, 2, 3, 2), begin=[0] * 5, end=[2, 3, 2, 3, 2], stride=[1, 2, 1, 2, 1]
            ),
            "no two",
        ),
        (on_rank5("tile", shape=(2, 3, 2, 3, 2), reps=[2, 2, 2, 2, 2]), "no two adjacent axes merge"),
        (on_rank5("transpose", shape=(2, get_new_symbol(), 1, 4, 2), perm=[0, 1, 2, 4, 3]), "known only at run time"),
    ],
)
def test_declines_say_why(build, reason):
    match = Rank5DataMovement().match(only_op(build(), build().functions["main"].operations[-1].op_type))
    assert isinstance(match, Declined) and reason in match.reason


def test_run_time_bounds_are_left():
    @mb.program(
        input_specs=[mb.TensorSpec(SHAPE), mb.TensorSpec((5,), dtype=types.int32)], opset_version=ct.target.iOS17
    )
    def prog(x, begin):
        return mb.slice_by_index(x=x, begin=begin, end=[2, 3, 1, 4, 2], name="op")

    match = Rank5DataMovement().match(only_op(prog, "slice_by_index"))
    assert isinstance(match, Declined) and match.reason == "begin known only at run time"


def test_a_state_write_is_left_in_place():
    specs = [mb.TensorSpec((1, 1, 1, 4, 2), dtype=types.fp16), mb.StateTensorSpec((2, 1, 6, 4, 2), dtype=types.fp16)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(new, cache):
        written = mb.slice_update(x=mb.read_state(input=cache), update=new, begin=[0, 0, 3, 0, 0], end=[1, 1, 4, 4, 2])
        return mb.relu(x=mb.coreml_update_state(state=cache, value=written), name="y")

    match = Rank5DataMovement().match(only_op(prog, "slice_update"))
    assert isinstance(match, Declined) and "written to a state" in match.reason


def test_rank4_and_a_reshape_of_an_input_are_no_candidates():
    assert (
        Rank5DataMovement().match(only_op(on_rank5("transpose", shape=(2, 3, 4, 5), perm=[1, 0, 2, 3])(), "transpose"))
        is None
    )
    reshape = mb.program(input_specs=[mb.TensorSpec(SHAPE)])(lambda x: mb.reshape(x=x, shape=[6, 8]))
    assert ReshapeThroughRank5().match(only_op(reshape, "reshape")) is None


def test_lint_names_the_pass():
    (finding,) = [f for f in lint(attention_heads()()) if f.rule == "rank5-data-movement"]
    assert finding.fix == PASS and finding.severity == "info"
    (found,), declined = DataMovementRank5ToRank4().find_matches(attention_heads()())
    assert (
        found.describe() == "transpose 't' moves a rank-5 tensor: a rank-4 op between reshapes (axes 0 and 1 merge)"
        and declined == []
    )


def test_pipeline_keeps_no_rank_5_op_in_the_attention_round_trip():
    before, after = attention_heads()(), attention_heads()()
    run_pipeline(after, mil_passes.pipeline())
    assert rank5_ops(before) == ["reshape", "reshape", "transpose"] and rank5_ops(after) == []


def test_pipeline_leaves_the_pockettts_step_only_its_cache_reshapes():
    """FluidAudio's PocketTTS step: the cache comes in and goes out in rank 5; every op between is rank 4."""
    before = published.rank5_scatter_step(width=32, heads=2, context=8)
    after = published.rank5_scatter_step(width=32, heads=2, context=8)
    run_pipeline(after, mil_passes.pipeline())
    assert rank5_ops(before) == ["reshape", "reshape", "scatter_along_axis", "split", "squeeze", "squeeze", "tile"]
    assert rank5_ops(after) == ["reshape", "reshape"]


def test_pairs():
    assert transpose_perm((2, 3, 4, 5, 6), [0, 3, 4, 1, 2], 3) == [0, 3, 1, 2]
    assert transpose_perm((2, 3, 4, 5, 6), [4, 3, 2, 1, 0], 0) is None
    assert transpose_perm((2, 1, 4, 5, 6), [4, 3, 1, 2, 0], 0) == [3, 2, 1, 0]
    assert axis_after_merge(2, (2, 3, 4, 5, 6), 0) == 1 and axis_after_merge(2, (2, 3, 4, 5, 6), 1) is None
    assert axis_after_merge(-1, (2, 3, 4, 1, 6), 3) == 3
    assert (
        tile_reps((2, 3, 4, 5, 6), [1, 2, 1, 3, 1], 1) == [1, 2, 3, 1]
        and tile_reps((2, 3, 4, 5, 6), [2] * 5, 0) is None
    )


SLICES = st.tuples(st.none() | st.integers(-5, 5), st.none() | st.integers(-6, 6), st.sampled_from([1, 2, 3, -1, -2]))


@given(st.integers(1, 5), st.integers(1, 5), SLICES, SLICES)
def test_merged_positions_are_the_positions_read_in_order(outer_size, inner_size, outer_slice, inner_slice):
    outer, inner = range(outer_size)[slice(*outer_slice)], range(inner_size)[slice(*inner_slice)]
    read = [a * inner_size + b for a in outer for b in inner]
    merged = merged_positions(outer, inner, outer_size, inner_size)
    steps = {second - first for first, second in zip(read, read[1:])}
    if merged is None:  # left only where the positions are no slice (or none at all)
        assert not read or len(steps) > 1
    else:
        assert list(merged) == read


@given(
    st.lists(st.integers(1, 3), min_size=5, max_size=5),
    st.permutations(range(5)),
    st.integers(0, 1 << 16),
)
def test_random_transposes_and_tiles_stay_exact(shape, perm, seed):
    reps = [int(r) for r in np.random.default_rng(seed).integers(1, 3, size=5)]
    for build in (
        on_rank5("transpose", shape=tuple(shape), perm=list(perm)),
        on_rank5("tile", shape=tuple(shape), reps=reps),
    ):
        after = check_pass(build, PASS, seed=seed)
        assert not [m for m in DataMovementRank5ToRank4().find_matches(after)[0]]


def test_a_window_coremltools_types_wrong_is_left():
    """coremltools types ``slice_by_size`` with a negative begin and size -1 as ``size - begin`` wide."""
    build = on_rank5("slice_by_size", begin=[0, 0, 0, -2, 0], size=[-1, -1, -1, -1, -1])
    match = Rank5DataMovement().match(only_op(build(), "slice_by_size"))
    assert (
        isinstance(match, Declined)
        and "coremltools types its window (2, 3, 1, 6, 2), and it reads (2, 3, 1, 2, 2)" in match.reason
    )


def test_a_window_is_not_folded_onto_a_concat():
    """concat_slice_to_slice_concat runs before this pass: a slice that would come to read a concat
    itself reads it through its reshapes still, so a second run of the pipeline changes nothing."""

    def build():
        @mb.program(
            input_specs=[mb.TensorSpec((2, 3, 4, 2)), mb.TensorSpec((2, 3, 4, 3))], opset_version=ct.target.iOS17
        )
        def prog(a, b):
            five = mb.expand_dims(x=mb.concat(values=(a, b), axis=3), axes=[1], name="five")
            return mb.slice_by_index(x=five, begin=[0, 0, 0, 0, 1], end=[2, 1, 3, 4, 4], name="window")

        return prog

    after = check_pass(build, mil_passes.pipeline(ct.PassPipeline.EMPTY))
    assert only_op(after, "slice_by_index").x.op.op_type != "concat"
    (declined,) = DataMovementRank5ToRank4().find_matches(after)[1]
    assert "a window would read concat" in declined.describe()


def test_dead_ops_are_no_candidates():
    def build():
        @mb.program(input_specs=[mb.TensorSpec(SHAPE)], opset_version=ct.target.iOS17)
        def prog(x):
            mb.transpose(x=x, perm=[1, 0, 2, 3, 4], name="dead")
            return mb.relu(x=x, name="y")

        return prog

    assert DataMovementRank5ToRank4().find_matches(build()) == ([], [])


def test_a_reshape_of_run_time_size_folds_when_its_target_is_literal():
    """The KV write dynamic_state_update_to_mask builds: ``expand_dims`` of a run-time length to rank 5,
    then a reshape to ``[2, -1, 8]``; the target's -1 is solved from the source as it was."""

    def build(target):
        @mb.program(input_specs=[mb.TensorSpec((1, 2, get_new_symbol(), 8))], opset_version=ct.target.iOS17)
        def prog(x):
            return mb.reshape(x=mb.expand_dims(x=x, axes=[0]), shape=target, name="y")

        return prog

    after = check_pass(lambda: build([2, -1, 8]), PASS, sizes=3)
    assert [op.op_type for op in iter_ops(after) if op.op_type != "const"] == ["reshape"]
    match = ReshapeThroughRank5().match(only_op(build([0, 0, 2, -1, 8]), "reshape"))
    assert isinstance(match, Declined) and match.reason == "a size is known only at run time"


def test_a_split_along_another_axis_reads_the_rank_4_concat():
    """concat_slice_to_slice_concat leaves a split that is not along the concat axis: the fold may
    put it right on the concat (the cache joined with the new step, an output too, then split)."""

    def build():
        specs = [mb.TensorSpec((2, 1, 5, 4, 8)), mb.TensorSpec((2, 1, 1, 4, 8))]

        @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
        def prog(cache, new):
            joined = mb.concat(values=(cache, new), axis=2, name="joined")
            keys, _ = mb.split(x=joined, num_splits=2, axis=0)
            return mb.relu(x=mb.squeeze(x=keys, axes=[0]), name="y"), joined

        return prog

    after = check_pass(build, mil_passes.pipeline(ct.PassPipeline.EMPTY))
    assert only_op(after, "split").x.op.op_type == "concat" and only_op(after, "split").x.rank == 4

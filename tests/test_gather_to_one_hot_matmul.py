"""webnn::gather_to_one_hot_matmul: a run-time gather from a small constant table becomes a one-hot
matmul; the same bits for every index in range, a refusal with its reason where that is not shown."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops
from mil_passes.passes.gather_to_one_hot_matmul import MAX_ROWS, GatherOfSmallTable, integer_range, table_refusal
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pass
from mil_passes.testing import check_pass
from pass_helpers import only_op

PASS = "webnn::gather_to_one_hot_matmul"


def embedding(table, ids=5, guard=True, opset=ct.target.iOS17, validate=False):
    """The docstring's example: int16 ids, the fp16 guard gather_index_guard_in_fp16 leaves, a gather."""
    rows = table.shape[0]

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, ids), dtype=types.int32)], opset_version=opset)
        def prog(input_ids):
            index = mb.cast(x=mb.cast(x=input_ids, dtype="int16"), dtype="fp16")
            if guard:
                keep = mb.greater_equal(x=index, y=np.float16(0))
                capped, wrapped = mb.minimum(x=index, y=np.float16(rows)), mb.add(x=index, y=np.float16(rows))
                index = mb.select(cond=keep, a=capped, b=wrapped)
            extra = {"validate_indices": True} if validate else {}
            return mb.gather(x=table, indices=mb.cast(x=index, dtype="int16"), axis=0, name="rows", **extra)

        return prog

    return build


def table_of(rows, width=3, dtype=np.float16, seed=0):
    values = np.random.default_rng(seed).normal(size=(rows, width)).astype(dtype)
    values[values == 0] = 1  # no -0 (nor +0, which a sign flip could make -0)
    return values


def test_the_docstring_example_leaves_no_gather():
    after = check_pass(embedding(table_of(96)), PASS, inputs={"input_ids": np.array([[0, 5, -1, -96, 95]], np.int32)})
    assert [op.op_type for op in iter_ops(after) if op.op_type in ("gather", "matmul")] == ["matmul"]


@given(st.integers(1, MAX_ROWS // 2), st.sampled_from([np.float16, np.float32]), st.integers(0, 2**16))
def test_every_id_in_range_reads_the_same_row_bit_for_bit(rows, dtype, seed):
    """check_pass compares the outputs' bytes."""
    ids = np.random.default_rng(seed).integers(-2 * rows, rows, (1, 5)).astype(np.int32)  # the guard wraps once
    check_pass(embedding(table_of(rows, dtype=dtype, seed=seed)), PASS, inputs={"input_ids": ids})


def test_a_full_table_of_2048_rows_and_its_last_row():
    ids = {"input_ids": np.array([[2047, 0, 1024, 2046, -2048]], np.int32)}
    check_pass(embedding(table_of(MAX_ROWS)), PASS, inputs=ids)


def test_ids_without_a_guard_read_the_same_rows():
    ids = {"input_ids": np.array([[0, 7, 3, 3, 11]], np.int32)}
    check_pass(embedding(table_of(12), guard=False), PASS, inputs=ids)


def test_positive_zero_rows_stay_positive_zero():
    table = table_of(4)
    table[2] = 0.0
    after = check_pass(embedding(table), PASS, inputs={"input_ids": np.array([[2, 2, 1, 0, 3]], np.int32)})
    assert only_op(after, "matmul")


@pytest.mark.parametrize(
    "change, kwargs, reason",
    [
        (lambda t: t.__setitem__((1, 1), -0.0), {}, "-0"),
        (lambda t: t.__setitem__((0, 2), np.inf), {}, "inf or NaN"),
        (lambda t: t.__setitem__((3, 0), np.nan), {}, "inf or NaN"),
        (None, dict(validate=True), "validates its indices"),
    ],
)
def test_refusals_say_why(change, kwargs, reason):
    table = table_of(8)
    if change:
        change(table)
    match = GatherOfSmallTable().match(only_op(embedding(table, **kwargs)(), "gather"))
    assert isinstance(match, Declined) and reason in match.reason


@pytest.mark.parametrize("opset", [ct.target.iOS16, ct.target.iOS17])
def test_a_negative_index_reads_from_the_end(opset):
    """A gather reads index -1 as the last row (iOS16; the interpreter at every opset): so does the
    one-hot, of the index plus D where it is negative."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, 3), dtype=types.fp32)], opset_version=opset)
        def prog(x):
            flag = mb.cast(x=mb.greater(x=x, y=0.0), dtype="fp32")
            index = mb.cast(x=mb.add(x=flag, y=-1.0), dtype="int32")
            return mb.gather(x=table_of(8, dtype=np.float32), indices=index, name="rows")

        return prog

    after = check_pass(build, PASS, inputs={"x": np.array([[1.0, -1.0, 0.5]], np.float32)})
    made = [op.op_type for op in iter_ops(after) if op.op_type != "const"][-7:]
    assert made == ["greater_equal", "add", "select", "expand_dims", "equal", "cast", "matmul"]


def test_an_index_known_before_run_time_is_not_a_match():
    """Found by the fuzz (seed 7): a one-hot of a known index made a select of known values, which
    canonicalize_uint8_select rewrote on the pipeline's second run."""

    @mb.program(input_specs=[mb.TensorSpec((1,), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        index = mb.cast(x=mb.identity(x=np.array([1], np.int16)), dtype="fp16")
        return mb.gather(x=table_of(3), indices=mb.cast(x=index, dtype="int16"), axis=0)

    assert GatherOfSmallTable().match(only_op(prog, "gather")) is None


def test_an_id_the_guard_leaves_negative_reads_the_row_the_gather_read():
    """Found by the fuzz (seed 7): id -2 of a table of 1 row, guarded to -1, reads the row from the end."""
    check_pass(embedding(table_of(1)), PASS, inputs={"input_ids": np.array([[-2, -1, 0, -2, 0]], np.int32)})


def test_a_table_of_more_rows_than_fp16_counts_is_refused():
    match = GatherOfSmallTable().match(only_op(embedding(table_of(MAX_ROWS + 1, width=1))(), "gather"))
    assert isinstance(match, Declined) and f"only up to {MAX_ROWS}" in match.reason


def test_an_index_not_shown_integer_is_refused():
    @mb.program(input_specs=[mb.TensorSpec((1, 3), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(index):
        return mb.gather(x=table_of(8), indices=mb.cast(x=index, dtype="int16"), axis=0)

    match = GatherOfSmallTable().match(only_op(prog, "gather"))
    assert isinstance(match, Declined) and "not shown to be an integer" in match.reason


def test_integer_ranges_follow_the_guard():
    prog = embedding(table_of(96))()
    index = only_op(prog, "gather").indices.op.x
    assert integer_range(index) == (-(2**15) + 96, 96)  # each branch narrowed by the guard's condition
    assert integer_range(only_op(prog, "greater_equal").outputs[0]) is None


@pytest.mark.parametrize(
    "dtype, build_index",
    [
        ("fp32", lambda ids: mb.add(x=ids, y=np.float32(65536))),  # wraps to row 0 in int16
        ("fp16", lambda ids: mb.add(x=ids, y=np.float16(32737))),  # up to 65504, which wraps to -32
        ("fp16", lambda ids: mb.sub(x=mb.add(x=ids, y=np.float16(40000)), y=np.float16(40000))),  # inf between
    ],
)
def test_an_index_that_may_wrap_or_overflow_is_refused(dtype, build_index):
    """Found in review: bounds outside int16 wrap onto rows, and an intermediate inf is no integer."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(ids):
        index = build_index(mb.cast(x=mb.cast(x=ids, dtype="int16"), dtype=dtype))
        return mb.gather(x=table_of(64), indices=mb.cast(x=index, dtype="int16"), axis=0)

    match = GatherOfSmallTable().match(only_op(prog, "gather"))
    assert isinstance(match, Declined), match


def test_table_refusal_passes_finite_tables_without_negative_zero():
    assert table_refusal(np.array([[0.0, -1.0], [2.0, 3.0]], np.float16)) is None
    assert "-0" in table_refusal(np.array([[-0.0]], np.float32))


def test_an_id_out_of_range_reads_zeros_where_the_gather_raised():
    before, after = embedding(table_of(8))(), embedding(table_of(8))()
    run_pass(after, PASS)
    from mil_passes.reference import evaluate

    ids = {"input_ids": np.array([[0, 1, 2, 3, 40]], np.int32)}
    with pytest.raises((IndexError, ValueError)):
        evaluate(before, ids)
    rows = next(iter(evaluate(after, ids).values()))
    assert not rows[0, 4].any()

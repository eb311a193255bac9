"""webnn::gather_index_guard_in_fp16: coremltools' int32 negative-index guard of a small table's
gather runs in fp16; the same rows for every id in range, out of range stays out of range."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.ir import iter_ops
from mil_passes.passes.gather_index_guard_in_fp16 import MAX_ROWS, GuardOfSmallTable
from mil_passes.reference import evaluate
from mil_passes.testing import check_pass
from mil_passes.testing.strategies import programs
from mil_passes.rewriter import Declined
from mil_passes.runner import run_pass
from pass_helpers import would_rewrite, evaluates, only_op

PASS = "webnn::gather_index_guard_in_fp16"


def embedding(rows=96, ids=5, narrow=True, read_as_int32=False):
    """The docstring's example: an int32 input narrowed to int16, guarded, gathered."""
    table = np.arange(rows * 2, dtype=np.float16).reshape(rows, 2)

    def build():
        @mb.program(input_specs=[mb.TensorSpec((1, ids), dtype=types.int32)], opset_version=ct.target.iOS17)
        def prog(input_ids):
            wide = mb.cast(x=mb.cast(x=input_ids, dtype="int16"), dtype="int32") if narrow else input_ids
            index = mb.select(cond=mb.greater_equal(x=wide, y=0), a=wide, b=mb.add(x=wide, y=rows))
            if read_as_int32:
                return mb.gather(x=table, indices=index, axis=0, name="rows")
            return mb.gather(x=table, indices=mb.cast(x=index, dtype="int16"), axis=0, name="rows")

        return prog

    return build


def test_the_docstring_example_leaves_no_int32_op():
    ids = {"input_ids": np.array([[0, 5, -1, -96, 95]], np.int32)}
    after = check_pass(embedding(), PASS, inputs=ids)
    int32 = [op for op in iter_ops(after) if op.op_type != "const" and types.int32 in {o.dtype for o in op.outputs}]
    assert int32 == []
    assert only_op(after, "select").outputs[0].dtype == types.fp16


@given(st.integers(1, MAX_ROWS), st.integers(0, 2**16))
def test_every_id_in_range_gathers_the_same_row(rows, seed):
    ids = np.random.default_rng(seed).integers(-2 * rows, rows, (1, 5)).astype(np.int32)
    check_pass(embedding(rows), PASS, inputs={"input_ids": ids})


def outcome(prog, inputs):
    """The outputs, or the kind of error the interpreter raises for an index out of range."""
    try:
        return [v.tobytes() for v in evaluate(prog, inputs).values()]
    except (ValueError, IndexError):
        return "out of range"


@pytest.mark.parametrize("value", [96, 2047, 2048, 32767, 40000, 65536, -193, -2049, -32768, -(2**31)])
def test_an_id_out_of_range_stays_out_of_range_and_wrapped_ids_stay_the_same(value):
    """``-(2**31)`` and 65536 narrow to int16 0 (add_int16_cast's cast, before the guard): row 0 in both."""
    before, after = embedding()(), embedding()()
    run_pass(after, PASS)
    ids = {"input_ids": np.array([[0, 1, 2, 3, value]], np.int32)}
    assert outcome(before, ids) == outcome(after, ids)


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        (dict(rows=MAX_ROWS + 1), f"up to {MAX_ROWS} rows"),
        (dict(narrow=False), "not a cast of int16"),
        (dict(read_as_int32=True), "read as int32"),
    ],
)
def test_refusals_say_why(kwargs, reason):
    match = GuardOfSmallTable().match(only_op(embedding(**kwargs)(), "select"))
    assert isinstance(match, Declined) and reason in match.reason


@given(programs(plant=[PASS]))
def test_random_programs_with_the_plant_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [op for op in iter_ops(after) if op.op_type == "select" and would_rewrite(GuardOfSmallTable(), op)]

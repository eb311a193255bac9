"""webnn::guard_add_fp16_cast: a reshape by a const 0 target (written by fold_shape_ops) keeps a
true declared type through common::add_fp16_cast, and fold_shape_ops folds its target back."""

from __future__ import annotations

import numpy as np

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from mil_passes.testing import assert_equivalent, op_counts
from mil_passes.testing import run_pass
from mil_passes.cli.text_output import format_summary
from mil_passes.verify import verify_program

PASS = "webnn::guard_add_fp16_cast"
FEEDS = [{"x": np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1)}, {"x": np.full((1, 1, 1, 1), -3.0, np.float32)}]
SYMBOL = get_new_symbol()  # one per process: a Symbol can be made once


def reshape_by_own_shape():
    """The fuzzer's minimal program (seed 1): ``reshape(x, shape(x))`` with three run-time dims,
    which fold_shape_ops turns into ``reshape(x, [0, 0, 0, 1])``."""

    @mb.program(input_specs=[mb.TensorSpec((SYMBOL, SYMBOL, SYMBOL, 1))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.reshape(x=x, shape=mb.shape(x=x), name="out")

    return prog


def reshape_of(prog):
    (op,) = [op for op in prog.functions["main"].operations if op.op_type == "reshape"]
    return op


def folded():
    prog = reshape_by_own_shape()
    run_pass(prog, "webnn::fold_shape_ops")
    assert reshape_of(prog).shape.val.tolist() == [0, 0, 0, 1]
    return prog


def test_add_fp16_cast_types_the_zeros_literally_without_the_guard():
    """The bug the guard answers (if coremltools types the zeros, the guard may go)."""
    prog = folded()
    run_pass(prog, "common::add_fp16_cast")
    assert list(reshape_of(prog).outputs[0].shape) == [0, 0, 0, 1]


def test_the_guarded_reshape_keeps_a_true_type_and_its_values():
    prog = folded()
    run_pass(prog, PASS)
    assert reshape_of(prog).shape.val is None and op_counts(prog)["shape"] == 1
    for feeds in FEEDS:
        assert_equivalent(reshape_by_own_shape(), prog, feeds)
    run_pass(prog, "common::add_fp16_cast")
    declared = reshape_of(prog).outputs[0].shape
    assert all(is_symbolic(d) for d in declared[:3]) and declared[3] == 1
    run_pass(prog, "webnn::fold_shape_ops")  # as the pipeline does right after add_fp16_cast
    assert reshape_of(prog).shape.val.tolist() == [0, 0, 0, 1] and "shape" not in op_counts(prog)


def test_the_pipeline_has_no_invalid_step():
    verification = verify_program(reshape_by_own_shape, "mil_passes", feeds=FEEDS)
    assert verification.culprit is None, format_summary(verification)


def test_static_and_zero_free_reshapes_are_left_alone():
    @mb.program(input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((SYMBOL, 3))], opset_version=ct.target.iOS17)
    def prog(a, b):
        return mb.reshape(x=a, shape=[0, 3]), mb.reshape(x=b, shape=[-1, 3, 1])

    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before

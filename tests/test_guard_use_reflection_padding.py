"""webnn::guard_use_reflection_padding: a reflection-padding concat whose slice another op reads
gets its own copy, and common::use_reflection_padding no longer raises."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing.equivalence import apply_pass

PASS = "webnn::guard_use_reflection_padding"
X = {"x": np.arange(8, dtype=np.float32).reshape(1, 2, 4)}


def padded(*, shared=True):
    """docs/reproducers/use_reflection_padding_shared_slice_raises.py's program."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        left = mb.slice_by_index(x=x, begin=[0, 0, 1], end=[1, 2, 2], name="left")
        right = mb.slice_by_index(x=x, begin=[0, 0, 2], end=[1, 2, 3], name="right")
        joined = mb.concat(values=(left, x, right), axis=2, name="joined")
        return (joined, mb.relu(x=left, name="other")) if shared else joined

    return prog


def test_the_pass_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="active output"):
        apply_pass(padded(), "common::use_reflection_padding")


def test_the_concat_reads_a_copy_and_the_pass_then_pads():
    after = check_pass(padded, PASS, inputs=X)
    assert op_counts(after)["slice_by_index"] == 3
    apply_pass(after, "common::use_reflection_padding")
    apply_pass(after, "common::dead_code_elimination")
    assert op_counts(after)["pad"] == 1
    assert_equivalent(padded(), after, X)


def test_unshared_slices_are_left_to_the_pass():
    prog = padded(shared=False)
    before = str(prog)
    apply_pass(prog, PASS)
    assert str(prog) == before

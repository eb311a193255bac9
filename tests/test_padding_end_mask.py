"""webnn::guard_use_reflection_padding on coremltools 8.x, whose use_reflection_padding raises on a
slice without end_mask: the guard writes the mask 9.0 infers."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from mil_passes.guards.copies import INFERS_END_MASK, _written_end_mask
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.runner import run_pass

PASS = "webnn::guard_use_reflection_padding"
X = {"x": np.arange(8, dtype=np.float32).reshape(1, 2, 4)}


def padded(*, shared=True, end_mask=True):
    """docs/reproducers/use_reflection_padding_shared_slice_raises.py's program (there without
    ``end_mask``; with ``end_mask``, the mask torch's converter writes: the same slices)."""
    masks = {"end_mask": [True, True, False]} if end_mask else {}

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        left = mb.slice_by_index(x=x, begin=[0, 0, 1], end=[1, 2, 2], name="left", **masks)
        right = mb.slice_by_index(x=x, begin=[0, 0, 2], end=[1, 2, 3], name="right", **masks)
        joined = mb.concat(values=(left, x, right), axis=2, name="joined")
        return (joined, mb.relu(x=left, name="other")) if shared else joined

    return prog


@pytest.mark.skipif(INFERS_END_MASK, reason="coremltools 9.0's pass infers a missing end_mask")
def test_coremltools_8_raises_on_a_slice_without_end_mask_the_guard_writes_it():
    with pytest.raises(KeyError, match="end_mask"):
        run_pass(padded(shared=False, end_mask=False), "common::use_reflection_padding")
    after = check_pass(lambda: padded(shared=False, end_mask=False), PASS, inputs=X)
    run_pass(after, "common::use_reflection_padding")
    run_pass(after, "common::dead_code_elimination")
    assert op_counts(after)["pad"] == 1
    assert_equivalent(padded(shared=False, end_mask=False), after, X)


def test_a_written_end_mask_is_set_only_where_the_slice_ends_at_the_end():
    prog = padded(shared=False, end_mask=False)
    (left,) = [op for op in prog.functions["main"].operations if op.name == "left"]
    assert _written_end_mask(left).tolist() == [True, True, False]  # end [1, 2, 2] of a (1, 2, 4) x

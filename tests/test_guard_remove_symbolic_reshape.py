"""webnn::guard_remove_symbolic_reshape: a reshape whose symbolic shape is also an output gets
the constant shape common::remove_symbolic_reshape would give it, which then does not raise."""

from __future__ import annotations

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes.testing import check_pass, op_counts
from mil_passes.testing import run_pass

PASS = "webnn::guard_remove_symbolic_reshape"
FP32 = types.fp32


def reshape_by_own_shape(*, shape_is_output=True, symbols=1):
    """``reshape(relu(x), gather(shape(relu(x)), ...))``, the gathered shape also returned (the
    fuzzer's 4-op program in docs/reproducers/remove_symbolic_reshape_output.py)."""
    dims = [get_new_symbol() for _ in range(symbols)]

    @mb.program(input_specs=[mb.TensorSpec(tuple(dims), dtype=FP32)], opset_version=ct.target.iOS17)
    def prog(x):
        r = mb.relu(x=x, name="r")
        size = mb.gather(x=mb.shape(x=r, name="r_shape"), indices=list(range(symbols)), axis=0, name="size")
        y = mb.reshape(x=r, shape=size, name="y")
        return (y, size) if shape_is_output else y

    return prog


def test_the_shape_output_stays_and_the_reshape_reads_constants():
    feeds = {"x": np.array([-1.0, 0.5, 2.0], dtype=np.float32)}
    after = check_pass(reshape_by_own_shape, PASS, inputs=feeds, sizes=3)
    reshape = next(op for op in after.functions["main"].operations if op.op_type == "reshape")
    assert reshape.shape.val.tolist() == [-1]
    assert [out.name for out in after.functions["main"].outputs] == ["y", "size"]
    run_pass(after, "common::remove_symbolic_reshape")  # raised before the guard


def test_remove_symbolic_reshape_raises_without_the_guard():
    """The bug the guard answers (if coremltools fixes it, the guard may go)."""
    with pytest.raises(ValueError, match="that's block .*'s output"):
        run_pass(reshape_by_own_shape(), "common::remove_symbolic_reshape")


@pytest.mark.parametrize(
    "kwargs", [{"shape_is_output": False}, {"symbols": 2}], ids=["shape-not-an-output", "two-symbols"]
)
def test_reshapes_remove_symbolic_reshape_handles_are_left_to_it(kwargs):
    prog = reshape_by_own_shape(**kwargs)
    before = str(prog)
    run_pass(prog, PASS)
    assert str(prog) == before
    run_pass(prog, "common::remove_symbolic_reshape")  # folds or skips, without raising
    assert op_counts(prog)["reshape"] == 1

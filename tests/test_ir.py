"""mil_passes.ir: what an op reads."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil import Builder as mb

from mil_passes.ir import input_vars


def test_input_vars_flattens_lists_and_keeps_every_input_var():
    @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((2,))])
    def prog(x, y):
        return mb.concat(values=(x, y, x), axis=0, name="joined")

    (joined,) = [op for op in prog.functions["main"].operations if op.op_type == "concat"]
    names = [var.name for var in input_vars(joined)]
    assert names[:3] == ["x", "y", "x"] and len(names) == 5  # the values, then axis and interleave
    assert all(var.op is not None and var.op.op_type == "const" for var in input_vars(joined)[3:])
    assert np.asarray(input_vars(joined)[3].val) == 0

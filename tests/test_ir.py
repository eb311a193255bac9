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


def test_iter_proto_ops_visits_nested_blocks_of_a_saved_program():
    import coremltools as ct

    from mil_passes.ir import iter_proto_ops
    from coremltools.converters.mil.backend.mil.load import load as export_program

    @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((1,))], opset_version=ct.target.iOS17)
    def prog(x, flag):
        def double():
            return mb.mul(x=x, y=np.float32(2.0), name="doubled")

        def same():
            return mb.identity(x=x, name="kept")

        return mb.cond(
            pred=mb.squeeze(x=mb.greater(x=flag, y=np.float32(0.0))), _true_fn=double, _false_fn=same, name="picked"
        )

    spec = export_program(prog, weights_dir="", specification_version=ct.target.iOS17)
    types_seen = [op.type for op in iter_proto_ops(spec)]
    assert "cond" in types_seen and "mul" in types_seen and "identity" in types_seen

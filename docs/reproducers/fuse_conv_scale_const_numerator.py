"""common::fuse_conv_scale folds ``real_div(const, conv)`` as if it were ``real_div(conv, const)``.

Found by reading the pass while planting its pattern for mil-passes' fuzzer
(python -m mil_passes.testing.fuzz --pass common::fuse_conv_scale). The pass takes the const of
a ``mul``/``real_div`` that follows a ``conv`` as the scale, and for ``real_div`` uses
``1 / const``, without checking which input the const is: ``2 / conv(x)`` becomes
``conv(x) * 0.5``. With a 1x1 identity conv, x = [1, 4] gives [2, 0.5] before the pass and
[0.5, 2] after. The values are computed here by numpy (the conv is a copy; Core ML is not
needed). Needs only coremltools and numpy. Exit status: 1 while the bug is present, 0 once it
is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

X = np.array([[[1.0, 4.0]]], np.float32)


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 1, 2))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=np.ones((1, 1, 1), np.float32))  # a 1x1 conv of weight 1: a copy
        return mb.real_div(x=np.float32(2.0), y=y, name="out")  # 2 / y

    return prog


def run(prog):
    """The output on X: a 1x1, single-channel conv is ``w * x + b``; ``real_div`` is ``x / y``."""
    values = {"x": X}
    for op in prog.functions["main"].operations:
        if op.op_type == "const":
            continue
        if op.op_type == "conv":
            bias = 0.0 if op.bias is None else float(op.bias.val[0])
            result = float(op.weight.val.reshape(-1)[0]) * values[op.x.name] + bias
        elif op.op_type == "real_div":
            def value(var):
                return var.val if var.val is not None else values[var.name]

            result = value(op.x) / value(op.y)
        else:
            raise NotImplementedError(op.op_type)
        values[op.outputs[0].name] = np.asarray(result, np.float32)
    return values[prog.functions["main"].outputs[0].name]


def main():
    prog = program()
    before = run(prog)
    PASS_REGISTRY["common::fuse_conv_scale"](prog)
    after = run(prog)
    print(f"before the pass: {before.reshape(-1).tolist()}; after: {after.reshape(-1).tolist()}")
    if not np.allclose(before, after):
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

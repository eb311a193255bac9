"""common::fuse_matmul_weight_bias turns ``b - matmul(x, W)`` into ``matmul(x, W) - b``.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::fuse_matmul_weight_bias), written by hand from its shrunk program. For a ``sub`` after
a ``matmul`` by a const weight the pass negates the bias and keeps the weight, which is right
for ``matmul - b`` only; when the const is the first operand (``b - matmul``) the weight must be
negated too. Every output changes sign (and the bias with it). The values are computed here by
numpy from the op formulas (``linear``: ``x @ weight.T + bias``; Core ML is not needed). Needs
only coremltools and numpy. Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]], np.float32)
W = np.array([[0.5, -1.0], [2.0, 0.25], [-0.5, 1.0]], np.float32)  # [3, 2]
B = np.array([10.0, -10.0], np.float32)


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.sub(x=B, y=mb.matmul(x=x, y=W), name="out")  # b - x @ W

    return prog


def run(prog):
    """The output on X, op by op, from the op formulas."""
    values = {"x": X}

    def value(var):
        return values[var.name] if var.val is None else var.val

    for op in prog.functions["main"].operations:
        if op.op_type == "const":
            continue
        if op.op_type == "matmul":
            result = value(op.x) @ value(op.y)
        elif op.op_type == "sub":
            result = value(op.x) - value(op.y)
        elif op.op_type == "linear":
            result = value(op.x) @ value(op.weight).T + value(op.bias)
        elif op.op_type == "transpose":
            result = np.transpose(value(op.x), op.perm.val)
        else:
            raise NotImplementedError(op.op_type)
        values[op.outputs[0].name] = result
    return values[prog.functions["main"].outputs[0].name]


def main():
    prog = program()
    before = run(prog)
    PASS_REGISTRY["common::fuse_matmul_weight_bias"](prog)
    after = run(prog)
    print(f"before the pass: {before.tolist()}\nafter:           {after.tolist()}")
    if not np.allclose(before, after):
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

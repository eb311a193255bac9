"""common::int_op_canonicalization drops a requantization: ``quantize(reshape(dequantize(q)))`` with
another scale becomes ``reshape(q)``.

Found by reading the pass while planting its pattern for mil-passes' fuzzer
(python -m mil_passes.testing.fuzz --pass common::int_op_canonicalization). The pass matches
``dequantize -> reshape -> quantize`` and replaces it with a ``reshape`` of the quantized input,
without checking that the ``quantize`` has the ``dequantize``'s scale, zero point and dtype.
Here the int8 values quantized at scale 0.5 are requantized at 0.25 (each doubles: [4, 8, -12,
2]); after the pass they come out as they went in ([2, 4, -6, 1]). The values are computed here
by numpy from the op formulas (``quantize``: ``clip(round(x / scale) + zero_point)``,
``dequantize``: ``(q - zero_point) * scale``; Core ML is not needed). Needs only coremltools and
numpy. Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

X = np.array([[1.0, 2.0], [-3.0, 0.5]], np.float32)


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((2, 2))], opset_version=ct.target.iOS17)
    def prog(x):
        q = mb.quantize(input=x, scale=np.float32(0.5), output_dtype="int8")
        real = mb.dequantize(input=q, scale=np.float32(0.5))
        flat = mb.reshape(x=real, shape=[4])
        return mb.quantize(input=flat, scale=np.float32(0.25), output_dtype="int8", name="out")

    return prog


def quantize(x, scale):
    return np.clip(np.round(x / scale), -128, 127).astype(np.int8)


def run(prog):
    """The program's output on X, op by op, for the ops this program can hold."""
    values = {"x": X}
    for op in prog.functions["main"].operations:
        if op.op_type == "const":
            continue
        source = values[(op.inputs.get("input") or op.inputs.get("x")).name]
        if op.op_type == "quantize":
            result = quantize(source, op.scale.val)
        elif op.op_type == "dequantize":
            result = source.astype(np.float32) * op.scale.val
        elif op.op_type == "reshape":
            result = source.reshape(op.shape.val)
        else:
            raise NotImplementedError(op.op_type)
        values[op.outputs[0].name] = result
    return values[prog.functions["main"].outputs[0].name]


def main():
    prog = program()
    before = run(prog)
    PASS_REGISTRY["common::int_op_canonicalization"](prog)
    after = run(prog)
    print(f"before the pass: {before.tolist()}; after: {after.tolist()}")
    if not np.array_equal(before, after):
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""common::fuse_layernorm_or_instancenorm fuses a variance taken over other axes than the mean.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::fuse_layernorm_or_instancenorm, a look-alike its plant writes), written by hand from the
shrunk program. In its pattern 1 the pass checks the axes of the first ``reduce_mean`` (the
mean) but not those of the second (the variance): a variance over the last axis only, with the
mean over the last two, becomes ``layer_norm(axes=[-2, -1])``, which normalizes by the variance
over both. The values are computed here by numpy from the op formulas (Core ML is not needed).
Needs only coremltools and numpy. Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

X = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32) * 3


@mb.program(input_specs=[mb.TensorSpec((2, 3, 4))], opset_version=ct.target.iOS17)
def prog(x):
    mean = mb.reduce_mean(x=x, axes=[-2, -1], keep_dims=True)
    centred = mb.sub(x=x, y=mean)
    variance = mb.reduce_mean(x=mb.square(x=centred), axes=[-1], keep_dims=True)  # not the mean's axes
    scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=np.float32(1e-5))), y=np.ones((3, 4), np.float32))
    shift = mb.sub(x=np.zeros((3, 4), np.float32), y=mb.mul(x=mean, y=scale))
    return mb.add(x=mb.mul(x=x, y=scale), y=shift)


def run(program):
    """The output on X, op by op (the op formulas of the MIL spec, in float64)."""
    values = {"x": X.astype(np.float64)}

    def value(var):
        return values[var.name] if var.val is None else np.asarray(var.val, np.float64)

    for op in program.functions["main"].operations:
        if op.op_type == "const":
            continue
        kind = op.op_type
        if kind == "reduce_mean":
            result = value(op.x).mean(axis=tuple(op.axes.val), keepdims=True)
        elif kind in ("sub", "add", "mul"):
            result = {"sub": np.subtract, "add": np.add, "mul": np.multiply}[kind](value(op.x), value(op.y))
        elif kind == "square":
            result = value(op.x) ** 2
        elif kind == "rsqrt":
            result = 1 / np.sqrt(value(op.x) + op.epsilon.val)
        elif kind == "layer_norm":
            axes = tuple(op.axes.val)
            x = value(op.x)
            centred = x - x.mean(axis=axes, keepdims=True)
            normed = centred / np.sqrt((centred**2).mean(axis=axes, keepdims=True) + op.epsilon.val)
            result = normed * value(op.gamma) + value(op.beta)
        else:
            raise NotImplementedError(kind)
        values[op.outputs[0].name] = result
    return values[program.functions["main"].outputs[0].name]


def main():
    before = run(prog)
    PASS_REGISTRY["common::fuse_layernorm_or_instancenorm"](prog)
    after = run(prog)
    print(f"ops after the pass: {[op.op_type for op in prog.functions['main'].operations if op.op_type != 'const']}")
    print(f"largest change of the output: {np.abs(before - after).max():.3g}")
    if not np.allclose(before, after, rtol=1e-4, atol=1e-5):
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""common::fuse_layernorm_or_instancenorm raises when an op inside the pattern has another reader.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::fuse_layernorm_or_instancenorm), written by hand from its shrunk program. The pass
matches its pattern 1 (``x * scale + (beta - mean * scale)``) and removes every op of it
without checking that the ops other than the last have no other reader; here a ``relu`` also
reads ``beta - mean * scale`` and ``Block.remove_ops`` raises ``ValueError: Cannot delete op
... with active output``. Needs only coremltools and numpy. Exit status: 1 while the bug is
present, 0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


@mb.program(input_specs=[mb.TensorSpec((2, 4))], opset_version=ct.target.iOS17)
def prog(x):
    mean = mb.reduce_mean(x=x, axes=[-1], keep_dims=True)
    centred = mb.sub(x=x, y=mean)
    variance = mb.reduce_mean(x=mb.square(x=centred), axes=[-1], keep_dims=True)
    scale = mb.mul(x=mb.rsqrt(x=mb.add(x=variance, y=1e-5)), y=np.ones(4, np.float32))
    shift = mb.sub(x=np.zeros(4, np.float32), y=mb.mul(x=mean, y=scale))
    y = mb.add(x=mb.mul(x=x, y=scale), y=shift)
    return y, mb.relu(x=shift)  # the shift has a second reader


def main():
    try:
        PASS_REGISTRY["common::fuse_layernorm_or_instancenorm"](prog)
    except ValueError as error:
        print(f"common::fuse_layernorm_or_instancenorm raises ValueError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""common::fuse_elementwise_to_batchnorm raises on an fp16 ``mul``/``add`` by per-channel consts.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pipeline default), written by
hand from its shrunk program. The pass turns ``x * c + d`` (rank 4, consts of shape
``(1, C, 1, 1)``) into ``batch_norm`` with ``gamma = c`` and ``beta = d`` in the program's dtype
but ``mean = 0`` and ``variance = 1`` in fp32; for an fp16 program ``batch_norm``'s type check
refuses the mix and the pass raises ``ValueError``. Any fp16 program (a package converted at
fp16 and optimized again, as ``mil-passes optimize`` does) with this pattern cannot go through
DEFAULT. Needs only coremltools and numpy. Exit status: 1 while the bug is present, 0 once it
is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 3, 3), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        scaled = mb.mul(x=x, y=np.array([2.0, 3.0], np.float16).reshape(1, 2, 1, 1), name="out")
        return mb.add(x=scaled, y=np.array([1.0, -1.0], np.float16).reshape(1, 2, 1, 1), name="out")

    return prog


def main():
    prog = program()
    try:
        PASS_REGISTRY["common::fuse_elementwise_to_batchnorm"](prog)
    except ValueError as error:
        print(f"common::fuse_elementwise_to_batchnorm raises ValueError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

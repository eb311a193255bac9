"""common::fuse_conv_bias raises IndexError on conv -> transpose -> add of a bias of lower rank.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass common::fuse_conv_bias),
written by hand from its shrunk program. The pass's second pattern (conv, transpose, add of a
const) reads ``bias.shape[cout_dim]`` with ``cout_dim`` counted from the end of the transpose's
rank; a bias of lower rank (here ``[2]`` against a rank-3 transpose whose channel axis is -2)
has no such axis. Needs only coremltools and numpy. Exit status: 1 while the bug is present,
0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 1, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.conv(x=x, weight=np.ones((2, 1, 1), np.float32))  # [1, 2, 3]
        t = mb.transpose(x=y, perm=[2, 1, 0])  # [3, 2, 1]: the channels at axis -2
        return mb.add(x=t, y=np.array([1.0, 2.0], np.float32), name="out")  # broadcasts along the last axis: [3, 2, 2]

    return prog


def main():
    prog = program()
    try:
        PASS_REGISTRY["common::fuse_conv_bias"](prog)
    except IndexError as error:
        print(f"common::fuse_conv_bias raises IndexError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""common::rank0_expand_dims_swap raises KeyError when a ``cond`` block reads the rank-0 result.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::rank0_expand_dims_swap), written by hand from its shrunk program. The pass moves
``expand_dims(axes=[0])`` ahead of a rank-0 ``sub``/``add``/``mul``/``real_div`` of a const and
rebuilds every other reader of the result in the block where the ``sub`` is; a reader inside a
nested block (here an ``identity`` in a ``cond`` branch) is not in that block and removing it
there raises ``KeyError``. Needs only coremltools and numpy. Exit status: 1 while the bug is
present, 0 once it is fixed.
"""

import sys

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=ct.target.iOS17)
    def prog(x):
        total = mb.reduce_sum(x=x, axes=[0], keep_dims=False)
        difference = mb.sub(x=np.float32(1.0), y=total)  # rank 0, one const input
        wide = mb.expand_dims(x=difference, axes=[0], name="wide")
        chosen = mb.cond(
            pred=mb.greater(x=total, y=np.float32(0.0)),
            _true_fn=lambda: mb.identity(x=difference),  # a reader in a nested block
            _false_fn=lambda: mb.identity(x=total),
            name="chosen",
        )
        return wide, chosen

    return prog


def main():
    prog = program()
    try:
        PASS_REGISTRY["common::rank0_expand_dims_swap"](prog)
    except KeyError as error:
        print(f"common::rank0_expand_dims_swap raises KeyError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

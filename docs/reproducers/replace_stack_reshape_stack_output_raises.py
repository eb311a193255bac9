"""common::replace_stack_reshape raises when the ``stack`` is also an output of the function.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::replace_stack_reshape), written by hand from its message. The pass turns
``reshape(stack((a, b), axis=1))`` into ``concat`` and deletes the ``stack`` without checking
that the block returns it: ``ValueError: cannot delete op ... that's block ...'s output``.
Needs only coremltools and numpy. Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 5, 3)), mb.TensorSpec((1, 5, 3))], opset_version=ct.target.iOS17)
    def prog(a, b):
        stacked = mb.stack(values=(a, b), axis=1, name="stacked")  # [1, 2, 5, 3]
        return mb.reshape(x=stacked, shape=[1, 10, 3], name="out"), stacked  # the stack is an output too

    return prog


def main():
    prog = program()
    try:
        PASS_REGISTRY["common::replace_stack_reshape"](prog)
    except ValueError as error:
        print(f"common::replace_stack_reshape raises ValueError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

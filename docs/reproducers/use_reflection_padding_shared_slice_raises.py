"""common::use_reflection_padding raises when one of the reflected slices has another reader.

Found by mil-passes' fuzzer (python -m mil_passes.testing.fuzz --pass
common::use_reflection_padding), written by hand from its shrunk program. The pass turns
``concat(x[..., 1:2], x, x[..., -2:-1])`` into ``pad(x, mode="reflect")`` and removes the two
slices without checking their other uses; a ``relu`` that also reads the left slice makes
``Block.remove_ops`` raise ``ValueError: Cannot delete op ... with active output``. Needs only
coremltools and numpy. Exit status: 1 while the bug is present, 0 once it is fixed.
"""

import sys

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY


def program():
    """The program that shows the bug (a new one per call)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 2, 4))], opset_version=ct.target.iOS17)
    def prog(x):
        left = mb.slice_by_index(x=x, begin=[0, 0, 1], end=[1, 2, 2])
        right = mb.slice_by_index(x=x, begin=[0, 0, 2], end=[1, 2, 3])
        return mb.concat(values=(left, x, right), axis=2, name="padded"), mb.relu(x=left, name="other")  # the left slice has a second reader

    return prog


def main():
    prog = program()
    try:
        PASS_REGISTRY["common::use_reflection_padding"](prog)
    except ValueError as error:
        print(f"common::use_reflection_padding raises ValueError: {error}")
        print("bug present")
        return 1
    print("fixed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Arrays whose bytes cannot change in place, and freezing the consts of a program no one else holds.

What the interpreter works out from a weight once (is it finite, its widening) holds for as long
as the weight's bytes do. An array that is read-only and owns its memory (or sits on read-only
arrays down to an immutable ``bytes`` object) cannot be written without first making it
writeable again, which :func:`is_frozen` sees on the next call; such facts are then remembered
without the snapshot or sample a writeable array needs. Decoded compressed weights
(:mod:`.decoded`) are frozen, and so are the consts of a program ``predict`` loads from a package
(:func:`freeze_consts`), which only the interpreter holds.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Program

from ..ir import iter_ops


def is_frozen(array: np.ndarray) -> bool:
    """Whether ``array``'s bytes cannot change in place (read-only down to memory it owns or an
    immutable ``bytes`` object)."""
    base: object = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return base is None or isinstance(base, bytes)


def freeze_consts(prog: Program) -> None:
    """Make every const array of ``prog`` read-only (for a program only the interpreter holds)."""
    for op in iter_ops(prog):
        if op.op_type == "const":
            value = op.outputs[0].val
            if isinstance(value, np.ndarray) and value.base is None:
                value.flags.writeable = False

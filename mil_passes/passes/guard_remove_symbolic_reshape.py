"""webnn::guard_remove_symbolic_reshape — a reshape whose shape is also an output, folded safely.

``common::remove_symbolic_reshape`` replaces a reshape's symbolic shape (``[s0, 2, 2]``, known up
to one symbol) by constants (``[-1, 2, 2]``) and deletes the op that made the shape. When that
shape is also an output of its block, the delete raises ``ValueError: cannot delete op … that's
block block0's output`` (docs/coremltools-passes.md): the pass checks that the reshape is the
shape's only reader, not that no block returns it. This pass, right before every
``common::remove_symbolic_reshape`` of ``mil_passes.pipeline()``, does that pass's rewrite for
exactly these reshapes and keeps the shape for the output.

Given::

    %n: (1, int32)^ = gather(x=shape(%r), indices=[0])      # %r: (s0, fp32); also an output
    %y: (s0, fp32) = reshape(x=%r, shape=%n)
    } -> (%y, %n)

Result (what remove_symbolic_reshape makes of the reshape; ``%n`` stays for the output)::

    %n: (1, int32)^ = gather(x=shape(%r), indices=[0])
    %y_shape: (1, int32)* = const(val=[-1])
    %y: (-1, fp32) = reshape(x=%r, shape=%y_shape)
    } -> (%y, %n)

Rules (those of remove_symbolic_reshape, plus the output): the shape's value is known up to
symbols and not fully, the reshape is its only reader, a block returns it, the output shape has
at most one symbol (more, and the pass leaves the reshape alone) and no variadic rank.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic, num_symbolic

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "symbolic-reshape-shape-output"


class ReshapeOfReturnedShape(RewritePattern[list[int]]):
    """A reshape whose symbolic shape a block returns → a reshape of the constant shape."""

    op_types = ("reshape",)
    rule = RULE

    def match(self, op: Operation) -> list[int] | None:
        shape = op.shape
        if shape.val is not None or shape.sym_val is None or len(shape.child_ops) > 1:
            return None  # remove_symbolic_reshape leaves it alone
        if not shape.consuming_blocks:
            return None  # remove_symbolic_reshape folds it safely
        out_shape = op.outputs[0].shape
        if any_variadic(out_shape) or num_symbolic(out_shape) > 1:
            return None  # the pass raises its own error, or skips the reshape
        return [-1 if is_symbolic(dim) else int(dim) for dim in out_shape]

    def describe(self, op: Operation, match: list[int]) -> str:
        return (
            f"reshape '{op.name}': its shape '{op.shape.name}' is also a block output, so the reshape "
            f"reads the constant {match} instead (common::remove_symbolic_reshape would raise)"
        )

    def rewrite(self, op: Operation, match: list[int], rewriter: Rewriter) -> None:
        out = op.outputs[0]
        shape = rewriter.emit(op, "const", f"{out.name}_shape", val=match)
        rewriter.replace(out, rewriter.emit(op, "reshape", out.name, x=op.x, shape=shape))


@register("guard_remove_symbolic_reshape")
class GuardRemoveSymbolicReshape(PatternPass):
    """Fold each symbolic reshape shape that a block also returns, which ``common::remove_symbolic_reshape`` cannot."""

    name = "webnn::guard_remove_symbolic_reshape"

    def patterns(self) -> list[RewritePattern]:
        return [ReshapeOfReturnedShape()]

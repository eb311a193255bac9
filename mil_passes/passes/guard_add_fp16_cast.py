"""webnn::guard_add_fp16_cast — a reshape by a const ``0`` target reads it as run-time sizes again.

coremltools 9.0 types ``reshape(x[B, S, 32, 1], [0, 0, 4, 8])`` literally as ``[0, 0, 4, 8]`` when
x has a run-time dim (its type inference copies no dim for a ``0``; docs/evidence.md §3).
``webnn::fold_shape_ops`` writes such targets and gives each reshape it makes its true type, but
``common::add_fp16_cast`` re-creates every op that reads fp32, and the re-created reshape gets
coremltools' type, zeros and all: between that pass and the package's next ``fold_shape_ops``
the program declares a type that does not describe the tensor (what ``ct.convert`` would save,
and what ``mil-passes verify`` reports as add_fp16_cast's). This pass, right before
``common::add_fp16_cast`` in ``mil_passes.pipeline()``, gives each such reshape its target as
run-time sizes again (a ``gather`` of ``shape(x)`` for the copied dims, joined with the const
ones), which coremltools types from their symbols; the ``fold_shape_ops`` right after
add_fp16_cast folds the target back.

Given (iOS17: a ``0`` copies x's dim at the same place counted from the right)::

    %y: (B, S, 4, 8, fp32) = reshape(x=%x, shape=[0, 0, 4, 8])           # x: (B, S, 32, 1)

Result::

    %x_shape: (4, int32) = shape(x=%x)
    %copied: (2, int32) = gather(x=%x_shape, indices=[0, 1], axis=0)
    %target: (4, int32) = concat(values=(%copied, [4, 8]), axis=0)
    %y: (B, S, 4, 8, fp32) = reshape(x=%x, shape=%target)

Matched: a ``reshape`` of an fp32 x with a run-time dim whose const target holds a ``0``.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..rewriter import PatternPass, Rewriter, RewritePattern
from ..semantics import reshape_zeros
from . import register

RULE = "zero-target-before-fp16"


class _Copied(int):
    """An index of x's shape that a ``0`` copies (kept apart from the target's own numbers)."""


def _pieces(op: Operation) -> list[tuple[bool, list[int]]]:
    """The target as runs of (copied from shape(x)?, the indices or the sizes)."""
    rank = len(op.x.shape)
    resolved = reshape_zeros(op.opset_version, [_Copied(i) for i in range(rank)], [int(t) for t in op.shape.val])
    pieces: list[tuple[bool, list[int]]] = []
    for element in resolved:
        copied = isinstance(element, _Copied)
        if pieces and pieces[-1][0] == copied:
            pieces[-1][1].append(int(element))
        else:
            pieces.append((copied, [int(element)]))
    return pieces


class ZeroTargetBeforeFp16(RewritePattern[list[tuple[bool, list[int]]]]):
    """``reshape(x, [.., 0, ..])`` of an fp32 x with run-time dims → the target from ``shape(x)``."""

    op_types = ("reshape",)
    rule = RULE

    def match(self, op: Operation) -> list[tuple[bool, list[int]]] | None:
        target = op.shape.val
        if target is None or op.x.dtype != types.fp32 or not any_symbolic(op.x.shape):
            return None
        if not np.any(np.asarray(target) == 0):
            return None
        try:
            pieces = _pieces(op)
        except ValueError:  # before iOS17 a 0 needs the target to have x's rank: not valid anyway
            return None
        return pieces if any(copied for copied, _ in pieces) else None

    def describe(self, op: Operation, match: list[tuple[bool, list[int]]]) -> str:
        return f"reshape '{op.name}': its 0s become x's run-time sizes, which add_fp16_cast's copy types right"

    def rewrite(self, op: Operation, match: list[tuple[bool, list[int]]], rewriter: Rewriter) -> None:
        out = op.outputs[0]
        dims = rewriter.emit(op, "shape", f"{out.name}_x_shape", x=op.x)
        parts = []
        for copied, numbers in match:
            values = np.array(numbers, np.int32)
            if copied:
                parts.append(rewriter.emit(op, "gather", f"{out.name}_copied", x=dims, indices=values, axis=0))
            else:
                parts.append(rewriter.emit(op, "const", f"{out.name}_sizes", val=values))
        target = parts[0]
        if len(parts) > 1:
            target = rewriter.emit(op, "concat", f"{out.name}_target", values=tuple(parts), axis=0)
        rewriter.replace(out, rewriter.emit(op, "reshape", out.name, x=op.x, shape=target))


@register("guard_add_fp16_cast")
class GuardAddFp16Cast(PatternPass):
    """Give each reshape by a const 0 target of an fp32 x with run-time dims its target as sizes."""

    name = "webnn::guard_add_fp16_cast"

    def patterns(self) -> list[RewritePattern]:
        return [ZeroTargetBeforeFp16()]

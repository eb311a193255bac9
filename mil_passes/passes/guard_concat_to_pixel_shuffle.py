"""webnn::guard_concat_to_pixel_shuffle — the pixel-shuffle concats get inner concats of their own.

``common::concat_to_pixel_shuffle`` turns ``concat(axis=3, interleave)`` of two
``concat(axis=2, interleave)`` of rank-4 tensors into ``concat(axis=1)`` and ``pixel_shuffle``,
and deletes the inner concats without checking that nothing else reads them: when one has another
reader (or a block returns it) it raises ``ValueError: Cannot delete op ... with active output``
(docs/coremltools-passes.md). This pass, right before ``common::concat_to_pixel_shuffle`` in
``mil_passes.pipeline()``, gives such an outer concat copies of its shared inner concats; the
other readers keep the originals. (If the pass
then does not fire, DEFAULT's ``remove_redundant_ops`` merges the copies back.)

Given::

    %h0: (1, 1, 2, 1, fp32) = concat(values=(%a, %b), axis=2, interleave=True)
    %h1: (1, 1, 2, 1, fp32) = concat(values=(%c, %d), axis=2, interleave=True)
    %w: (1, 1, 2, 2, fp32) = concat(values=(%h0, %h1), axis=3, interleave=True)
    %s: (4, int32) = shape(x=%h1)

Result::

    %h1_copy: (1, 1, 2, 1, fp32) = concat(values=(%c, %d), axis=2, interleave=True)
    %w: (1, 1, 2, 2, fp32) = concat(values=(%h0, %h1_copy), axis=3, interleave=True)
    %s: (4, int32) = shape(x=%h1)          # %h1 stays for it

Matched as the pass matches: an interleaving ``concat`` along axis 3 of two rank-4 values, each an
interleaving ``concat`` of two values along axis 2.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "shared-pixel-shuffle-concat"


def _interleaves(op: Operation | None, axis: int) -> bool:
    return (
        op is not None
        and op.op_type == "concat"
        and len(op.values) == 2
        and op.axis.val == axis
        and op.interleave is not None
        and bool(op.interleave.val)
    )


def _is_shared(var: Var, outer: Operation) -> bool:
    return bool(var.consuming_blocks) or any(reader is not outer for reader in var.child_ops)


class SharedPixelShuffleConcats(RewritePattern[list[int]]):
    """The pass's nested concats, an inner one read elsewhere too → the outer concat of copies."""

    op_types = ("concat",)
    rule = RULE

    def match(self, op: Operation) -> list[int] | None:
        if not _interleaves(op, 3) or op.values[0].rank != 4:
            return None
        inner = list(op.values)
        if not all(_interleaves(v.op, 2) for v in inner):
            return None
        shared = [i for i, v in enumerate(inner) if _is_shared(v, op)]
        return shared or None

    def describe(self, op: Operation, match: list[int]) -> str:
        names = ", ".join(f"'{op.values[i].name}'" for i in match)
        return f"concat '{op.name}' reads concats {names} that are read elsewhere too: it reads copies of them"

    def rewrite(self, op: Operation, match: list[int], rewriter: Rewriter) -> None:
        values = list(op.values)
        for index in match:
            original = values[index].op
            values[index] = rewriter.emit(op, "concat", f"{values[index].name}_copy", **dict(original.inputs))
        out = op.outputs[0]
        joined = rewriter.emit(op, "concat", out.name, values=tuple(values), axis=op.axis, interleave=op.interleave)
        rewriter.replace(out, joined)


@register("guard_concat_to_pixel_shuffle")
class GuardConcatToPixelShuffle(PatternPass):
    """Give each pixel-shuffle-shaped concat copies of the inner concats other ops read."""

    name = "webnn::guard_concat_to_pixel_shuffle"

    def patterns(self) -> list[RewritePattern]:
        return [SharedPixelShuffleConcats()]

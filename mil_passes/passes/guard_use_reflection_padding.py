"""webnn::guard_use_reflection_padding — a reflection-padding concat gets slices of its own.

``common::use_reflection_padding`` turns ``concat(x[..., 1:2], x, x[..., -2:-1])`` into a
reflection ``pad`` and deletes the slices, without checking that nothing else reads them: when a
slice has another reader it raises ``ValueError: Cannot delete op ... with active output``
(docs/coremltools-passes.md). This pass, right before every ``common::use_reflection_padding`` of
``mil_passes.pipeline()``, gives such a concat copies of its shared slices; the other readers
keep the originals. (If the pass then does not fire, DEFAULT's ``remove_redundant_ops`` merges the
copies back.)

Given::

    %left: (1, 2, 1, fp32) = slice_by_index(x=%x, begin=[0, 0, 1], end=[1, 2, 2])
    %right: (1, 2, 1, fp32) = slice_by_index(x=%x, begin=[0, 0, 2], end=[1, 2, 3])
    %padded: (1, 2, 6, fp32) = concat(values=(%left, %x, %right), axis=2)
    %other: (1, 2, 1, fp32) = relu(x=%left)

Result::

    %left_copy: (1, 2, 1, fp32) = slice_by_index(x=%x, begin=[0, 0, 1], end=[1, 2, 2])
    %padded: (1, 2, 6, fp32) = concat(values=(%left_copy, %x, %right), axis=2)
    %other: (1, 2, 1, fp32) = relu(x=%left)          # %left stays for it

Matched: a concat of an odd number (at least 3) of values whose middle value ``m`` is not a slice
and whose other values are all ``slice_by_index`` of ``m`` (the pass's own first test), one of
which another op or a block output also reads.

coremltools 8.x's pass also raises ``KeyError: 'end_mask'`` on a slice without an ``end_mask``
(9.0 infers it as ``end == dim`` per axis). There, a side slice without one is copied with that
``end_mask`` written out: a mask bit is set only where the slice already ends at the dim's end,
so the copy slices the same elements (a slice whose ``end`` is known only at run time, where 9.0
does not fire, is read through an ``identity``, which the pass does not match).
"""

from __future__ import annotations

import coremltools
import numpy as np
from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "shared-padding-slice"
#: Whether this coremltools' ``use_reflection_padding`` infers a missing ``end_mask`` (9.0 does).
INFERS_END_MASK = int(coremltools.__version__.split(".")[0]) >= 9


def _is_shared(var: Var, concat: Operation) -> bool:
    return bool(var.consuming_blocks) or any(reader is not concat for reader in var.child_ops)


def _lacks_end_mask(slice_op: Operation) -> bool:
    return not INFERS_END_MASK and slice_op.inputs.get("end_mask") is None


def _written_end_mask(slice_op: Operation) -> np.ndarray | None:
    """``end == dim`` per axis, as coremltools 9.0 infers it; None where ``end`` is not known."""
    end = slice_op.end.val
    if end is None:
        return None
    return np.array([int(e) == d if isinstance(d, (int, np.integer)) else False for e, d in zip(end, slice_op.x.shape)])


class SharedPaddingSlices(RewritePattern[list[int]]):
    """A reflection-padding-shaped concat reading shared slices → the concat of copies."""

    op_types = ("concat",)
    rule = RULE

    def match(self, op: Operation) -> list[int] | None:
        values = list(op.values)
        if len(values) < 3 or len(values) % 2 != 1:
            return None
        middle = values[len(values) // 2]
        sides = [(i, v) for i, v in enumerate(values) if i != len(values) // 2]
        if any(v.op is None or v.op.op_type != "slice_by_index" or v.op.x is not middle for _, v in sides):
            return None
        copied = [i for i, v in sides if _is_shared(v, op) or _lacks_end_mask(v.op)]
        return copied or None

    def describe(self, op: Operation, match: list[int]) -> str:
        names = ", ".join(f"'{op.values[i].name}'" for i in match)
        return f"concat '{op.name}' reads slices {names} that other ops read too (or without end_mask): it reads copies"

    def rewrite(self, op: Operation, match: list[int], rewriter: Rewriter) -> None:
        values = list(op.values)
        for index in match:
            original = values[index].op
            inputs = {name: var for name, var in original.inputs.items()}
            if _lacks_end_mask(original):
                end_mask = _written_end_mask(original)
                if end_mask is None:  # 9.0 does not fire here, 8.x raises: it reads the slice via an identity
                    values[index] = rewriter.emit(op, "identity", f"{values[index].name}_kept", x=values[index])
                    continue
                inputs["end_mask"] = end_mask
            values[index] = rewriter.emit(op, "slice_by_index", f"{values[index].name}_copy", **inputs)
        out = op.outputs[0]
        joined = rewriter.emit(op, "concat", out.name, values=tuple(values), axis=op.axis, interleave=op.interleave)
        rewriter.replace(out, joined)


@register("guard_use_reflection_padding")
class GuardUseReflectionPadding(PatternPass):
    """Give each reflection-padding concat copies of the slices that other ops also read."""

    name = "webnn::guard_use_reflection_padding"

    def patterns(self) -> list[RewritePattern]:
        return [SharedPaddingSlices()]

"""Guards of passes that delete the ops they fuse without checking that nothing else reads them
(``ValueError: Cannot delete op ... with active output``): the fused op gets copies of the shared
ones, the other readers keep the originals."""

from __future__ import annotations

import coremltools
import numpy as np
from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import Replacements, Rewriter
from .guard import Guard, GuardRule, copy_inputs, is_shared, rebuild

#: Whether this coremltools' ``use_reflection_padding`` infers a missing ``end_mask`` (9.0 does).
INFERS_END_MASK = int(coremltools.__version__.split(".")[0]) >= 9


def _lacks_end_mask(slice_op: Operation) -> bool:
    return not INFERS_END_MASK and slice_op.inputs.get("end_mask") is None


def shared_padding_slices(op: Operation) -> list[Var] | None:
    """``common::use_reflection_padding`` turns ``concat(x[..., 1:2], x, x[..., -2:-1])`` into a
    reflection ``pad`` and deletes the slices without checking that nothing else reads them. The
    guard gives such a concat (an odd number of values, the middle one ``m`` not a slice, the others
    ``slice_by_index`` of ``m``) copies of its shared slices.

    coremltools 8.x's pass also raises ``KeyError: 'end_mask'`` on a slice without ``end_mask``
    (9.0 infers it as ``end == dim``): there the guard copies such a slice with that mask written
    out, or reads it through an ``identity`` where ``end`` is a run-time value."""
    values = list(op.values)
    if len(values) < 3 or len(values) % 2 != 1:
        return None
    middle = values[len(values) // 2]
    sides = [v for i, v in enumerate(values) if i != len(values) // 2]
    if any(v.op is None or v.op.op_type != "slice_by_index" or v.op.x is not middle for v in sides):
        return None
    return [v for v in sides if is_shared(v, op) or _lacks_end_mask(v.op)] or None


def _written_end_mask(slice_op: Operation) -> np.ndarray | None:
    """``end == dim`` per axis, as coremltools 9.0 infers it; None where ``end`` is not known."""
    end = slice_op.end.val
    if end is None:
        return None
    return np.array([int(e) == d if isinstance(d, (int, np.integer)) else False for e, d in zip(end, slice_op.x.shape)])


def copy_padding_slices(op: Operation, shared: list[Var], rewriter: Rewriter) -> Replacements:
    """:func:`copy_inputs`, and on coremltools 8.x the missing ``end_mask`` written out."""
    if INFERS_END_MASK or not any(_lacks_end_mask(v.op) for v in shared):
        return copy_inputs(op, shared, rewriter)
    values = list(op.values)
    for index, var in enumerate(values):
        if var not in shared:
            continue
        inputs = dict(var.op.inputs)
        if _lacks_end_mask(var.op):
            end_mask = _written_end_mask(var.op)
            if end_mask is None:  # 9.0 does not fire here, 8.x raises: the slice is read via an identity
                values[index] = rewriter.add("identity", f"{var.name}_kept", x=var)
                continue
            inputs["end_mask"] = end_mask
        values[index] = rewriter.add("slice_by_index", f"{var.name}_copy", **inputs)
    return rebuild(op, rewriter, values=tuple(values))


def _interleaves(op: Operation | None, axis: int) -> bool:
    return (
        op is not None
        and op.op_type == "concat"
        and len(op.values) == 2
        and op.axis.val == axis
        and op.interleave is not None
        and bool(op.interleave.val)
    )


def shared_pixel_shuffle_concats(op: Operation) -> list[Var] | None:
    """``common::concat_to_pixel_shuffle`` turns an interleaving ``concat`` along axis 3 of two
    rank-4 interleaving ``concat``s along axis 2 into ``concat(axis=1)`` and ``pixel_shuffle``, and
    deletes the inner concats without checking that nothing else reads them. The guard gives the
    outer concat copies of its shared inner concats."""
    if not _interleaves(op, 3) or op.values[0].rank != 4 or not all(_interleaves(v.op, 2) for v in op.values):
        return None
    return [v for v in op.values if is_shared(v, op)] or None


def _reads_erf(var: Var) -> bool:
    add = var.op
    return (
        add is not None
        and add.op_type == "add"
        and any(v.op is not None and v.op.op_type == "erf" for v in (add.x, add.y))
    )


def _scaled_by_const(var: Var) -> bool:
    mul = var.op
    return mul is not None and mul.op_type == "mul" and any(v.val is not None and v.rank == 0 for v in (mul.x, mul.y))


def shared_gelu_half(op: Operation) -> list[Var] | None:
    """``common::fuse_gelu_exact`` turns ``(0.5 * x) * (1 + erf(x / sqrt(2)))`` (its third form, the
    ``mul(0.5, x)`` on a branch of its own) into one ``gelu`` and deletes the ``mul(0.5, x)`` without
    checking that nothing else reads it. The guard gives the final ``mul`` a copy of it."""
    for half, erf_side in ((op.x, op.y), (op.y, op.x)):
        if _reads_erf(erf_side) and _scaled_by_const(half) and is_shared(half, op):
            return [half]
    return None


def returned_stack_reshaped(op: Operation) -> list[Var] | None:
    """``common::replace_stack_reshape`` turns ``reshape(stack(values))`` into one ``concat`` and
    deletes the ``stack``, checking that the reshape is its one reader but not that no block
    returns it. The guard gives such a reshape a copy of the stack; the block returns the original."""
    stacked = op.x
    if stacked.op is None or stacked.op.op_type != "stack":
        return None
    return [stacked] if stacked.consuming_blocks and list(stacked.child_ops) == [op] else None


USE_REFLECTION_PADDING = Guard(
    "common::use_reflection_padding", (GuardRule(("concat",), shared_padding_slices, copy_padding_slices),)
)
CONCAT_TO_PIXEL_SHUFFLE = Guard(
    "common::concat_to_pixel_shuffle", (GuardRule(("concat",), shared_pixel_shuffle_concats, copy_inputs),)
)
FUSE_GELU_EXACT = Guard("common::fuse_gelu_exact", (GuardRule(("mul",), shared_gelu_half, copy_inputs),))
REPLACE_STACK_RESHAPE = Guard(
    "common::replace_stack_reshape", (GuardRule(("reshape",), returned_stack_reshaped, copy_inputs),)
)

"""Guards whose remedy is a rewrite of their own: the same values, in a form the protected pass
gets right."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..passes.canonicalize_uint8_select import CastToBoolAsNotEqual
from ..rewriter import Replacements, Rewriter
from ..semantics import reshape_zeros
from .guard import Guard, GuardRule, rebuild


def _width(dtype) -> int:
    return int(types.nptype_from_builtin(dtype)(0).itemsize)


def loses_nonzero(source, target) -> bool:
    """Can ``cast`` from dtype ``source`` to dtype ``target`` turn a nonzero value into zero?"""
    if types.is_bool(source) or types.is_bool(target):
        return False
    if types.is_float(source):
        return types.is_int(target) or _width(target) < _width(source)
    return types.is_int(target) and _width(target) < _width(source)


def lossy_step(var: Var) -> Operation | None:
    """The first cast, walking back from ``var`` through casts and identities, that can turn a
    nonzero into zero; None if there is none before a bool or a non-cast producer."""
    while not types.is_bool(var.dtype) and var.op is not None and var.op.op_type in ("cast", "identity"):
        producer = var.op
        if producer.op_type == "cast" and loses_nonzero(producer.x.dtype, var.dtype):
            return producer
        var = producer.x
    return None


_NOT_EQUAL = CastToBoolAsNotEqual()


def lossy_cast_chain_to_bool(op: Operation) -> Var | None:
    """``common::cast_optimization`` fuses ``cast(cast(x, A), bool)`` into ``cast(x, bool)``, yet the
    middle cast may turn a nonzero into zero: fp32 → int32 truncates 0.5 to 0 (False), the fused
    cast makes 0.5 True (``x.to(torch.int32).to(torch.bool)``, WebNN's uint8 conditions). The guard
    writes a cast to bool whose chain of casts (and identities) has such a step — float → integer,
    float → narrower float, integer → narrower integer — as ``not_equal(v, 0)``, which the pass does
    not fuse (``webnn::canonicalize_uint8_select`` does so for every cast to bool, but after the
    first cast_optimization). Chains the pass fuses exactly are left to it."""
    x = _NOT_EQUAL.match(op)
    return x if x is not None and lossy_step(x) is not None else None


class _Copied(int):
    """An index of x's shape that a ``0`` copies (kept apart from the target's own numbers)."""


def zero_target(op: Operation) -> list[tuple[bool, list[int]]] | None:
    """coremltools 9.0 types ``reshape(x[B, S, 32, 1], [0, 0, 4, 8])`` literally as ``[0, 0, 4, 8]``
    when x has a run-time dim. ``webnn::fold_shape_ops`` writes such targets with true types, but
    ``common::add_fp16_cast`` re-creates every op that reads fp32 with coremltools' type: until the
    next ``fold_shape_ops`` the program declares a type that does not describe the tensor. The
    guard writes the target of such a reshape as run-time sizes (a ``gather`` of ``shape(x)`` for
    the copied dims, joined with the const ones), which coremltools types from their symbols; the
    ``fold_shape_ops`` after add_fp16_cast folds it back. The match: the target as runs of
    (copied from shape(x)?, the indices or the sizes)."""
    target = op.shape.val
    if (
        target is None
        or op.x.dtype != types.fp32
        or not any_symbolic(op.x.shape)
        or not np.any(np.asarray(target) == 0)
    ):
        return None
    try:
        resolved = reshape_zeros(
            op.opset_version, [_Copied(i) for i in range(len(op.x.shape))], [int(t) for t in target]
        )
    except ValueError:  # before iOS17 a 0 needs the target to have x's rank: not valid anyway
        return None
    pieces: list[tuple[bool, list[int]]] = []
    for element in resolved:
        copied = isinstance(element, _Copied)
        if pieces and pieces[-1][0] == copied:
            pieces[-1][1].append(int(element))
        else:
            pieces.append((copied, [int(element)]))
    return pieces if any(copied for copied, _ in pieces) else None


def sizes_from_shape(op: Operation, pieces: list[tuple[bool, list[int]]], rewriter: Rewriter) -> Replacements:
    """The reshape reads its target from ``shape(x)`` (copied dims) and consts (the rest)."""
    out = op.outputs[0]
    dims = rewriter.add("shape", f"{out.name}_x_shape", x=op.x)
    parts = []
    for copied, numbers in pieces:
        values = np.array(numbers, np.int32)
        if copied:
            parts.append(rewriter.add("gather", f"{out.name}_copied", x=dims, indices=values, axis=0))
        else:
            parts.append(rewriter.const(values, f"{out.name}_sizes"))
    target = parts[0]
    if len(parts) > 1:
        target = rewriter.add("concat", f"{out.name}_target", values=tuple(parts), axis=0)
    return rebuild(op, rewriter, shape=target)


def not_equal_zero(op: Operation, x: Var, rewriter: Rewriter) -> Replacements:
    """The cast reads ``not_equal(v, 0)`` (``webnn::canonicalize_uint8_select``'s rule 2)."""
    return _NOT_EQUAL.rewrite(op, x, rewriter)


CAST_OPTIMIZATION = Guard(
    "common::cast_optimization", (GuardRule(("cast",), lossy_cast_chain_to_bool, not_equal_zero),)
)
ADD_FP16_CAST = Guard("common::add_fp16_cast", (GuardRule(("reshape",), zero_target, sizes_from_shape),))

"""``webnn::scatter_rank5_to_rank4``: a scatter into a rank-5 tensor as a rank-4 one between reshapes.

Given (PocketTTS' key/value cache, written at the step's position along axis 2)::

    %cache = scatter_along_axis(data=%kv, indices=%at, updates=%new, axis=2)
                                                  # %kv: (2, 1, 256, 8, 64), %at and %new: (2, 1, 1, 8, 64)

Result (axes 0 and 1 merge: neither is the scatter axis)::

    %cache_data = reshape(x=%kv, shape=[2, 256, 8, 64])
    %cache_indices = reshape(x=%at, shape=[2, 1, 8, 64])
    %cache_updates = reshape(x=%new, shape=[2, 1, 8, 64])
    %cache_rank4 = scatter_along_axis(data=%cache_data, indices=%cache_indices, updates=%cache_updates, axis=1)
    %cache = reshape(x=%cache_rank4, shape=[2, 1, 256, 8, 64])

FluidAudio's profile of PocketTTS (``Documentation/ANE_Profiler.md``) finds the Neural Engine compiler
rejects the whole model for a scatter into a rank-5 cache (lint's ``ane-rank5-scatter``). Two adjacent
axes that the scatter does not index merge exactly: a reshape keeps the row-major order of the data and
of the updates (so duplicate indices still apply in the same order), every index still counts along an
axis of the same size (so negative and out-of-range indices do what they did), and each update lands on
the element it landed on before. For ``scatter`` and ``scatter_along_axis`` that is any pair without the
scatter axis (``scatter_along_axis``'s indices and updates have the data's sizes there); for
``scatter_nd`` a pair after the axes its index tuples address. A ``scatter_nd`` whose tuples address 4 or
5 axes is left: merging two addressed axes would need new indices, which differ from the old ones for
negative or out-of-range indices. Shapes must be static.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="scatter_rank5_to_rank4",
    summary="Rewrite every scatter into a rank-5 tensor as a rank-4 one between reshapes.",
    slots=(
        Slot(
            96,
            "common::remove_symbolic_reshape",
            "needs static shapes: after fold_shape_ops; before merge_consecutive_reshapes, which joins its "
            "reshapes with those of the rank-5 ops around it",
        ),
    ),
    fixes=("ane-rank5-scatter",),
)


@dataclass(frozen=True)
class Merge:
    """Data axes ``axis`` and ``axis + 1`` merge; ``updates_axis``: where the pair sits in the updates;
    ``scatter_axis``: the op's ``axis`` in rank 4 (``None`` for ``scatter_nd``)."""

    axis: int
    updates_axis: int
    scatter_axis: int | None


def merge_pair(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` with axes ``axis`` and ``axis + 1`` merged into one."""
    return (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])


def first_free_pair(indexed: set[int]) -> int | None:
    """The first ``i`` such that neither of the rank-5 axes ``i``, ``i + 1`` is in ``indexed``."""
    return next((i for i in range(4) if not {i, i + 1} & indexed), None)


def _static(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


def plan_along_axis(op: Operation, axis: int) -> Merge:
    """``scatter`` (indices of any rank along ``axis``) and ``scatter_along_axis``."""
    pair = first_free_pair({axis})
    assert pair is not None  # one axis of five leaves a free pair
    # scatter_along_axis: MIL gives indices and updates the data's sizes off the axis
    along = op.op_type == "scatter_along_axis" or pair < axis
    return Merge(pair, pair if along else pair + op.indices.rank - 1, axis if axis < pair else axis - 1)


def plan_nd(op: Operation) -> Merge | Declined:
    """``scatter_nd``: index tuples of length ``depth`` address the leading ``depth`` axes."""
    depth = int(op.indices.shape[-1])
    pair = first_free_pair(set(range(depth)))
    if pair is None:
        return Declined(
            op,
            f"its index tuples address {depth} of the 5 axes: merging two of them would need new indices, "
            "which differ for negative or out-of-range ones",
        )
    return Merge(pair, pair - depth + op.indices.rank - 1, None)


class Rank5Scatter(RewritePattern[Merge]):
    """A scatter into a rank-5 tensor → the rank-4 scatter between reshapes."""

    op_types = ("scatter", "scatter_along_axis", "scatter_nd")
    rule = "ane-rank5-scatter"
    cause = "scatters into a rank-5 tensor: a rank-4 scatter between reshapes"

    def match(self, op: Operation) -> Merge | Declined | None:
        if op.data.rank != 5:
            return None if op.data.rank < 5 else Declined(op, f"rank {op.data.rank}: only rank 5 is brought to 4")
        if any(v.shape is None or any_symbolic(v.shape) for v in (op.data, op.indices, op.updates)):
            return Declined(op, "a size is known only at run time")
        if op.op_type == "scatter_nd":
            return plan_nd(op)
        return plan_along_axis(op, int(op.axis.val) % 5)

    def detail(self, op: Operation, match: Merge) -> str:
        return f"axes {match.axis} and {match.axis + 1} merge"

    def rewrite(self, op: Operation, match: Merge, rewriter: Rewriter) -> Var:
        out = op.outputs[0]
        inputs = dict(op.inputs)
        pairs = {"data": match.axis, "updates": match.updates_axis}
        if op.op_type == "scatter_along_axis":
            pairs["indices"] = match.axis
        for name, axis in pairs.items():
            shape = merge_pair(_static(inputs[name].shape), axis)
            inputs[name] = _reshaped(rewriter, inputs[name], shape, f"{out.name}_{name}")
        if match.scatter_axis is not None:
            inputs["axis"] = np.int32(match.scatter_axis)
        rank4 = rewriter.add(op.op_type, f"{out.name}_rank4", **inputs)
        return rewriter.add("reshape", out.name, x=rank4, shape=np.array(_static(out.shape), np.int32))


def _reshaped(rewriter: Rewriter, var: Var, shape: tuple[int, ...], name: str) -> Var | np.ndarray:
    """``var`` in ``shape``: a const's value reshaped, else a new reshape."""
    if var.val is not None and var.op is not None and var.op.op_type == "const":
        return np.asarray(var.val).reshape(shape)
    return rewriter.add("reshape", name, x=var, shape=np.array(shape, np.int32))


@register(DECLARATION)
class ScatterRank5ToRank4(PatternPass):
    """Rewrite every scatter into a rank-5 tensor as a rank-4 one between reshapes."""

    def patterns(self) -> list[RewritePattern]:
        return [Rank5Scatter()]

"""``webnn::tiled_gather_to_gather``: a ``gather_along_axis`` by tiled indices is one ``gather``.

Pipeline slot: with the other Neural Engine rewrites, after ``const_elimination`` (the tile's
reps are constants then) and before ``add_int16_cast`` (which then narrows the gather's indices);
lint rule ``ane-gather``.

Given (a detector head picking its top boxes: ``torch.gather(boxes, 1, idx.unsqueeze(-1).repeat(1, 1, 4))``)::

    %idx_3d = expand_dims(x=%idx, axes=[-1])                # %idx: (B, K) int32
    %idx_tiled = tile(x=%idx_3d, reps=[1, 1, 4])             # (B, K, 4)
    %picked = gather_along_axis(x=%boxes, indices=%idx_tiled, axis=1)   # %boxes: (B, N, 4)

Result::

    %picked = gather(x=%boxes, indices=%idx, axis=1, batch_dims=1)

``out[b, k, c] = boxes[b, idx_tiled[b, k, c], c] = boxes[b, idx[b, k], c]``: the gather reads the
same elements, in the same order, with ``idx``'s leading axes as batch axes. Core ML runs all
three ops off the Neural Engine (roboflow/rf-detr#1495 names ``expand_dims``, ``tile`` and
``gather_along_axis`` on ``topk``'s indices): one op instead of three, and no int32 copies.
Only the form above: the indices expanded on the last axis of ``x`` and tiled along it alone to
its full size, the gathered axis right before it, the other axes of the indices those of ``x``.
"""

from __future__ import annotations

from coremltools.converters.mil._deployment_compatibility import AvailableTarget
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="tiled_gather_to_gather",
    summary="Rewrite every gather_along_axis by tiled indices as one gather.",
    slots=(
        Slot(
            85,
            "common::remove_symbolic_reshape",
            "needs the tile's reps constant (after const_elimination); before add_int16_cast, which then narrows the "
            "one gather's indices as it narrowed the gather_along_axis's",
        ),
    ),
    fixes=("ane-gather",),
)


def _ints(var: Var | None) -> list[int] | None:
    if var is None or var.val is None:
        return None
    return [int(v) for v in var.val.reshape(-1)]


def _static(shape) -> bool:
    return shape is not None and not any(is_symbolic(d) for d in shape)


class TiledIndices(RewritePattern[Var]):
    """``gather_along_axis(x, tile(expand_dims(i, [-1]), [1, …, 1, C]), axis=-2)`` → ``gather(x, i, batch_dims)``."""

    op_types = ("gather_along_axis",)
    rule = "ane-gather"
    cause = "gathers by tiled indices: the expand_dims, tile and gather_along_axis become one gather"

    def match(self, op: Operation) -> Var | Declined | None:
        tile = op.indices.op
        if tile is None or tile.op_type != "tile":
            return None
        expand = tile.x.op
        if expand is None or expand.op_type != "expand_dims":
            return None
        rank = op.x.rank
        axes, reps, expanded_axes = _ints(op.axis), _ints(tile.reps), _ints(expand.axes)
        if axes is None or reps is None or expanded_axes is None or rank < 2:
            return Declined(op, "its axis, the tile's reps or the expanded axes are not constants")
        axis = axes[0] + rank if axes[0] < 0 else axes[0]
        expanded = [a + rank if a < 0 else a for a in expanded_axes]
        if axis != rank - 2 or expanded != [rank - 1]:
            return Declined(op, "only indices expanded on the last axis of x, gathered along the axis before it")
        if not _static(op.x.shape) or not _static(expand.x.shape):
            return Declined(op, "x or the indices have a size known only at run time")
        if reps != [1] * (rank - 1) + [int(op.x.shape[-1])]:
            return Declined(op, f"the tile's reps {reps} do not repeat the index once per element of the last axis")
        if tuple(expand.x.shape[:axis]) != tuple(op.x.shape[:axis]):
            return Declined(op, "the indices' leading axes are not those of x")
        if axis > 0 and op.opset_version < AvailableTarget.iOS16:
            return Declined(op, "gather takes batch axes from iOS16 on")
        return expand.x

    def detail(self, op: Operation, match: Var) -> str:
        return f"indices '{match.name}'"

    def rewrite(self, op: Operation, match: Var, rewriter: Rewriter) -> Var:
        axis = op.x.rank - 2
        out = op.outputs[0]
        inputs = dict(x=op.x, indices=match, axis=axis)
        if axis:
            inputs["batch_dims"] = axis
        if getattr(op, "validate_indices", None) is not None:
            inputs["validate_indices"] = op.validate_indices.val
        return rewriter.add("gather", out.name, **inputs)


@register(DECLARATION)
class TiledGatherToGather(PatternPass):
    """Rewrite every gather_along_axis by tiled indices as one gather."""

    def patterns(self) -> list[RewritePattern]:
        return [TiledIndices()]

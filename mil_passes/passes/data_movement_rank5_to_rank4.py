"""``webnn::data_movement_rank5_to_rank4``: data movement on rank-5 tensors as rank-4 ops between
reshapes, and reshapes through a rank-5 tensor as one reshape.

Given (attention heads split in rank 5, as an attention block writes them)::

    %h = reshape(x=%x, shape=[1, 8, 2, 4, 8])                  # %x: (1, 8, 64)
    %t = transpose(x=%h, perm=[0, 2, 3, 1, 4])                  # (1, 2, 4, 8, 8)
    %y = reshape(x=%t, shape=[1, 8, 8, 8])

Result (axis 0 has size 1: it merges with axis 1; the reshapes through rank 5 become one)::

    %t_x = reshape(x=%x, shape=[8, 2, 4, 8])
    %t_rank4 = transpose(x=%t_x, perm=[1, 2, 0, 3])             # (2, 4, 8, 8)
    %y = reshape(x=%t_rank4, shape=[1, 8, 8, 8])

FluidAudio's published Neural Engine plan for PocketTTS (``Documentation/ANE_Candidates.md``) turns
rank-5 tensors into rank-4 ones. A ``transpose``, ``slice_by_index``, ``slice_by_size``,
``slice_update``, ``concat``, ``split`` or ``tile`` of a rank-5 tensor becomes the rank-4 op between
reshapes where two adjacent axes merge (``_rank5_pairs``): a reshape keeps the row-major order, and
the rank-4 op moves every element where the rank-5 op moved it, so the result is bit for bit the
same. A ``reshape``, ``squeeze`` or ``expand_dims`` of a rank-5 tensor that a reshape, squeeze or
expand_dims made reads that op's input instead (a reshape to literal sizes even where a size is known
only at run time), so a chain of rank-5 ops keeps no rank-5 tensor between them. Left, with the
reason: sizes known only at run time, parameters that are not constants, a window coremltools types
other than it reads, ops where no two adjacent axes merge, a fold that would put a window right on a
concat (``concat_slice_to_slice_concat`` ran before), and a ``slice_update`` whose value is written to
a state (reshapes between ``read_state`` and ``coreml_update_state`` would break the in-place form).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..declaration import LintRule, PassDeclaration, Slot
from ..ir import is_used
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register
from ._rank5_pairs import SLICE_INPUTS, Plan, Shape, merge_pair, parameters, plans, static_shape

DECLARATION = PassDeclaration(
    name="data_movement_rank5_to_rank4",
    summary="Rewrite data movement on rank-5 tensors as rank-4 ops between reshapes.",
    slots=(
        Slot(
            98,
            "common::remove_symbolic_reshape",
            "needs static shapes and constant parameters: after fold_shape_ops; after concat_slice_to_slice_concat, "
            "which reads a window of a rank-5 concat; before merge_consecutive_reshapes, which joins the reshapes "
            "of the rank-5 ops around it",
        ),
        Slot(
            104,
            "common::dedup_op_and_var_names",
            "again after dynamic_state_update_to_mask, whose blend of a rank-5 state reshapes its placed rows "
            "through rank 5 (merge_consecutive_reshapes has run by then)",
        ),
    ),
    rules=(
        LintRule(
            "rank5-data-movement",
            "info",
            "a transpose, slice, slice_update, concat, split or tile of a rank-5 tensor where two adjacent axes "
            "merge exactly, or reshapes through a rank-5 tensor",
            "FluidAudio's published Neural Engine plan for PocketTTS (`Documentation/ANE_Candidates.md`) turns "
            "rank-5 tensors into rank-4 ones: a stage went from 0% to 100% on the Neural Engine, bit-identical",
        ),
    ),
)

RESHAPES = ("reshape", "squeeze", "expand_dims")
WINDOWS = ("slice_by_index", "slice_by_size", "split")


def _tensors(op: Operation) -> list[Var]:
    return list(op.values) if op.op_type == "concat" else [op.x]


class Rank5DataMovement(RewritePattern[Plan]):
    """A data-movement op on a rank-5 tensor → the rank-4 op between reshapes."""

    op_types = ("transpose", "slice_by_index", "slice_by_size", "slice_update", "concat", "split", "tile")
    rule = "rank5-data-movement"
    cause = "moves a rank-5 tensor: a rank-4 op between reshapes"

    def match(self, op: Operation) -> Plan | Declined | None:
        tensors = _tensors(op)
        if any(v.rank != 5 for v in tensors) or not any(map(is_used, op.outputs)):
            return None  # not rank 5, or dead code
        params = parameters(op)
        if isinstance(params, Declined):
            return params
        if any(any_symbolic(v.shape) for v in (*tensors, *op.outputs)):
            return Declined(op, "a size is known only at run time")
        if op.op_type == "slice_update" and any(c.op_type == "coreml_update_state" for c in op.outputs[0].child_ops):
            return Declined(op, "its value is written to a state, which stays rank 5 (in place, between its reads)")
        planned = plans(op, static_shape(tensors[0]), params)
        if isinstance(planned, Declined):
            return planned
        plan = next((p for p in planned if p is not None), None)
        if plan is None:
            return Declined(op, "no two adjacent axes merge: the op moves each pair's elements apart")
        return plan

    def detail(self, op: Operation, match: Plan) -> str:
        return f"axes {match.pair} and {match.pair + 1} merge"

    def rewrite(self, op: Operation, match: Plan, rewriter: Rewriter) -> tuple[Var, ...]:
        name = op.outputs[0].name
        inputs = {key: var for key, var in op.inputs.items() if key not in (*SLICE_INPUTS, "size")}
        inputs.update(match.params)
        if op.op_type == "concat":
            inputs["values"] = tuple(
                _reshaped(rewriter, v, merge_pair(static_shape(v), match.pair), f"{name}_values") for v in op.values
            )
        else:
            shape = merge_pair(static_shape(op.x), match.pair)
            onto = _onto_concat(op.x, shape, op.op_type, match.params.get("axis"))
            inputs["x"] = _reshaped(rewriter, op.x, shape, f"{name}_x", through=not onto)
        if match.update is not None and op.op_type == "slice_update":
            inputs["update"] = _reshaped(rewriter, op.update, match.update, f"{name}_update")
        kind = "slice_by_index" if op.op_type == "slice_by_size" else op.op_type
        rank4 = rewriter.add(kind, f"{name}_rank4", **inputs)
        outputs = rank4 if isinstance(rank4, (list, tuple)) else (rank4,)
        return tuple(
            rewriter.add("reshape", out.name, x=new, shape=np.array(static_shape(out), np.int32))
            for out, new in zip(op.outputs, outputs)
        )


@dataclass(frozen=True)
class Fold:
    """Reshape ``source`` to ``target`` (``None``: ``source`` is the result itself)."""

    source: Var
    target: np.ndarray | None = field(default=None, compare=False)


class ReshapeThroughRank5(RewritePattern[Fold]):
    """A reshape, squeeze or expand_dims of a rank-5 tensor made by one of them → one reshape."""

    op_types = RESHAPES
    rule = "rank5-data-movement"
    cause = "reshapes a rank-5 tensor a reshape made: one reshape"

    def match(self, op: Operation) -> Fold | Declined | None:
        made_by, out = op.x.op, op.outputs[0]
        if op.x.rank != 5 or made_by is None or made_by.op_type not in RESHAPES or not is_used(out):
            return None
        source = made_by.x
        if any_symbolic(out.shape) or any_symbolic(source.shape):
            # a target of literal sizes (a -1 solved from the source's size) reads any source
            target = op.shape.val if op.op_type == "reshape" else None
            if target is None or 0 in target:
                return Declined(op, "a size is known only at run time")
            return Fold(source, np.asarray(target, np.int32))
        readers = [(r.op_type, r.axis.val if r.op_type == "split" else None) for r in out.child_ops]
        if any(_onto_concat(source, static_shape(out), *reader) for reader in readers):
            return Declined(
                op, f"a window would read concat '{source.op.name}' itself, after concat_slice_to_slice_concat ran"
            )
        same = static_shape(source) == static_shape(out)
        return Fold(source, None if same else np.array(static_shape(out), np.int32))

    def detail(self, op: Operation, match: Fold) -> str:
        return f"it reshapes '{match.source.name}' instead"

    def rewrite(self, op: Operation, match: Fold, rewriter: Rewriter) -> Var:
        if match.target is None:
            return match.source
        return rewriter.add("reshape", op.outputs[0].name, x=match.source, shape=match.target)


def _onto_concat(source: Var, shape: Shape, reader: str, split_axis: int | None = None) -> bool:
    """Would a ``reader`` op (splitting ``split_axis``), reading ``source`` in ``shape``, become a window
    of a concat's output that ``concat_slice_to_slice_concat`` cuts? It ran before this pass: a window
    it did not see must stay unseen (a slice, or a split along the concat axis; not an interleave)."""
    made_by = source.op if source.op is not None and source.op.op_type in RESHAPES else None
    if made_by is not None and not any_symbolic(made_by.x.shape):
        source = made_by.x
    concat = source.op
    if reader not in WINDOWS or concat is None or concat.op_type != "concat" or any_symbolic(source.shape):
        return False
    if static_shape(source) != shape or (concat.interleave is not None and concat.interleave.val):
        return False
    rank = len(shape)
    return reader != "split" or (split_axis is not None and split_axis % rank == int(concat.axis.val) % rank)


def _reshaped(rewriter: Rewriter, var: Var, shape: Shape, name: str, through: bool = True) -> Var | np.ndarray:
    """``var`` in ``shape``: a const's value reshaped; (``through``) the source of a reshape-made var,
    reshaped."""
    if var.val is not None and var.op is not None and var.op.op_type == "const":
        return np.asarray(var.val).reshape(shape)
    if through and var.op is not None and var.op.op_type in RESHAPES and not any_symbolic(var.op.x.shape):
        var = var.op.x
    if static_shape(var) == shape:
        return var
    return rewriter.add("reshape", name, x=var, shape=np.array(shape, np.int32))


@register(DECLARATION)
class DataMovementRank5ToRank4(PatternPass):
    """Rewrite data movement on rank-5 tensors as rank-4 ops between reshapes."""

    def patterns(self) -> list[RewritePattern]:
        return [Rank5DataMovement(), ReshapeThroughRank5()]

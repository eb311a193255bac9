"""``webnn::matmul_rank5_to_rank4``: a rank-5 batched matmul as a rank-4 one between reshapes.

Given (attention over heads and windows, written with two batch axes)::

    %y = matmul(x=%q, y=%k, transpose_y=True)                  # %q, %k: (2, 3, 4, 8, 16)

Result::

    %y_x = reshape(x=%q, shape=[6, 4, 8, 16])
    %y_y = reshape(x=%k, shape=[6, 4, 8, 16])
    %y_mm = matmul(x=%y_x, y=%y_y, transpose_y=True)             # (6, 4, 8, 8)
    %y = reshape(x=%y_mm, shape=[2, 3, 4, 8, 8])

The Neural Engine's matrix-multiply backend rejects a rank-5 batched matmul and the rank-4 form
compiles (ane-guide, chapter 4; its validator: "depth > 1 is not supported for MatMult", the D of
N, D, C, H, W). The leading batch axes are merged so the operands have rank 4: each matrix
product is the same, of the same matrices, so the result is bit for bit the same. The same holds
for a ``linear`` whose input has rank 5 or more ("ANE cannot support Linear with input rank >= 5").

Shapes must be static. The merged axes must be equal in both operands, or all 1 in one of them
(broadcast whole); an operand of rank 2 multiplies every batch as it is. Vectors (rank 1) are left.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..declaration import PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="matmul_rank5_to_rank4",
    summary="Rewrite every rank-5 batched matmul (and linear of a rank-5 input) as a rank-4 one between reshapes.",
    slots=(
        Slot(
            90,
            "common::remove_symbolic_reshape",
            "needs static shapes: after fold_shape_ops; merge_consecutive_reshapes then merges its reshapes",
        ),
        Slot(
            106,
            "common::dedup_op_and_var_names",
            "again: the one-hot matmul dynamic_state_update_to_mask builds for several new rows has the cache's rank "
            "(5 for a [layers, ...] cache)",
        ),
    ),
    fixes=("ane-rank5-matmul",),
)


@dataclass(frozen=True)
class Merge:
    """The rank-4 (or rank-2) shapes the operands are reshaped to, and the output's own shape."""

    x: tuple[int, ...] | None  # None: the operand stays as it is
    y: tuple[int, ...] | None
    out: tuple[int, ...]


def _merged(shape: tuple[int, ...], rank: int) -> tuple[int, ...]:
    """``shape`` padded to ``rank`` with leading 1s, its first ``rank - 3`` axes merged into one."""
    padded = (1,) * (rank - len(shape)) + shape
    lead = rank - 3
    return (int(np.prod(padded[:lead])), *padded[lead:])


def plan(x_shape: tuple, y_shape: tuple | None, out_shape: tuple) -> Merge | str:
    """How to merge the batch axes, or why not (``y_shape`` None: a linear's input alone)."""
    shapes = [s for s in (x_shape, y_shape) if s is not None]
    if any(any_symbolic(s) for s in (*shapes, out_shape)):
        return "a size is known only at run time"
    x_shape, out_shape = tuple(map(int, x_shape)), tuple(map(int, out_shape))
    if y_shape is None:
        return Merge(_merged(x_shape, len(x_shape)), None, out_shape)
    y_shape = tuple(map(int, y_shape))
    if min(len(x_shape), len(y_shape)) < 2:
        return "an operand is a vector"
    rank = max(len(x_shape), len(y_shape))
    lead = rank - 3
    padded = [(1,) * (rank - len(s)) + s for s in (x_shape, y_shape)]
    heads = [p[:lead] for p in padded]
    if heads[0] != heads[1] and not any(all(d == 1 for d in h) for h in heads):
        return "the merged batch axes broadcast against each other"
    new = [None if len(s) == 2 else _merged(s, rank) for s in (x_shape, y_shape)]
    return Merge(new[0], new[1], out_shape)


class Rank5Matmul(RewritePattern[Merge]):
    """``matmul`` with an operand of rank ≥ 5 (or ``linear`` with such an input) → rank 4 between reshapes."""

    op_types = ("matmul", "linear")
    rule = "ane-rank5-matmul"
    cause = (
        "multiplies operands of rank 5 or more, which the Neural Engine's matmul rejects: a rank-4 one between reshapes"
    )

    def match(self, op: Operation) -> Merge | Declined | None:
        operands = (op.x, op.y) if op.op_type == "matmul" else (op.x,)
        if any(v.shape is None for v in operands) or all(len(v.shape) < 5 for v in operands):
            return None
        y_shape = tuple(op.y.shape) if op.op_type == "matmul" else None
        merge = plan(tuple(op.x.shape), y_shape, tuple(op.outputs[0].shape))
        return Declined(op, merge) if isinstance(merge, str) else merge

    def detail(self, op: Operation, match: Merge) -> str:
        operands = (op.x, op.y) if op.op_type == "matmul" else (op.x,)
        return "operands of rank " + " and ".join(str(len(v.shape)) for v in operands)

    def rewrite(self, op: Operation, match: Merge, rewriter: Rewriter) -> Var:
        out = op.outputs[0]
        inputs = dict(op.inputs)
        for side, shape in (("x", match.x), ("y", match.y)):
            if shape is not None:
                target = np.array(shape, np.int32)
                inputs[side] = rewriter.add("reshape", f"{out.name}_{side}", x=inputs[side], shape=target)
        product = rewriter.add(op.op_type, f"{out.name}_{op.op_type}", **inputs)
        return rewriter.add("reshape", out.name, x=product, shape=np.array(match.out, np.int32))


@register(DECLARATION)
class MatmulRank5ToRank4(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [Rank5Matmul()]

"""``webnn::elementwise_rank5_to_rank4``: an elementwise op on rank-5 tensors as a rank-4 one
between reshapes.

Given (heads and windows, written with two batch axes)::

    %y = add(x=%a, y=%b)                         # %a: (2, 1, 4, 8, 16), %b: (1, 1, 4, 8, 16)

Result (axes 0 and 1 merge: one of them has size 1 in the output)::

    %y_x = reshape(x=%a, shape=[2, 4, 8, 16])
    %y_y = reshape(x=%b, shape=[1, 4, 8, 16])
    %y_rank4 = add(x=%y_x, y=%y_y)
    %y = reshape(x=%y_rank4, shape=[2, 1, 4, 8, 16])

FluidAudio's published Neural Engine plan for PocketTTS (``Documentation/ANE_Candidates.md``) turns
rank-5 tensors into rank-4 ones; a stage went from 0% to 100% on the Neural Engine, bit-identical.
Two adjacent axes ``i``, ``i + 1`` merge exactly when every operand (its shape padded with leading
1s) has on them either the output's sizes or 1 and 1, or the output has size 1 on one of them:
each operand then broadcasts along the merged axis as it did along the two, and every output
element is the same op of the same inputs, so the result is bit for bit the same. Shapes must be
static; where no two adjacent axes merge (the operands broadcast across the pair differently),
the op is left, with the reason.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..declaration import LintRule, PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="elementwise_rank5_to_rank4",
    summary="Rewrite every elementwise op on rank-5 tensors as a rank-4 one between reshapes.",
    slots=(
        Slot(
            95,
            "common::remove_symbolic_reshape",
            "needs static shapes: after fold_shape_ops; before merge_consecutive_reshapes, which joins one op's "
            "reshape back to rank 5 with the next op's reshape to rank 4, so a chain stays in rank 4",
        ),
    ),
    rules=(
        LintRule(
            "rank5-elementwise",
            "info",
            "an elementwise op whose output has rank 5, where two adjacent axes merge exactly",
            "FluidAudio's published Neural Engine plan for PocketTTS (`Documentation/ANE_Candidates.md`) turns "
            "rank-5 tensors into rank-4 ones: a stage went from 0% to 100% on the Neural Engine, bit-identical",
        ),
    ),
)

BINARY = (
    "add", "sub", "mul", "real_div", "floor_div", "mod", "pow", "maximum", "minimum",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor",
)  # fmt: skip
UNARY = (
    "abs", "ceil", "clip", "cos", "erf", "exp", "floor", "inverse", "log", "logical_not", "round",
    "rsqrt", "sign", "sin", "sqrt", "square", "tanh", "relu", "relu6", "sigmoid", "silu", "softplus",
    "leaky_relu", "elu",
)  # fmt: skip
#: The tensor operands of each op type that broadcast against each other; other inputs are kept.
OPERANDS: dict[str, tuple[str, ...]] = {
    **{op_type: ("x", "y") for op_type in BINARY},
    **{op_type: ("x",) for op_type in UNARY},
    "select": ("cond", "a", "b"),
}


def merge_axis(out: tuple[int, ...], operands: list[tuple[int, ...]]) -> int | None:
    """The first axis ``i`` such that axes ``i`` and ``i + 1`` of the rank-5 ``out`` merge for
    every operand (shapes padded to rank 5 with leading 1s), or None."""
    padded = [(1,) * (5 - len(s)) + tuple(s) for s in operands]
    for i in range(4):
        pair = out[i : i + 2]
        if 1 in pair or all(s[i : i + 2] in (pair, (1, 1)) for s in padded):
            return i
    return None


def merged(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """A rank-5 ``shape`` (padded with leading 1s) with axes ``axis`` and ``axis + 1`` merged."""
    shape = (1,) * (5 - len(shape)) + tuple(shape)
    return (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])


class Rank5Elementwise(RewritePattern[int]):
    """An elementwise op with a rank-5 output → the rank-4 op between reshapes."""

    op_types = tuple(OPERANDS)
    rule = "rank5-elementwise"
    cause = "computes a rank-5 tensor: a rank-4 op between reshapes"

    def match(self, op: Operation) -> int | Declined | None:
        out = op.outputs[0]
        if out.shape is None or len(out.shape) != 5:
            return None
        operands = [getattr(op, name) for name in OPERANDS[op.op_type] if getattr(op, name, None) is not None]
        if any(v.shape is None or any_symbolic(v.shape) for v in (out, *operands)):
            return Declined(op, "a size is known only at run time")
        axis = merge_axis(tuple(map(int, out.shape)), [tuple(map(int, v.shape)) for v in operands])
        if axis is None:
            return Declined(op, "no two adjacent axes merge: its operands broadcast across each pair differently")
        return axis

    def detail(self, op: Operation, match: int) -> str:
        return f"axes {match} and {match + 1} merge"

    def rewrite(self, op: Operation, match: int, rewriter: Rewriter) -> Var:
        out = op.outputs[0]
        inputs = dict(op.inputs)
        for name in OPERANDS[op.op_type]:
            operand: Var | None = inputs.get(name)
            if operand is None or operand.rank == 0:
                continue  # a scalar broadcasts at any rank
            target = np.array(merged(tuple(map(int, operand.shape)), match), np.int32)
            if operand.val is not None and operand.op is not None and operand.op.op_type == "const":
                inputs[name] = np.asarray(operand.val).reshape(target)
            else:
                inputs[name] = rewriter.add("reshape", f"{out.name}_{name}", x=operand, shape=target)
        rank4 = rewriter.add(op.op_type, f"{out.name}_rank4", **inputs)
        shape = np.array([int(d) for d in out.shape], np.int32)
        return rewriter.add("reshape", out.name, x=rank4, shape=shape)


@register(DECLARATION)
class ElementwiseRank5ToRank4(PatternPass):
    """Rewrite every elementwise op on rank-5 tensors as a rank-4 one between reshapes."""

    def patterns(self) -> list[RewritePattern]:
        return [Rank5Elementwise()]

"""webnn::guard_fuse_conv_bias — a bias added after a conv's transpose gets the transpose's rank.

``common::fuse_conv_bias`` folds ``add(transpose(conv(x)), c)`` into the conv's bias; when the
const ``c`` has a lower rank than the transpose it reads ``c.shape[cout_dim]`` with ``cout_dim``
counted from the end of the transpose's rank and raises ``IndexError: tuple index out of range``
(docs/coremltools-passes.md). This pass, right before every ``common::fuse_conv_bias`` of
``mil_passes.pipeline()``, gives such a const the leading 1s that broadcasting gives it anyway.

Given::

    %y: (1, 2, 3, fp32) = conv(x=%x, weight=...)
    %t: (3, 2, 1, fp32) = transpose(x=%y, perm=[2, 1, 0])
    %out: (3, 2, 2, fp32) = add(x=%t, y=[1.0, 2.0])

Result (the same broadcast)::

    %out: (3, 2, 2, fp32) = add(x=%t, y=[[[1.0, 2.0]]])

Matched: an ``add`` or ``sub`` of a ``transpose`` of a ``conv`` or ``conv_transpose`` (the pass
folds a bias into both) and a const of lower rank.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "low-rank-bias-after-transpose"


def _transposed_conv(var: Var) -> bool:
    producer = var.op
    if producer is None or producer.op_type != "transpose":
        return False
    return producer.x.op is not None and producer.x.op.op_type in ("conv", "conv_transpose")


class LowRankBias(RewritePattern[tuple[str, np.ndarray]]):
    """``add``/``sub`` of a transposed conv and a lower-rank const → the const at full rank."""

    op_types = ("add", "sub")
    rule = RULE

    def match(self, op: Operation) -> tuple[str, np.ndarray] | None:
        for side, other in (("y", "x"), ("x", "y")):
            const, moving = getattr(op, side), getattr(op, other)
            if const.val is None or not _transposed_conv(moving) or moving.rank is None:
                continue
            value = np.asarray(const.val)
            if value.ndim < moving.rank:
                return side, value.reshape((1,) * (moving.rank - value.ndim) + value.shape)
        return None

    def describe(self, op: Operation, match: tuple[str, np.ndarray]) -> str:
        side, value = match
        return f"{op.op_type} '{op.name}': its const {side} gets rank {value.ndim}, the transposed conv's"

    def rewrite(self, op: Operation, match: tuple[str, np.ndarray], rewriter: Rewriter) -> None:
        side, value = match
        out = op.outputs[0]
        const = rewriter.emit(op, "const", f"{out.name}_{side}", val=value)
        inputs = {"x": op.x, "y": op.y, side: const}
        rewriter.replace(out, rewriter.emit(op, op.op_type, out.name, **inputs))


@register("guard_fuse_conv_bias")
class GuardFuseConvBias(PatternPass):
    """Give each lower-rank const added to a transposed conv the transpose's rank."""

    name = "webnn::guard_fuse_conv_bias"

    def patterns(self) -> list[RewritePattern]:
        return [LowRankBias()]

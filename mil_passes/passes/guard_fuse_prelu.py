"""webnn::guard_fuse_prelu — a one-element alpha is spread over the channels before fuse_prelu.

``common::fuse_prelu`` turns ``relu(x) + alpha * relu(-x)`` into ``prelu(x, alpha)``; it accepts an
alpha const of shape ``(1, C, 1, 1)`` by checking ``alpha.size == alpha.shape[-3]``, which a
``(1, 1, 1, 1)`` alpha on a ``C > 1`` tensor also passes, and then ``prelu`` raises ``ValueError:
Size of dimension 0 of alpha (1) should be the same as the size of dimension 1 of x (2)``
(docs/coremltools-passes.md). This pass, right before every ``common::fuse_prelu`` of
``mil_passes.pipeline()``, gives such an alpha the ``(1, C, 1, 1)`` shape broadcasting gives it.

Given::

    %neg: (1, 2, 1, 1, fp32) = relu(x=mul(x=%x, y=-1.0))
    %scaled: (1, 2, 1, 1, fp32) = mul(x=%neg, y=[[[[-0.1]]]])

Result (the same products)::

    %scaled: (1, 2, 1, 1, fp32) = mul(x=%neg, y=[[[[-0.1]], [[-0.1]]]])

Matched: a ``mul`` of a ``relu`` output of rank 4 with a static channel count ``C > 1`` and a
const of rank 3 or 4 holding one element. And an alpha that broadcasts the product wider than the
relu's output (``(1, 1, 1, 2)`` over one channel, found by ``--pipeline mil_passes``; the pass then
raises too): no ``prelu`` computes it, so the ``mul`` reads the relu through an ``identity`` and the
pattern does not match (:class:`WideningAlpha`). And the transposed form on an input other ops read
too, which coremltools matches with the ``perm`` const as its root (:class:`SharedTransposeInput`).
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "one-element-prelu-alpha"


class OneElementAlpha(RewritePattern[tuple[str, np.ndarray]]):
    """``mul(relu(·), alpha)`` with a one-element rank-3/4 alpha → alpha of shape ``(1, C, 1, 1)``."""

    op_types = ("mul",)
    rule = RULE

    def match(self, op: Operation) -> tuple[str, np.ndarray] | None:
        for side, other in (("y", "x"), ("x", "y")):
            alpha, moving = getattr(op, side), getattr(op, other)
            if alpha.val is None or moving.op is None or moving.op.op_type != "relu":
                continue
            value = np.asarray(alpha.val)
            shape = moving.shape
            if value.ndim not in (3, 4) or value.size != 1 or shape is None or len(shape) != 4:
                continue
            channels = shape[1]
            if is_symbolic(channels) or int(channels) <= 1:
                continue
            return side, np.broadcast_to(value.reshape(1, 1, 1, 1), (1, int(channels), 1, 1)).copy()
        return None

    def describe(self, op: Operation, match: tuple[str, np.ndarray]) -> str:
        return f"mul '{op.name}': its one-element alpha is spread over {match[1].shape[1]} channels"

    def rewrite(self, op: Operation, match: tuple[str, np.ndarray], rewriter: Rewriter) -> None:
        side, value = match
        out = op.outputs[0]
        alpha = rewriter.emit(op, "const", f"{out.name}_alpha", val=value)
        inputs = {"x": op.x, "y": op.y, side: alpha}
        rewriter.replace(out, rewriter.emit(op, "mul", out.name, **inputs))


class WideningAlpha(RewritePattern[str]):
    """``mul(relu(·), alpha)`` whose const alpha broadcasts the product wider than the relu (a
    ``(1, 1, 1, 2)`` alpha on one channel): no ``prelu`` computes that, yet the pass fuses it and
    ``prelu`` raises. The mul reads the relu through an ``identity`` (removed by DEFAULT's last
    ``noop_elimination``), so the pattern does not match."""

    op_types = ("mul",)
    rule = "widening-prelu-alpha"

    def match(self, op: Operation) -> str | None:
        for side, other in (("y", "x"), ("x", "y")):
            alpha, moving = getattr(op, side), getattr(op, other)
            if alpha.val is None or moving.op is None or moving.op.op_type != "relu":
                continue
            if tuple(op.outputs[0].shape) != tuple(moving.shape):
                return other
        return None

    def describe(self, op: Operation, match: str) -> str:
        return f"mul '{op.name}': its alpha widens the relu's output: it reads the relu through an identity"

    def rewrite(self, op: Operation, match: str, rewriter: Rewriter) -> None:
        moving = getattr(op, match)
        kept = rewriter.emit(op, "identity", f"{moving.name}_kept", x=moving)
        out = op.outputs[0]
        inputs = {"x": op.x, "y": op.y, match: kept}
        rewriter.replace(out, rewriter.emit(op, "mul", out.name, **inputs))


class SharedTransposeInput(RewritePattern[bool]):
    """The transposed form ``t = transpose(x, [0, 2, 3, 1])``, ``relu(t) + a * relu(-t)``, when x
    has other readers: coremltools' pattern matcher then tries the transpose's other input as the
    pattern's root, matches with the ``perm`` const as x, and ``prelu`` raises (``Input x=
    "..._perm" expects tensor ... fp32``). The transpose reads x through an ``identity`` (one
    reader, the right root; removed by DEFAULT's last ``noop_elimination``), and the pattern fuses."""

    op_types = ("transpose",)
    rule = "shared-prelu-transpose-input"

    def match(self, op: Operation) -> bool | None:
        perm = op.perm.val
        if perm is None or list(np.asarray(perm)) != [0, 2, 3, 1]:
            return None
        readers = sorted(reader.op_type for reader in op.outputs[0].child_ops)
        if readers != ["mul", "relu"]:
            return None
        x = op.x
        if not x.consuming_blocks and len(x.child_ops) <= 1:
            return None
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"transpose '{op.name}' heads a prelu pattern on a shared input: it reads it through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        kept = rewriter.emit(op, "identity", f"{op.x.name}_prelu_input", x=op.x)
        out = op.outputs[0]
        rewriter.replace(out, rewriter.emit(op, "transpose", out.name, x=kept, perm=op.perm))


@register("guard_fuse_prelu")
class GuardFusePrelu(PatternPass):
    """Spread each one-element alpha of a relu product over the channels before ``common::fuse_prelu``."""

    name = "webnn::guard_fuse_prelu"

    def patterns(self) -> list[RewritePattern]:
        return [OneElementAlpha(), WideningAlpha(), SharedTransposeInput()]

"""webnn::guard_fuse_conv_scale — ``const / conv(x)`` is not folded as ``conv(x) / const``.

``common::fuse_conv_scale`` folds a ``mul`` or ``real_div`` of a conv's output by a const into the
conv's weight and bias; for ``real_div`` it takes whichever input is const as the divisor, so
``real_div(x=2.0, y=conv(x))`` (``2 / y``) becomes ``conv(x) / 2`` (docs/coremltools-passes.md).
This pass, right before every ``common::fuse_conv_scale`` of ``mil_passes.pipeline()``, reads such
a conv output through an ``identity``, so the pass does not match it; DEFAULT's last
``noop_elimination`` removes the identity again (no fuse_conv_scale runs after it).

Given::

    %y: (1, 1, 2, fp32) = conv(x=%x, weight=...)
    %out: (1, 1, 2, fp32) = real_div(x=2.0, y=%y)

Result::

    %y_op: (1, 1, 2, fp32) = conv(x=%x, weight=...)
    %y: (1, 1, 2, fp32) = identity(x=%y_op)
    %out: (1, 1, 2, fp32) = real_div(x=2.0, y=%y)
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register
from ._identity import read_through_identity

RULE = "const-divided-by-conv"


class ConstOverConv(RewritePattern[bool]):
    """A conv whose one reader is ``real_div(const, conv)`` → the conv behind an identity."""

    op_types = ("conv",)
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        out = op.outputs[0]
        readers = out.child_ops
        if out.consuming_blocks or len(readers) != 1 or readers[0].op_type != "real_div":
            return None
        divide = readers[0]
        if divide.y is not out or divide.x.val is None:
            return None  # conv / const: the pass folds it right
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"conv '{op.name}' is a divisor of a const: its reader reads it through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        read_through_identity(op, rewriter)


@register("guard_fuse_conv_scale")
class GuardFuseConvScale(PatternPass):
    """Hide each conv divided into a const from ``common::fuse_conv_scale``."""

    name = "webnn::guard_fuse_conv_scale"

    def patterns(self) -> list[RewritePattern]:
        return [ConstOverConv()]

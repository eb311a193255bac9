"""webnn::guard_fuse_elementwise_to_batchnorm — an fp16 ``x * c + d`` is not made a batch_norm.

``common::fuse_elementwise_to_batchnorm`` turns ``add(mul(x, c), d)`` with per-channel consts of
shape ``(1, C, 1, 1)`` into a ``batch_norm`` whose ``gamma`` / ``beta`` take the program's dtype
but whose ``mean`` / ``variance`` are always fp32; on an fp16 program it raises ``ValueError: ...
gamma has dtype fp16 whereas mean has dtype fp32`` (docs/coremltools-passes.md): a package
converted at fp16 and optimized again fails DEFAULT. This pass, right before every
``common::fuse_elementwise_to_batchnorm`` of ``mil_passes.pipeline()``, puts an ``identity``
between an fp16 ``mul`` of a const and its one ``add`` reader, so the pass does not match it;
DEFAULT's last ``noop_elimination`` removes the identity again. fp32 programs are left to the
pass (a ``ct.convert`` at fp16 precision computes in fp32 until ``common::add_fp16_cast``, which
runs later).

Given::

    %scaled: (1, 2, 3, 3, fp16) = mul(x=%x, y=[[[[2]], [[3]]]])
    %out: (1, 2, 3, 3, fp16) = add(x=%scaled, y=[[[[1]], [[-1]]]])

Result::

    %scaled_op: (1, 2, 3, 3, fp16) = mul(x=%x, y=[[[[2]], [[3]]]])
    %scaled: (1, 2, 3, 3, fp16) = identity(x=%scaled_op)
    %out: (1, 2, 3, 3, fp16) = add(x=%scaled, y=[[[[1]], [[-1]]]])
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, types

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register
from ._identity import read_through_identity

RULE = "fp16-elementwise-batchnorm"


class Fp16ScaleThenShift(RewritePattern[bool]):
    """An fp16 ``mul`` of a const whose one reader is an ``add`` → the mul behind an identity."""

    op_types = ("mul",)
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        out = op.outputs[0]
        if out.dtype != types.fp16 or out.consuming_blocks or (op.x.val is None) == (op.y.val is None):
            return None
        readers = out.child_ops
        if len(readers) != 1 or readers[0].op_type != "add":
            return None
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"fp16 mul '{op.name}' and its add: the add reads it through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        read_through_identity(op, rewriter)


@register("guard_fuse_elementwise_to_batchnorm")
class GuardFuseElementwiseToBatchnorm(PatternPass):
    """Hide each fp16 scale-then-shift from ``common::fuse_elementwise_to_batchnorm``."""

    name = "webnn::guard_fuse_elementwise_to_batchnorm"

    def patterns(self) -> list[RewritePattern]:
        return [Fp16ScaleThenShift()]

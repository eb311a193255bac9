"""webnn::guard_merge_consecutive_relus / _reshapes — a pair split across blocks is not merged.

``common::merge_consecutive_relus`` and ``common::merge_consecutive_reshapes`` merge ``relu(relu(x))``
and ``reshape(reshape(x))`` and remove the first op from the *second* op's block; when the second
sits in a nested block (a ``cond`` branch) and the first outside it, they raise ``KeyError``
(found by ``--pipeline mil_passes``; docs/coremltools-passes.md). These passes, right before each
of them in ``mil_passes.pipeline()``, read such a second op's input through an ``identity`` in its
own block, so the pair no longer matches; DEFAULT's last ``noop_elimination`` removes the
identity (no merge runs after it).

Given::

    %r: (2, 3, fp32) = relu(x=%x)
    %c = cond(pred=%p)
      true() {
        %r2: (2, 3, fp32) = relu(x=%r)
      } -> (%r2)

Result::

    %r: (2, 3, fp32) = relu(x=%x)
    %c = cond(pred=%p)
      true() {
        %r_inner: (2, 3, fp32) = identity(x=%r)
        %r2: (2, 3, fp32) = relu(x=%r_inner)
      } -> (%r2)
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "consecutive-pair-across-blocks"


class PairAcrossBlocks(RewritePattern[bool]):
    """An op reading an op of its own type in another block → it reads an identity."""

    rule = RULE

    def match(self, op: Operation) -> bool | None:
        first = op.x.op
        if first is None or first.op_type != op.op_type or first.enclosing_block is op.enclosing_block:
            return None
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"{op.op_type} '{op.name}' reads a {op.op_type} of another block: it reads it through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        inner = rewriter.emit(op, "identity", f"{op.x.name}_inner", x=op.x)
        out = op.outputs[0]
        inputs = {**dict(op.inputs), "x": inner}
        rewriter.replace(out, rewriter.emit(op, op.op_type, out.name, **inputs))


class ReluPairAcrossBlocks(PairAcrossBlocks):
    op_types = ("relu",)


class ReshapePairAcrossBlocks(PairAcrossBlocks):
    op_types = ("reshape",)


@register("guard_merge_consecutive_relus")
class GuardMergeConsecutiveRelus(PatternPass):
    """Hide each relu of a relu in another block from ``common::merge_consecutive_relus``."""

    name = "webnn::guard_merge_consecutive_relus"

    def patterns(self) -> list[RewritePattern]:
        return [ReluPairAcrossBlocks()]


@register("guard_merge_consecutive_reshapes")
class GuardMergeConsecutiveReshapes(PatternPass):
    """Hide each reshape of a reshape in another block from ``common::merge_consecutive_reshapes``."""

    name = "webnn::guard_merge_consecutive_reshapes"

    def patterns(self) -> list[RewritePattern]:
        return [ReshapePairAcrossBlocks()]

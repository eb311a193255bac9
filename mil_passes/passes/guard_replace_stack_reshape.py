"""webnn::guard_replace_stack_reshape — a stack that is also an output gets a copy for its reshape.

``common::replace_stack_reshape`` turns ``reshape(stack(values))`` (the reshape merging the new
axis into a neighbour) into one ``concat`` and deletes the ``stack``, checking only that the
reshape is its one reader, not that no block returns it: when the stack is also an output it
raises ``ValueError: cannot delete op ... that's block ...'s output``
(docs/coremltools-passes.md). This pass, right before ``common::replace_stack_reshape`` in
``mil_passes.pipeline()``, gives such a reshape a copy of the stack; the block keeps returning the
original, and the pass fuses the copy with the reshape.

Given::

    %stacked: (1, 2, 5, 3, fp32) = stack(values=(%a, %b), axis=1)
    %out: (1, 10, 3, fp32) = reshape(x=%stacked, shape=[1, 10, 3])
    return (%out, %stacked)

Result::

    %stacked: (1, 2, 5, 3, fp32) = stack(values=(%a, %b), axis=1)
    %stacked_copy: (1, 2, 5, 3, fp32) = stack(values=(%a, %b), axis=1)
    %out: (1, 10, 3, fp32) = reshape(x=%stacked_copy, shape=[1, 10, 3])
    return (%out, %stacked)
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "returned-stack-reshaped"


class ReturnedStackReshaped(RewritePattern[bool]):
    """A reshape of a stack that a block returns (and nothing else reads) → a reshape of a copy."""

    op_types = ("reshape",)
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        stacked = op.x
        if stacked.op is None or stacked.op.op_type != "stack":
            return None
        if not stacked.consuming_blocks or list(stacked.child_ops) != [op]:
            return None
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"reshape '{op.name}' reads a stack that a block returns: it reads a copy of the stack"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        stack = op.x.op
        copy = rewriter.emit(op, "stack", f"{stack.outputs[0].name}_copy", **dict(stack.inputs))
        out = op.outputs[0]
        rewriter.replace(out, rewriter.emit(op, "reshape", out.name, x=copy, shape=op.shape))


@register("guard_replace_stack_reshape")
class GuardReplaceStackReshape(PatternPass):
    """Give each reshape of a returned stack a copy of the stack."""

    name = "webnn::guard_replace_stack_reshape"

    def patterns(self) -> list[RewritePattern]:
        return [ReturnedStackReshaped()]

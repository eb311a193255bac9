"""webnn::guard_fuse_stack_split — a split of a stack whose outputs are not all squeezed is left alone.

``common::fuse_stack_split`` turns ``squeeze(split(stack(values)))`` back into the values. It
checks that each split output feeds one ``squeeze``, but on a failed check it only notes it and
reads ``child_ops[0]`` anyway: a split output that nothing reads (a dead branch: a multi-output
op stays while one output is used) raises ``IndexError: list index out of range``, and one read
by another op type reads that op's ``axes``. Found by ``python -m mil_passes.testing.fuzz
--pipeline mil_passes`` with issue #25's DEFAULT plants. This pass, right before every
``common::fuse_stack_split`` of ``mil_passes.pipeline()``, reads such a stack through an
``identity``, so the pass does not match it; DEFAULT's last ``noop_elimination`` removes the
identity (no fuse_stack_split runs after it).

Given::

    %s: (2, 3, fp32) = stack(values=(%a, %b), axis=0)
    %p0: (1, 3, fp32), %p1: (1, 3, fp32) = split(x=%s, num_splits=2, axis=0)
    %y: (3, fp32) = squeeze(x=%p1, axes=[0])                  # %p0 is read by nothing

Result::

    %s_kept: (2, 3, fp32) = identity(x=%s)
    %p0, %p1 = split(x=%s_kept, num_splits=2, axis=0)
    %y: (3, fp32) = squeeze(x=%p1, axes=[0])
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "split-of-stack-not-all-squeezed"


def _squeezed_once(var: Var) -> bool:
    readers = var.child_ops
    return not var.consuming_blocks and len(readers) == 1 and readers[0].op_type == "squeeze"


class UnsqueezedSplitOfStack(RewritePattern[bool]):
    """``split(stack(...))`` with an output not read by exactly one squeeze → read via an identity."""

    op_types = ("split",)
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        if op.x.op is None or op.x.op.op_type != "stack":
            return None
        if all(_squeezed_once(out) for out in op.outputs):
            return None  # the pass checks the rest itself
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"split '{op.name}' of a stack: not every output is squeezed once, so it reads the stack via an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        kept = rewriter.emit(op, "identity", f"{op.x.name}_kept", x=op.x)
        inputs = {name: var for name, var in op.inputs.items() if name != "x"}
        parts = rewriter.emit(op, "split", op.name, x=kept, **inputs)
        rewriter.replace_op(op, parts if isinstance(parts, (list, tuple)) else [parts])


@register("guard_fuse_stack_split")
class GuardFuseStackSplit(PatternPass):
    """Hide each split of a stack whose outputs are not all squeezed once from ``common::fuse_stack_split``."""

    name = "webnn::guard_fuse_stack_split"

    def patterns(self) -> list[RewritePattern]:
        return [UnsqueezedSplitOfStack()]

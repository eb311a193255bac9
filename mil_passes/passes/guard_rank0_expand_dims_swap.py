"""webnn::guard_rank0_expand_dims_swap — a rank-0 result read in a nested block is left alone.

``common::rank0_expand_dims_swap`` rewrites a rank-0 ``add``/``sub``/``mul``/``real_div``/
``floor_div`` of a const that one ``expand_dims(axes=[0])`` reads, and rebuilds the result's other
readers in the op's own block. A reader inside a nested block (an op of a ``cond`` branch) makes
it raise ``KeyError`` (docs/coremltools-passes.md). This pass, right before every
``common::rank0_expand_dims_swap`` of ``mil_passes.pipeline()``, puts an ``identity`` between such
an op and its readers, so the pass does not match it; DEFAULT's last ``noop_elimination`` removes
the identity again.

Given::

    %d: (fp32) = sub(x=1.0, y=%total)
    %wide: (1, fp32) = expand_dims(x=%d, axes=[0])
    %chosen = cond(pred=%p) { identity(x=%d) } { ... }

Result::

    %d_op: (fp32) = sub(x=1.0, y=%total)
    %d: (fp32) = identity(x=%d_op)
    %wide: (1, fp32) = expand_dims(x=%d, axes=[0])
    %chosen = cond(pred=%p) { identity(x=%d) } { ... }
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register
from ._identity import read_through_identity

RULE = "rank0-result-read-in-nested-block"


class NestedReaderOfRank0(RewritePattern[bool]):
    """The pass's candidate with a reader in another block → the op behind an identity."""

    op_types = ("add", "sub", "mul", "real_div", "floor_div")
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        if op.x.rank != 0 or op.y.rank != 0 or (op.x.val is None) == (op.y.val is None):
            return None  # not the pass's candidate
        readers = op.outputs[0].child_ops
        if sum(reader.op_type == "expand_dims" for reader in readers) != 1:
            return None
        if all(reader.enclosing_block is op.enclosing_block for reader in readers):
            return None  # the pass rebuilds these safely
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"{op.op_type} '{op.name}' is read in a nested block: its readers read it through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        read_through_identity(op, rewriter)


@register("guard_rank0_expand_dims_swap")
class GuardRank0ExpandDimsSwap(PatternPass):
    """Hide each rank-0 result read in a nested block from ``common::rank0_expand_dims_swap``."""

    name = "webnn::guard_rank0_expand_dims_swap"

    def patterns(self) -> list[RewritePattern]:
        return [NestedReaderOfRank0()]

"""webnn::guard_fuse_matmul_weight_bias — ``matmul`` + ``add``/``sub`` is fused only where it is right.

``common::fuse_matmul_weight_bias`` turns ``matmul`` by a const weight followed by ``add`` or ``sub``
of a const into one ``linear``. It gets two of its cases wrong (docs/coremltools-passes.md):

- ``sub(x=b, y=matmul(x, W))`` (``b - x @ W``): it negates the bias and keeps the weight, which is
  ``x @ W - b``; every output changes sign;
- ``matmul(x=W, y=x)`` (the const first, ``W @ x``): it adds the bias along the second-to-last
  axis of the result (``linear``'s output, transposed back), where ``add`` broadcasts it along the
  last, and it checks the bias's length against the wrong dimension of ``W``;
- a matmul that is also a block output: it deletes the matmul anyway (``ValueError``).

This pass, right before ``common::fuse_matmul_weight_bias`` in ``mil_passes.pipeline()``, reads
such a matmul through an ``identity``, so the pass does not match it; DEFAULT's
``noop_elimination`` after it removes the identity (no fuse_matmul_weight_bias runs after that).
``x @ W + b`` and ``x @ W - b`` are left to the pass, which fuses them right.

Given::

    %y: (2, 2, fp32) = matmul(x=%x, y=%W)
    %out: (2, 2, fp32) = sub(x=%b, y=%y)

Result::

    %y_op: (2, 2, fp32) = matmul(x=%x, y=%W)
    %y: (2, 2, fp32) = identity(x=%y_op)
    %out: (2, 2, fp32) = sub(x=%b, y=%y)
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register
from ._identity import read_through_identity

RULE = "matmul-bias-misfused"


class MisfusedMatmulBias(RewritePattern[str]):
    """A matmul the pass would fuse wrongly with its ``add``/``sub`` → the matmul behind an identity."""

    op_types = ("matmul",)
    rule = RULE

    def match(self, op: Operation) -> str | None:
        out = op.outputs[0]
        readers = out.child_ops
        if len(readers) != 1 or readers[0].op_type not in ("add", "sub"):
            return None
        bias_op = readers[0]
        if op.x.val is None and op.y.val is None:
            return None  # a dynamic matmul: the pass leaves it
        if bias_op.x.val is None and bias_op.y.val is None:
            return None  # a dynamic add: the pass leaves it
        if out.consuming_blocks:
            return "the matmul is also a block output, which the pass deletes"
        if op.x.val is not None:
            return "the const is the matmul's first operand"
        if bias_op.op_type == "sub" and bias_op.y is out:
            return "the matmul is subtracted from the const"
        return None

    def describe(self, op: Operation, match: str) -> str:
        return f"matmul '{op.name}' would be fused with a wrong bias ({match}): its reader reads it through an identity"

    def rewrite(self, op: Operation, match: str, rewriter: Rewriter) -> None:
        read_through_identity(op, rewriter)


@register("guard_fuse_matmul_weight_bias")
class GuardFuseMatmulWeightBias(PatternPass):
    """Hide each matmul that ``common::fuse_matmul_weight_bias`` would fuse wrongly."""

    name = "webnn::guard_fuse_matmul_weight_bias"

    def patterns(self) -> list[RewritePattern]:
        return [MisfusedMatmulBias()]

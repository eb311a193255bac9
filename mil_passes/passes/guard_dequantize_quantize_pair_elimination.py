"""webnn::guard_dequantize_quantize_pair_elimination — a round trip to another integer dtype is kept.

``common::dequantize_quantize_pair_elimination`` replaces ``quantize(dequantize(q))`` by ``q`` when
scale, zero point and axis agree, without comparing the ``quantize``'s ``output_dtype`` with ``q``'s
dtype: an int8 ``q`` requantized to uint8 becomes the int8 ``q`` itself (the output's dtype changes,
and the negatives that uint8 clips to 0 keep their values; found by ``--pipeline mil_passes``, after
``nullify_redundant_quantization_zero_point`` dropped both zero points; docs/coremltools-passes.md).
This pass, right before the pass in ``mil_passes.pipeline()``, reads the ``dequantize`` of such a
pair through an ``identity``, so the pair no longer matches; DEFAULT's next ``noop_elimination``
removes the identity.

Given::

    %d: (4, fp32) = dequantize(input=%q, scale=0.1)          # %q: (4, int8)
    %t: (4, uint8) = quantize(input=%d, scale=0.1, output_dtype="uint8")

Result::

    %d: (4, fp32) = dequantize(input=%q, scale=0.1)
    %d_kept: (4, fp32) = identity(x=%d)
    %t: (4, uint8) = quantize(input=%d_kept, scale=0.1, output_dtype="uint8")
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, types

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "requantize-to-another-dtype"


class RequantizeToAnotherDtype(RewritePattern[bool]):
    """``quantize(dequantize(q))`` to another dtype than q's → the dequantize read via an identity."""

    op_types = ("quantize",)
    rule = RULE

    def match(self, op: Operation) -> bool | None:
        dequantize = op.input.op
        if dequantize is None or dequantize.op_type != "dequantize":
            return None
        if types.builtin_to_string(dequantize.input.dtype) == op.output_dtype.val:
            return None
        return True

    def describe(self, op: Operation, match: bool) -> str:
        return f"quantize '{op.name}' requantizes to {op.output_dtype.val}: it reads its dequantize through an identity"

    def rewrite(self, op: Operation, match: bool, rewriter: Rewriter) -> None:
        kept = rewriter.emit(op, "identity", f"{op.input.name}_kept", x=op.input)
        out = op.outputs[0]
        inputs = {**dict(op.inputs), "input": kept}
        rewriter.replace(out, rewriter.emit(op, "quantize", out.name, **inputs))


@register("guard_dequantize_quantize_pair_elimination")
class GuardDequantizeQuantizePairElimination(PatternPass):
    """Keep each dequantize → quantize round trip that changes the integer dtype."""

    name = "webnn::guard_dequantize_quantize_pair_elimination"

    def patterns(self) -> list[RewritePattern]:
        return [RequantizeToAnotherDtype()]

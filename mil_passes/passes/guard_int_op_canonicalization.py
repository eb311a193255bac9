"""webnn::guard_int_op_canonicalization — no requantization across a reshape is dropped.

``common::int_op_canonicalization`` replaces ``quantize(reshape(dequantize(q)))`` by
``reshape(q)`` without checking that the ``quantize`` has the ``dequantize``'s scale, zero point
and dtype: int8 values quantized at scale 0.5 and requantized at 0.25 should double, and come out
unchanged. This pass, right before every ``common::int_op_canonicalization`` of
``mil_passes.pipeline()``, puts an ``identity`` between such a reshape and its ``quantize``: the
pass matches only a reshape whose one reader is a ``quantize``, so it leaves the chain alone.
DEFAULT runs int_op_canonicalization once, early; its ``noop_elimination`` removes the identity
afterwards (and the backend does not run the pass again).

Given::

    %real: (2, 2, fp32) = dequantize(input=%q, scale=0.5)          # %q: (2, 2, int8)
    %flat: (4, fp32) = reshape(x=%real, shape=[4])
    %out: (4, int8) = quantize(input=%flat, scale=0.25, output_dtype="int8")

Result::

    %real: (2, 2, fp32) = dequantize(input=%q, scale=0.5)
    %flat: (4, fp32) = reshape(x=%real, shape=[4])                 # rebuilt, same name
    %flat_kept: (4, fp32) = identity(x=%flat)
    %out: (4, int8) = quantize(input=%flat_kept, scale=0.25, output_dtype="int8")

The chain is left to the pass (its rewrite is then exact) only when both ends are per-tensor
(one scale, one zero point: a reshape moves elements between channels) with equal scale, zero
point and integer dtype.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Refusal, Rewriter, RewritePattern
from . import register

RULE = "requantization-across-reshape"


def _per_tensor(var: Var | None) -> np.ndarray | None:
    """The single value of a const scale / zero point (None: absent), or raises ValueError."""
    if var is None:
        return None
    value = np.asarray(var.val)
    if value.size != 1:
        raise ValueError("per-axis")
    return value.reshape(())


def same_quantization(dequantize: Operation, quantize: Operation) -> bool:
    """``quantize(dequantize(q))`` gives ``q`` back, whatever reshape sits between them."""
    if dequantize.input.dtype != quantize.outputs[0].dtype:
        return False
    try:
        scales = [_per_tensor(op.scale) for op in (dequantize, quantize)]
        zero_points = [_per_tensor(getattr(op, "zero_point", None)) for op in (dequantize, quantize)]
    except ValueError:
        return False
    if any(scale is None for scale in scales) or scales[0] != scales[1]:
        return False
    zero = [0 if z is None else int(z) for z in zero_points]
    return zero[0] == zero[1]


class RequantizedReshape(RewritePattern[Operation]):
    """``quantize(reshape(dequantize(q)))`` with other parameters → an identity before the quantize."""

    op_types = ("reshape",)
    rule = RULE

    def match(self, op: Operation) -> Operation | Refusal | None:
        dequantize = op.x.op
        readers = op.outputs[0].child_ops
        if dequantize is None or dequantize.op_type != "dequantize" or len(readers) != 1:
            return None
        quantize = readers[0]
        if quantize.op_type != "quantize" or op.outputs[0].consuming_blocks:
            return None  # not the pass's pattern
        if same_quantization(dequantize, quantize):
            return None  # the pass's rewrite is exact here
        return quantize

    def describe(self, op: Operation, match: Operation) -> str:
        return (
            f"reshape '{op.name}' sits between a dequantize and quantize '{match.name}' of other parameters: "
            "an identity keeps common::int_op_canonicalization from dropping the requantization"
        )

    def rewrite(self, op: Operation, match: Operation, rewriter: Rewriter) -> None:
        out = op.outputs[0]
        reshaped = rewriter.emit(op, "reshape", out.name, x=op.x, shape=op.shape)
        rewriter.replace(out, rewriter.emit(op, "identity", f"{out.name}_kept", x=reshaped))


@register("guard_int_op_canonicalization")
class GuardIntOpCanonicalization(PatternPass):
    """Keep each requantization across a reshape from ``common::int_op_canonicalization``."""

    name = "webnn::guard_int_op_canonicalization"

    def patterns(self) -> list[RewritePattern]:
        return [RequantizedReshape()]

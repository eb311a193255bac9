"""webnn::guard_distributive_quantized_binary_op_scale_normalization — a rescaling that moves an integer is refused.

``common::distributive_quantized_binary_op_scale_normalization`` rewrites
``quantize(dequantize(x, s_x) ± dequantize(y, s_y), s_z)`` (a ``relu`` may follow the ``add``/``sub``)
with the scales ``s_x / s_y``, ``1`` and ``s_z / s_y``. The two are equal in real numbers, not in
floating point: each op rounds (``dequantize``: ``(q - zp) * scale`` to its fp dtype; ``add``: to its
dtype; ``quantize``: ``round_half_even(z / scale) + zp``, clipped), and the divided scales round too,
so a sum can land on a rounding tie in one program and not in the other, and the int8 output
changes by 1: at ``s_x = 0.25, s_y = 0.1, s_z = 0.1``, ``x = -101, y = 125`` gives
``-25.25 + 12.5000002 = -12.7499998`` → ``-127.499998`` → -127 as written, and after the pass
``-252.5 + 125 = -127.5`` → -128 (ties to even; docs/coremltools-passes.md). ``quantize`` rounds
its exact quotient; a different integer is a different value, not a precision the pass declares.

The inputs of such a pattern are 8-bit integers: 256 × 256 pairs per pair of quantization
parameters. This pass, right before the pass in ``mil_passes.pipeline()``, computes both programs'
outputs for every pair (with the scales the pass would write, each op rounded to its declared dtype
as ``mil_passes.reference`` computes it) and, where any output differs, reads the ``add``/``sub``
through an ``identity`` so that the pass does not match it (DEFAULT's next ``noop_elimination``
removes the identity). Patterns where every pair agrees are left to the pass.

Given::

    %a: (4, fp32) = dequantize(input=%x, scale=0.25, zero_point=0)
    %b: (4, fp32) = dequantize(input=%y, scale=0.1, zero_point=0)
    %s: (4, fp32) = add(x=%a, y=%b)
    %z: (4, int8) = quantize(input=%s, scale=0.1, zero_point=0, output_dtype="int8")

Result::

    %s_op: (4, fp32) = add(x=%a, y=%b)
    %s: (4, fp32) = identity(x=%s_op)
    %z: (4, int8) = quantize(input=%s, scale=0.1, zero_point=0, output_dtype="int8")
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.passes.defs.optimize_quantization import (
    distributive_quantized_binary_op_scale_normalization as CoremltoolsPass,
)

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register
from ._identity import read_through_identity

RULE = "inexact-scale-normalization"
# pairs of inputs times parameter combinations checked per match, at most (else refused unchecked)
MAX_CHECKED = 1 << 22
_EIGHT_BITS = {types.int8: np.arange(-128, 128), types.uint8: np.arange(0, 256)}


@dataclass(frozen=True)
class Pattern:
    """The ops the pass would rewrite (``tail``: the relu, or the binary op itself)."""

    dequantize_x: Operation
    dequantize_y: Operation
    tail: Operation
    quantize_z: Operation


def _only_reader(op: Operation, op_type: str) -> Operation | None:
    readers = op.outputs[0].child_ops
    return readers[0] if len(readers) == 1 and readers[0].op_type == op_type else None


def match_pattern(op: Operation) -> Pattern | None:
    """The pass's own match (``match_pattern``): dequantize ± dequantize (→ relu) → quantize, no
    intermediate a block output."""
    dequantize_x, dequantize_y = op.x.op, op.y.op
    if any(d is None or d.op_type != "dequantize" for d in (dequantize_x, dequantize_y)):
        return None
    tail = _only_reader(op, "relu") or op
    quantize_z = _only_reader(tail, "quantize")
    if quantize_z is None:
        return None
    outputs = op.enclosing_block.outputs
    if any(v in outputs for d in (dequantize_x, dequantize_y, op, tail) for v in d.outputs):
        return None
    return Pattern(dequantize_x, dequantize_y, tail, quantize_z)


def _params(op: Operation) -> tuple[np.ndarray, np.ndarray]:
    scale = np.asarray(op.scale.val)
    zero_point = np.zeros(1) if op.zero_point is None else np.asarray(op.zero_point.val, np.float64)
    return scale, zero_point


def _flat(op: Operation, scale=None) -> list[tuple[float, float]]:
    """Each channel's (scale, zero point) of a per-tensor or per-axis ``op`` (``scale``: another
    scale in its place, as the pass writes it), as float64 numbers of the stored values."""
    own, zero_point = _params(op)
    scale = own if scale is None else np.asarray(scale).astype(own.dtype)
    size = max(scale.size, zero_point.size)
    scales = np.broadcast_to(scale.reshape(-1).astype(np.float64), size)
    return list(zip(scales.tolist(), np.broadcast_to(zero_point.reshape(-1), size).tolist()))


def _outputs(pattern: Pattern, scales, params, grid_x, grid_y) -> np.ndarray:
    """The quantized outputs for every input pair, as each op's formula rounds them."""
    (s_x, zp_x), (s_y, zp_y), (s_z, zp_z) = zip(scales, params)
    d_x = types.nptype_from_builtin(pattern.dequantize_x.outputs[0].dtype)
    d_y = types.nptype_from_builtin(pattern.dequantize_y.outputs[0].dtype)
    d_op = types.nptype_from_builtin(pattern.tail.outputs[0].dtype)
    with np.errstate(all="ignore"):
        a = (np.float64(s_x) * (grid_x - zp_x)).astype(d_x)
        b = (np.float64(s_y) * (grid_y - zp_y)).astype(d_y)
        binary = pattern.tail if pattern.tail.op_type != "relu" else pattern.tail.x.op
        z = (np.add(a, b) if binary.op_type == "add" else np.subtract(a, b)).astype(d_op)
        if pattern.tail.op_type == "relu":
            z = np.maximum(z, d_op(0))
        q = np.rint(z.astype(np.float64) / np.float64(s_z)) + zp_z
    low, high = (-128, 127) if pattern.quantize_z.output_dtype.val == "int8" else (0, 255)
    return np.clip(q, low, high)


def inexact(pattern: Pattern) -> str | None:
    """Why the pass's rewrite would change an output (or cannot be checked); None if it is exact."""
    normalize = CoremltoolsPass()
    dequantize_x, dequantize_y, quantize_z = pattern.dequantize_x, pattern.dequantize_y, pattern.quantize_z
    new_s_x, new_s_z = normalize.try_to_divide(dequantize_x, dequantize_y, quantize_z)
    if new_s_x is None and new_s_z is None:  # the pass swaps the operands' roles, then tries again
        dequantize_x, dequantize_y = dequantize_y, dequantize_x
        new_s_x, new_s_z = normalize.try_to_divide(dequantize_x, dequantize_y, quantize_z)
        if new_s_x is None and new_s_z is None:
            return None  # the pass leaves it
    if pattern.dequantize_x is pattern.dequantize_y:
        return "both operands are one dequantize"
    grids = [_EIGHT_BITS.get(d.input.dtype) for d in (pattern.dequantize_x, pattern.dequantize_y)]
    if grids[0] is None or grids[1] is None:
        return "an input is not 8-bit"
    grid_x, grid_y = np.meshgrid(grids[0], grids[1], indexing="ij")
    # channel by channel, each (scale, zero point) and what the pass makes of it (y's scale: 1)
    rescaled = {
        dequantize_x: dict(zip(_flat(dequantize_x), _flat(dequantize_x, new_s_x))),
        dequantize_y: {pair: (1.0, pair[1]) for pair in _flat(dequantize_y)},
        quantize_z: dict(zip(_flat(quantize_z), _flat(quantize_z, new_s_z))),
    }
    sides = [rescaled[pattern.dequantize_x], rescaled[pattern.dequantize_y], rescaled[quantize_z]]
    combos = len(sides[0]) * len(sides[1]) * len(sides[2])
    if combos * grid_x.size > MAX_CHECKED:
        return f"{combos} parameter combinations are too many to check"
    for px, nx in sides[0].items():
        for py, ny in sides[1].items():
            for pz, nz in sides[2].items():
                before = _outputs(pattern, (px[0], py[0], pz[0]), (px[1], py[1], pz[1]), grid_x, grid_y)
                after = _outputs(pattern, (nx[0], ny[0], nz[0]), (nx[1], ny[1], nz[1]), grid_x, grid_y)
                if not np.array_equal(before, after):
                    i, j = np.argwhere(before != after)[0]
                    return f"inputs ({grid_x[i, j]}, {grid_y[i, j]}) give {before[i, j]:g}, rescaled {after[i, j]:g}"
    return None


class InexactScaleNormalization(RewritePattern[str]):
    """A quantized add/sub whose rescaling would change an output → behind an identity."""

    op_types = ("add", "sub")
    rule = RULE

    def match(self, op: Operation) -> str | None:
        pattern = match_pattern(op)
        return None if pattern is None else inexact(pattern)

    def describe(self, op: Operation, match: str) -> str:
        return f"{op.op_type} '{op.name}': rescaling its quantized operands changes an output ({match})"

    def rewrite(self, op: Operation, match: str, rewriter: Rewriter) -> None:
        read_through_identity(op, rewriter)


@register("guard_distributive_quantized_binary_op_scale_normalization")
class GuardDistributiveQuantizedBinaryOpScaleNormalization(PatternPass):
    """Hide each quantized add/sub whose rescaling would change an integer output."""

    name = "webnn::guard_distributive_quantized_binary_op_scale_normalization"

    def patterns(self) -> list[RewritePattern]:
        return [InexactScaleNormalization()]

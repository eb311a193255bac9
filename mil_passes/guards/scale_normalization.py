"""The guard of ``common::distributive_quantized_binary_op_scale_normalization`` (its match checks
every pair of 8-bit inputs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.passes.defs.optimize_quantization import (
    distributive_quantized_binary_op_scale_normalization as CoremltoolsPass,
)

from .guard import Guard, GuardRule

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


def inexact_rescaling(op: Operation) -> str | None:
    """``common::distributive_quantized_binary_op_scale_normalization`` rewrites
    ``quantize(dequantize(x, s_x) ± dequantize(y, s_y), s_z)`` (a ``relu`` may follow) with the
    scales ``s_x / s_y``, ``1`` and ``s_z / s_y``: equal in real numbers, not in floating point, so
    a sum can land on a rounding tie in one program and not the other and an int8 output moves by
    1 (``s_x = 0.25, s_y = s_z = 0.1``, ``x = -101, y = 125``: -127 as written, -128 after). The
    guard computes both programs' outputs for every pair of 8-bit inputs (each op rounded to its
    declared dtype) and reads the ``add``/``sub`` through an ``identity`` where any differs; the
    match is why. Patterns where every pair agrees are left to the pass."""
    pattern = match_pattern(op)
    return None if pattern is None else inexact(pattern)


DISTRIBUTIVE_QUANTIZED_BINARY_OP_SCALE_NORMALIZATION = Guard(
    "common::distributive_quantized_binary_op_scale_normalization", (GuardRule(("add", "sub"), inexact_rescaling),)
)

"""The predicates of the op rules: each looks at one non-const op and returns a Hit, None or UNKNOWN.

Thresholds per chip family (H13 = M1/A14, H14 = M2/A15, …) are ane-guide's appendix A
(sbryngelson/ane-guide), re-labelled to the families of :mod:`mil_passes.lint.chips`.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from .facts import AXIS_NAMES, OpView, axis_value, dtype_of, is_const, only_leaves, rank_of, static_shape
from .rule import UNKNOWN, Hit, Verdict

H13, H14, H15, H16 = 13, 14, 15, 16
FROM_H16 = frozenset({16, 17, 18})
UP_TO_H15 = frozenset({13, 14, 15})
FROM_H14 = frozenset({14, 15, 16, 17, 18})

# Inputs that are sizes, axes or positions rather than data: an int32 there is an index, which the
# int32 rule leaves to the gather, slice and shape rules.
INDEX_INPUTS = frozenset(
    {"indices", "begin", "end", "stride", "shape", "reps", "axes", "axis", "size", "k", "perm", "pad", "split_sizes"}
    | {"num_splits", "begin_mask", "end_mask", "squeeze_mask", "crop_height", "crop_width", "output_shape", "lengths"}
)


def fp32_compute(op: Operation, seen: OpView) -> Verdict:
    if op.op_type == "cast":
        out = op.outputs[0]
        if dtype_of(out) == types.fp32 and not only_leaves(out):
            return Hit("casts to fp32")
        return None  # the casts at an fp16 model's edges: fp32 inputs in, fp32 outputs out
    if types.fp32 in seen.output_dtypes:
        return Hit("computes in fp32")
    if types.fp32 in seen.input_dtypes:
        return Hit("reads fp32 data")
    return None


def int32_compute(op: Operation, seen: OpView) -> Verdict:
    if op.op_type == "cast":
        return Hit("casts to int32") if dtype_of(op.outputs[0]) == types.int32 else None
    if types.int32 not in seen.input_dtypes:
        return None
    data = any(f.dtype == types.int32 and name not in INDEX_INPUTS for name, _, f in seen.inputs)
    return Hit("computes on int32 data") if data else None


def rank_over_5(op: Operation, seen: OpView) -> Verdict:
    rank = seen.max_rank
    return Hit(f"makes a rank-{rank} tensor") if rank > 5 else None


def rank5_matmul(op: Operation, seen: OpView) -> Verdict:
    ranks = [rank_of(v) for v in ((op.x, op.y) if op.op_type == "matmul" else (op.x,))]
    return Hit(f"multiplies rank-{max(r for r in ranks if r)} operands") if any(r and r >= 5 for r in ranks) else None


def dim_too_large(op: Operation, seen: OpView) -> Verdict:
    if seen.max_size <= 16384:
        return None
    worst: tuple[frozenset[int], str] | None = None
    for _, facts in seen.outputs:
        shape = facts.static
        if shape is None or len(shape) > 5 or max(shape, default=0) <= 16384:
            continue
        for back, size in enumerate(reversed(shape)):
            axis = AXIS_NAMES[back]
            if axis in ("C", "N"):
                families = frozenset({13, 14, 15, 16, 17, 18}) if size > 65536 else frozenset()
            else:
                families = (
                    frozenset({13, 14, 15, 16, 17, 18}) if size > 65536 else UP_TO_H15 if size > 16384 else frozenset()
                )
            if families and (worst is None or len(families) > len(worst[0])):
                worst = families, f"has {axis} = {size} (axis {len(shape) - 1 - back})"
    return Hit(worst[1], worst[0]) if worst else None


def gather(op: Operation, seen: OpView) -> Verdict:
    indices = op.indices
    return Hit("gathers by constant indices" if is_const(indices) else "gathers by run-time indices")


def any_op(op: Operation, seen: OpView) -> Verdict:
    return Hit(f"is a {op.op_type}")


def texture_h13(op: Operation) -> Verdict:
    return Hit(f"is a {op.op_type} (texture engine, M2 on)", frozenset({H13}))


def trig_before_h15(op: Operation) -> Verdict:
    return Hit(f"is a {op.op_type} (native from M3)", frozenset({H13, H14}))


def reflect_pad(op: Operation) -> Verdict:
    mode = op.mode.val if op.mode is not None else "constant"
    return Hit(f"pads in {mode} mode", frozenset({H13})) if mode in ("reflect", "symmetric") else None


def conv_kernel(op: Operation, seen: OpView) -> Verdict:
    if dtype_of(op.x) != types.fp16:
        return None  # fp32 convs are off the Neural Engine anyway (ane-fp32-compute)
    shape = static_shape(op.weight)
    if shape is None or len(shape) < 3:
        return UNKNOWN if shape is None else None
    kernel = shape[2:]
    width, height = kernel[-1], kernel[-2] if len(kernel) >= 2 else 1
    families: set[int] = set()
    if width > 13:
        families.add(H13)
    if width > 16:
        families |= FROM_H14
    if height > 29:
        families.add(H13)
    if height > 32:
        families |= FROM_H14
    if len(kernel) == 3 and kernel[0] > 16:
        families |= {13, 14, 15, 16, 17, 18}
    if not families:
        return None
    return Hit(f"has an fp16 kernel of {'x'.join(map(str, kernel))}", frozenset(families))


def argminmax_axis(op: Operation, seen: OpView) -> Verdict:
    shape = getattr(op.x, "shape", None)
    axis = axis_value(op, default=-1)
    if shape is None or axis is None or not -len(shape) <= axis < len(shape):
        return UNKNOWN
    size = shape[axis]
    if is_symbolic(size):
        return UNKNOWN
    return Hit(f"reduces an axis of {int(size)} (over 2048)") if int(size) > 2048 else None


def random_uniform(op: Operation) -> Verdict:
    return Hit("draws uniform random numbers (native from M3)", frozenset({H13, H14}))


def texture(op: Operation, seen: OpView) -> Verdict:
    """The texture-engine ops (M2 on), reflect padding (M2 on), sin/cos and random_uniform (M3 on)."""
    if op.op_type == "pad":
        return reflect_pad(op)
    if op.op_type in ("sin", "cos"):
        return trig_before_h15(op)
    if op.op_type == "random_uniform":
        return random_uniform(op)
    return texture_h13(op)


TEXTURE_OPS = ("crop_resize", "resample", "affine", "pad", "sin", "cos", "random_uniform")


def log_of_softmax(op: Operation, seen: OpView) -> Verdict:
    """A ``log`` of an fp16 ``softmax`` (torch's log_softmax as coremltools converts it)."""
    producer = op.x.op
    if producer is None or producer.op_type != "softmax" or dtype_of(op.x) != types.fp16:
        return None
    return Hit(f"takes the log of fp16 softmax '{producer.name}'")


def unequal_deconv_strides(op: Operation, seen: OpView) -> Verdict:
    strides = op.strides.val if getattr(op, "strides", None) is not None else None
    if strides is None or len(strides) != 2 or strides[0] == strides[1]:
        return None
    return Hit(f"has unequal strides {list(map(int, strides))}")


def dynamic_weight_conv(op: Operation, seen: OpView) -> Verdict:
    if is_const(op.weight):
        return None
    shape = getattr(op.x, "shape", None)
    if not shape or is_symbolic(shape[0]):
        return UNKNOWN
    return Hit(f"convolves by run-time weights at batch {int(shape[0])}", frozenset({H13})) if shape[0] >= 2 else None


def small_attention(op: Operation, seen: OpView) -> Verdict:
    """An fp16 ``scaled_dot_product_attention`` of under 2M query elements (Core ML prefers the CPU)."""
    shape = static_shape(op.query)
    if shape is None or dtype_of(op.query) != types.fp16:
        return None
    elements = int(np.prod(shape))
    return Hit(f"attends over {elements:,} query elements (under 2M)") if elements < 2_000_000 else None


# -- -inf into softmax -----------------------------------------------------------------------------
FP16_MAX = 65504.0
# Ops an attention mask passes through on its way to softmax.
_MASK_PATH = frozenset(
    {"add", "sub", "mul", "select", "cast", "reshape", "expand_dims", "squeeze", "transpose", "slice_by_index"}
    | {"slice_by_size", "tile", "concat", "maximum", "minimum", "band_part", "identity", "real_div", "stack"}
)
_MASK_DEPTH = 8


def _overflowing_const(var) -> str | None:
    """The name of a const holding ±inf, or a magnitude fp16 cannot hold, else None."""
    if not is_const(var) or var.op.op_type != "const" or dtype_of(var) not in (types.fp16, types.fp32):
        return None
    value = np.asarray(var.val, dtype=np.float64)
    if value.size and (np.isinf(value).any() or (np.abs(value[np.isfinite(value)]) > FP16_MAX).any()):
        return var.op.name
    return None


def _overflow_upstream(var, depth: int = _MASK_DEPTH) -> str | None:
    seen: set[int] = set()
    stack = [(var, 0)]
    while stack:
        current, level = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        found = _overflowing_const(current)
        if found is not None:
            return found
        producer = current.op
        if producer is None or level >= depth or producer.op_type not in _MASK_PATH:
            continue
        stack.extend((v, level + 1) for _, v in _all_inputs(producer))
    return None


def _all_inputs(op: Operation):
    for name, value in op.inputs.items():
        for var in value if isinstance(value, (list, tuple)) else (value,):
            if dtype_of(var) is not None:
                yield name, var


def infinite_mask(op: Operation, seen: OpView) -> Verdict:
    sources = (
        [op.x] if op.op_type == "softmax" else [op.attn_mask] if getattr(op, "attn_mask", None) is not None else []
    )
    for var in sources:
        const = _overflow_upstream(var)
        if const is not None:
            return Hit(f"reads const '{const}', which is infinite at fp16")
    return None


def gather_nd_rank3(op: Operation, seen: OpView) -> Verdict:
    """A ``gather_nd`` whose output has rank 3 (a 2-D table indexed by ``[B, S]`` positions)."""
    return Hit("gathers a rank-3 result") if seen.max_rank == 3 else None


def _only_2s_and_3s(n: int) -> bool:
    for prime in (2, 3):
        while n % prime == 0:
            n //= prime
    return n == 1


def _strides(op: Operation) -> list[int] | None:
    strides = getattr(op, "strides", None)
    return None if strides is None or strides.val is None else [int(s) for s in strides.val]


def conv_stride(op: Operation, seen: OpView) -> Verdict:
    """Strides the Neural Engine maps with overhead: a factor other than 2 and 3, unequal strides both
    over 2, or a stride over 2 on a palettized kernel (``constexpr_lut_to_dense`` weights)."""
    strides = _strides(op)
    if not strides:
        return None
    palettized = op.weight.op is not None and op.weight.op.op_type == "constexpr_lut_to_dense"
    if palettized and max(strides) > 2:
        return Hit(f"has strides {strides} on a palettized kernel (over 2)")
    if any(not _only_2s_and_3s(s) for s in strides):
        return Hit(f"has strides {strides} (a factor other than 2 and 3)")
    if len(set(strides)) > 1 and min(strides) > 2:
        return Hit(f"has unequal strides {strides}, both over 2")
    return None


def pool_stride(op: Operation, seen: OpView) -> Verdict:
    """A pooling stride other than 1, 2 or 4."""
    strides = _strides(op)
    odd = [s for s in strides or () if s not in (1, 2, 4)]
    return Hit(f"has strides {strides} (other than 2 or 4)") if odd else None

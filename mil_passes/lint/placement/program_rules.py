"""The program rules: what the model's inputs, outputs, states and weights say of its placement."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Function, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ...ir import iter_ops
from ..dims import DimNames
from .facts import dtype_of, is_weight_op, static_shape
from .op_rules import NE_RULES
from .rule import APPLE, COST, ELSEWHERE, MEASURED, Hit, PlacementRule, ProgramHit, Source

GIB = 1 << 30
ALIGNMENT_BYTES = 64  # the Neural Engine pads the last axis of inputs and outputs to 64 bytes


def states(func: Function):
    return [(name, var) for name, var in func.inputs.items() if types.is_state(var.sym_type)]


def state_shape(var) -> tuple | None:
    wrapped = var.sym_type.wrapped_type()
    return tuple(wrapped.get_shape()) if types.is_tensor(wrapped) else None


def _state_ops(func: Function, state) -> tuple:
    return tuple(
        op
        for op in iter_ops(func)
        if (op.op_type == "read_state" and op.input is state)
        or (op.op_type == "coreml_update_state" and op.state is state)
    )


def state_width(func: Function, dims: DimNames) -> list[ProgramHit]:
    hits = []
    for name, var in states(func):
        shape = state_shape(var)
        if not shape or is_symbolic(shape[-1]) or int(shape[-1]) % 32 == 0:
            continue
        hits.append(
            ProgramHit("state", name, Hit(f"is {int(shape[-1])} wide (not a multiple of 32)"), _state_ops(func, var))
        )
    return hits


def range_shape(func: Function, dims: DimNames) -> list[ProgramHit]:
    hits = []
    for name, var in func.inputs.items():
        if types.is_state(var.sym_type) or name in dims.enumerated:
            continue
        flexible = [axis for axis, d in enumerate(getattr(var, "shape", ()) or ()) if is_symbolic(d)]
        if flexible:
            axes = ", ".join(str(a) for a in flexible)
            hits.append(ProgramHit("input", name, Hit(f"has a flexible (RangeDim) size on axis {axes}")))
    return hits


def _element_bytes(dtype) -> int:
    return 1 if dtype in (types.int8, types.uint8) else 2  # floats reach the Neural Engine as fp16


def last_axis_padding(func: Function, dims: DimNames) -> list[ProgramHit]:
    hits, seen = [], set()
    edges = [("input", n, v) for n, v in func.inputs.items() if not types.is_state(v.sym_type)]
    edges += [("output", v.name, v) for v in func.outputs]
    edges += [("state", n, v) for n, v in states(func)]
    for kind, label, var in edges:
        shape = state_shape(var) if types.is_state(var.sym_type) else static_shape(var)
        dtype = var.sym_type.wrapped_type().get_primitive() if types.is_state(var.sym_type) else dtype_of(var)
        if not shape or dtype is None or is_symbolic(shape[-1]) or label in seen:
            continue
        seen.add(label)
        last, size = int(shape[-1]), _element_bytes(dtype)
        if last * size < ALIGNMENT_BYTES:
            why = f"has a last axis of {last} ({last * size} bytes)"
            hits.append(ProgramHit(kind, label, Hit(why)))
    return hits


def weight_bytes(func: Function) -> int:
    """The bytes of every weight as loaded (decompressed)."""
    total = 0
    for op in iter_ops(func):
        if is_weight_op(op.op_type):
            for out in op.outputs:
                shape, dtype = static_shape(out), dtype_of(out)
                if shape is not None and dtype is not None:
                    total += int(np.prod(shape, dtype=np.int64)) * np.dtype(types.nptype_from_builtin(dtype)).itemsize
    return total


def model_size(func: Function, dims: DimNames) -> list[ProgramHit]:
    total = weight_bytes(func)
    if total <= GIB:
        return []
    return [ProgramHit("model", "", Hit(f"holds {total / GIB:.1f} GiB of weights (over 1 GiB)"))]


PROGRAM_RULES: tuple[PlacementRule, ...] = (
    PlacementRule(
        "ane-state-width",
        "an iOS 18 state whose last axis is not a multiple of 32",
        ELSEWHERE,
        (
            Source(
                "apple/coremltools#2631",
                MEASURED,
                'M4: "When w = 270, the model fails on ANE. When w = 256, it works perfectly"',
            ),
        ),
        "pad the state's last axis to a multiple of 32 and slice what you read",
        state_width,
        on_program=True,
        chips="M4 measured",
    ),
    PlacementRule(
        "ane-range-shape",
        "a model input with a flexible (RangeDim) size",
        ELSEWHERE,
        (
            Source(
                "https://developer.apple.com/forums/thread/724930",
                APPLE,
                "an Apple engineer: \"we currently only support running on the Neural Engine for the input's default "
                'shape. Other shapes will be run on either GPU or CPU"',
            ),
            Source(
                "https://apple.github.io/coremltools/docs-guides/source/flexible-inputs.html",
                APPLE,
                '"Use EnumeratedShapes for best performance"',
            ),
        ),
        "convert with ct.EnumeratedShapes (up to 128 shapes) or one function per shape",
        range_shape,
        severity_override="warning",  # the default shape still runs on the Neural Engine
        on_program=True,
        says="at any other than its default shape, Core ML runs the model on the CPU/GPU",
    ),
    PlacementRule(
        "ane-last-axis-padding",
        "a model input, output or state whose last axis holds fewer than 64 bytes (32 fp16 elements)",
        COST,
        (
            Source(
                NE_RULES,
                APPLE,
                '"A singleton last axis (dimension = 1) gets padded to 64 bytes, resulting in 32x memory cost at fp16"',
            ),
        ),
        "move a larger axis last (a transpose), or make the last axis at least 32 wide",
        last_axis_padding,
        on_program=True,
        says="the Neural Engine pads it to 64 bytes",
    ),
    PlacementRule(
        "ane-model-size",
        "weights over 1 GiB in one model",
        COST,
        (
            Source(
                "xhighhongo41/eeANE release 1.6.1",
                MEASURED,
                '"From macOS 27 on, the limit is 1 GiB … Every operation of the model simply runs on the CPU"',
            ),
        ),
        "split the model into chunks of ≤ 1 GiB of weights (one function or model each)",
        model_size,
        severity_override="warning",  # one measurement, on one macOS release
        on_program=True,
        says="from macOS 27 Core ML is reported to run every op of such a model on the CPU",
        chips="M2 measured (macOS 27)",
    ),
)

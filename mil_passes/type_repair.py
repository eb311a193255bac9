"""Where pymil's type inference is wrong, and the repair.

coremltools types a reshape's 0 target literally when x has run-time dims (a 0 copies a dim of
x), and ``select`` without broadcasting its ``cond``. :func:`repair_types` gives such ops the type
they compute and infers again every op that reads them. Used on a program loaded from a package
(``package.declared_types``, ``reference.predict``) and by ``webnn::fold_shape_ops`` after
``common::add_fp16_cast`` re-created its reshapes.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
from coremltools.converters.mil.mil import Block, Operation, Program, Var, types
from coremltools.converters.mil.mil.ops.defs._utils import broadcast_shapes
from coremltools.converters.mil.mil.types.symbolic import any_variadic

from .semantics import reshape_zeros


def reshape_output_shape(op: Operation) -> tuple | None:
    """The shape a reshape with a constant target computes, its zeros resolved by the op's opset
    rule (:func:`~mil_passes.semantics.reshape_zeros`); None when pymil's own shape needs no
    correction or the target is not known. pymil resolves zeros only when every input dim is a
    constant."""
    target, x_shape = op.shape.val, op.x.shape
    if target is None or x_shape is None or any_variadic(x_shape):
        return None
    target = [int(t) for t in np.asarray(target).ravel()]
    current = list(op.outputs[0].shape)
    if 0 not in target or len(current) != len(target):
        return None
    try:
        copied = reshape_zeros(op.opset_version, list(x_shape), target)
    except ValueError:
        return None
    resolved = [c if t == 0 else d for t, c, d in zip(target, copied, current)]
    return tuple(resolved) if resolved != current else None


def select_output_shape(op: Operation) -> tuple | None:
    """The shape of ``select``: ``cond``, ``a`` and ``b`` broadcast together. pymil broadcasts
    only ``a`` and ``b`` (``select(cond=[2, 2], a=1.0, b=0.0)`` gets a scalar type)."""
    shapes = [var.shape if types.is_tensor(var.sym_type) else () for var in (op.cond, op.a, op.b)]
    if any(any_variadic(shape) for shape in shapes):
        return None
    try:
        shape = tuple(broadcast_shapes(broadcast_shapes(shapes[0], shapes[1]), shapes[2]))
    except ValueError:
        return None
    current = op.outputs[0].shape if types.is_tensor(op.outputs[0].sym_type) else ()
    return shape if shape != tuple(current) else None


# op type -> (the output shape pymil should have inferred, or None; why pymil did not)
INFERENCE_HOLES = {
    "reshape": (
        reshape_output_shape,
        "coremltools' own inference leaves a reshape's 0 unresolved against a run-time dim",
    ),
    "select": (select_output_shape, "coremltools' own inference ignores the shape of select's cond"),
}


def set_shape(op: Operation, shape: tuple) -> None:
    """Write ``shape`` into the type of ``op``'s first output (kept until it is inferred again)."""
    out = op.outputs[0]
    out._sym_type = types.tensor(out.dtype, shape) if shape else out.dtype


def repair_types(
    prog: Program,
    holes: dict = INFERENCE_HOLES,
    apply: Callable[[Operation, tuple], None] = set_shape,
) -> list[Operation]:
    """Give the ops of ``holes`` whose type pymil got wrong their computed type (through
    ``apply``), and re-infer every op that reads a var whose type or value changed (nested blocks
    first, in order: a ``shape`` of a mistyped var has a wrong value); return the ops repaired."""
    repaired: list[Operation] = []
    for func in prog.functions.values():
        _repair_block(func, set(), repaired, holes, apply)
    return repaired


def _input_vars(op: Operation) -> Iterator[Var]:
    for value in op.inputs.values():
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def _repair_block(block: Block, changed: set[Var], repaired: list[Operation], holes: dict, apply) -> None:
    for op in list(block.operations):
        for nested in op.blocks:
            _repair_block(nested, changed, repaired, holes, apply)
        reads_changed = any(var in changed for var in _input_vars(op)) or any(
            out in changed for nested in op.blocks for out in nested.outputs
        )
        if reads_changed:
            before = [(out.sym_type, out.sym_val) for out in op.outputs]
            op.type_value_inference(overwrite_output=True)
            changed.update(
                out
                for out, (sym_type, sym_val) in zip(op.outputs, before)
                if out.sym_type != sym_type or not _same_value(out.sym_val, sym_val)
            )
        hole = holes.get(op.op_type)
        shape = hole[0](op) if hole is not None else None
        if shape is not None:
            apply(op, shape)
            changed.add(op.outputs[0])
            repaired.append(op)


def _same_value(a, b) -> bool:
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.all(a == b))

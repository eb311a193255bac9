"""``webnn::cast_before_data_movement``: a narrowing cast of int32 data moves above data movement.

Pipeline slot: after ``common::add_fp16_cast`` (only then is an int32 mask cast to fp16) and the
``const_elimination`` after it; lint rule ``ane-int32-compute``.

Given (BERT's int32 attention mask, expanded before it is cast)::

    %m3 = expand_dims(x=%attention_mask, axes=[1])              # int32
    %m4 = expand_dims(x=%m3, axes=[2])                            # int32
    %m4_fp16 = cast(x=%m4, dtype="fp16")

Result::

    %attention_mask_fp16 = cast(x=%attention_mask, dtype="fp16")
    %m3 = expand_dims(x=%attention_mask_fp16, axes=[1])
    %m4_fp16 = expand_dims(x=%m3, axes=[2])

Core ML runs int32 ops off the Neural Engine (Apple's ``neural_engine_rules.md``: "Supported
dtypes: fp16, int8, int16"); the data movement in fp16 runs on it. Exact, bit for bit: a cast acts
on each element alone, and ``expand_dims``, ``reshape``, ``squeeze``, ``transpose``, ``tile``,
``slice_by_index``, ``slice_by_size`` and ``concat`` only move elements, so casting before or
after gives the same elements in the same places. Only a cast from int32 to a type the Neural
Engine runs (fp16, int16, uint16, int8, uint8, bool), of data movement that nothing else reads
(else it would run twice); a ``concat`` with at most one input computed at run time (the other
casts fold).
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var, types

from ..ir import is_used
from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="cast_before_data_movement",
    summary="Move every narrowing cast of int32 data movement above it.",
    slots=(
        Slot(
            120,
            "common::canonicalize_inplace_pattern",
            "after add_fp16_cast and the cast_optimization after it: only then does an int32 mask meet one cast to "
            "fp16 (add_fp16_cast leaves int32 -> fp32 -> fp16 pairs); the backend's const_elimination folds the casts "
            "of a concat's constant pieces",
        ),
    ),
    fixes=("ane-int32-compute",),
)

# Data movement: ops that only place elements; each moved op's data input.
MOVES: dict[str, str] = {
    op_type: "x"
    for op_type in ("expand_dims", "reshape", "squeeze", "transpose", "tile", "slice_by_index", "slice_by_size")
}
MOVES["concat"] = "values"
NARROW = frozenset({"fp16", "int16", "uint16", "int8", "uint8", "bool"})


class CastOfMovedInt32(RewritePattern[Operation]):
    """``cast(move(x: int32), narrow)`` → ``move(cast(x, narrow))``."""

    op_types = ("cast",)
    rule = "ane-int32-compute"
    cause = "casts int32 data movement: the cast moves before it, which then runs on the Neural Engine"

    def match(self, op: Operation) -> Operation | Declined | None:
        moved = op.x.op
        if moved is None or moved.op_type not in MOVES or op.x.dtype != types.int32:
            return None
        if op.dtype.val not in NARROW:
            return None  # to fp32 or int32: the moved op would not run on the Neural Engine either
        domain = getattr(moved.input_spec.input_types[MOVES[moved.op_type]], "type_domain", None)
        if domain is not None and types.string_to_builtin(op.dtype.val) not in domain:
            return Declined(op, f"{moved.op_type} takes no {op.dtype.val} in this opset")
        if any(is_used(out) for out in moved.outputs if out is not op.x) or len(op.x.child_ops) > 1:
            return Declined(op, f"its input, {moved.op_type} '{moved.name}', has other readers: it would run twice")
        if op.x in op.enclosing_block.outputs:
            return Declined(op, f"{moved.op_type} '{moved.name}' is also an output")
        if moved.op_type == "concat" and sum(v.val is None for v in moved.values) > 1:
            return Declined(op, "the concat joins several values computed at run time: a cast of each would stay")
        return moved

    def detail(self, op: Operation, moved: Operation) -> str:
        return f"to {op.dtype.val} of int32 {moved.op_type} '{moved.name}'"

    def rewrite(self, op: Operation, moved: Operation, rewriter: Rewriter) -> Var:
        dtype, key = op.dtype.val, MOVES[moved.op_type]
        inputs = {name: value for name, value in moved.inputs.items()}
        if key == "values":
            inputs[key] = tuple(
                rewriter.emit(moved, "cast", f"{v.name}_to_{dtype}", x=v, dtype=dtype) for v in moved.values
            )
        else:
            inputs[key] = rewriter.emit(moved, "cast", f"{moved.x.name}_to_{dtype}", x=moved.x, dtype=dtype)
        out = op.outputs[0]
        return rewriter.add(moved.op_type, out.name, **inputs)


@register(DECLARATION)
class CastBeforeDataMovement(PatternPass):
    """Move every narrowing cast of int32 data movement above it."""

    def patterns(self) -> list[RewritePattern]:
        return [CastOfMovedInt32()]

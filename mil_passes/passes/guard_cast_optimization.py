"""webnn::guard_cast_optimization — no cast chain to bool that ``common::cast_optimization`` miscompiles.

``common::cast_optimization`` fuses ``cast(cast(x, A), B)`` into ``cast(x, B)`` when the range and
resolution of A and B allow it. For ``B = bool`` they always do, yet a cast to bool asks "is it
nonzero?", and the middle cast may turn a nonzero into zero: fp32 → int32 truncates 0.5 to 0
(False), the fused cast makes 0.5 True. ``x.to(torch.int32).to(torch.bool)`` and WebNN's uint8
booleans (``cast(x, "uint8")`` then ``cast(·, "bool")``) convert wrong under DEFAULT
(docs/coremltools-passes.md). This pass runs before every ``common::cast_optimization`` of
``mil_passes.pipeline()`` and at its end (the backend runs cast_optimization once more).

Given::

    %i: (4, int32) = cast(x=%x, dtype="int32")      # %x: (4, fp32)
    %b: (4, bool) = cast(x=%i, dtype="bool")

Result (the comparison cast_optimization cannot fuse; the same values)::

    %i: (4, int32) = cast(x=%x, dtype="int32")
    %i_truthy: (4, bool) = not_equal(x=%i, y=0)

Rules:

- A ``cast(v, "bool")`` is rewritten when ``v`` comes from a chain of ``cast`` (and ``identity``,
  which ``common::noop_elimination`` removes) in which one step can turn a nonzero into zero:
  float → integer (truncation), float → narrower float (underflow: 1e-8 in fp16 is 0), integer →
  narrower integer (256 → uint8 wraps to 0). The walk stops at a bool, which no fusion crosses.
- Otherwise the cast is left to cast_optimization, which fuses it exactly (int8 → int32 → bool,
  or the round trip ``cast(cast(b, "uint8"), "bool")`` of a bool ``b``).
- The rewrite is ``webnn::canonicalize_uint8_select``'s rule 2: ``not_equal(v, 0)``, narrow
  integers through int32 (MIL comparisons take fp16, fp32 and int32 only). That pass makes every
  cast to bool a comparison anyway, but it runs after the first cast_optimization.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var, types

from ..rewriter import PatternPass, RewritePattern
from . import register
from .canonicalize_uint8_select import CastToBoolAsNotEqual

RULE = "cast-chain-to-bool"


def _width(dtype) -> int:
    return int(types.nptype_from_builtin(dtype)(0).itemsize)


def loses_nonzero(source, target) -> bool:
    """Can ``cast`` from dtype ``source`` to dtype ``target`` turn a nonzero value into zero?"""
    if types.is_bool(source) or types.is_bool(target):
        return False
    if types.is_float(source):
        return types.is_int(target) or _width(target) < _width(source)
    return types.is_int(target) and _width(target) < _width(source)


def lossy_step(var: Var) -> Operation | None:
    """The first cast, walking back from ``var`` through casts and identities, that can turn a
    nonzero into zero; None if there is none before a bool or a non-cast producer."""
    while not types.is_bool(var.dtype) and var.op is not None and var.op.op_type in ("cast", "identity"):
        producer = var.op
        if producer.op_type == "cast" and loses_nonzero(producer.x.dtype, var.dtype):
            return producer
        var = producer.x
    return None


class CastChainToBool(CastToBoolAsNotEqual):
    """``cast(v, "bool")`` of a chain with a step that can make a nonzero zero → ``not_equal(v, 0)``."""

    rule = RULE

    def match(self, op: Operation) -> Var | None:
        x = super().match(op)
        if x is None or lossy_step(x) is None:
            return None  # not a cast to bool, or one cast_optimization fuses exactly
        return x

    def describe(self, op: Operation, match: Var) -> str:
        step = lossy_step(match)
        assert step is not None
        source, target = (types.builtin_to_string(d) for d in (step.x.dtype, step.outputs[0].dtype))
        return (
            f"cast '{op.name}' to bool reads cast '{step.name}' ({source} → {target}, which can make a "
            f"nonzero zero): it becomes not_equal('{match.name}', 0), which common::cast_optimization "
            "does not fuse"
        )


@register("guard_cast_optimization")
class GuardCastOptimization(PatternPass):
    """Rewrite each cast to bool that ``common::cast_optimization`` would fuse wrongly as a comparison."""

    name = "webnn::guard_cast_optimization"

    def patterns(self) -> list[RewritePattern]:
        return [CastChainToBool()]

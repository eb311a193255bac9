"""webnn::canonicalize_uint8_select — WebNN's uint8 booleans into the bool conditions MIL requires.

WebNN booleans are uint8 (nonzero is true), so a converter wraps every comparison and logical op
in casts; MIL wants ``select.cond`` and ``logical_*`` inputs straight from a bool producer.

Given (what a WebNN converter emits for ``where(logical_and(greater(x, y), z), ones, zeros)``)::

    %gt_bool: (2, 2, bool) = greater(x=%x, y=%y)
    %gt: (2, 2, uint8) = cast(x=%gt_bool, dtype="uint8")
    %gt_in: (2, 2, bool) = cast(x=%gt, dtype="bool")
    %z_bool: (2, 2, bool) = cast(x=%z, dtype="bool")
    %and_bool: (2, 2, bool) = logical_and(x=%gt_in, y=%z_bool)
    %and: (2, 2, uint8) = cast(x=%and_bool, dtype="uint8")
    %cond: (2, 2, bool) = cast(x=%and, dtype="bool")
    %out: (2, 2, fp32) = select(cond=%cond, a=%ones, b=%zeros)

Result::

    %gt_bool: (2, 2, bool) = greater(x=%x, y=%y)
    %z_truthy: (2, 2, bool) = not_equal(x=%z, y=0.0)
    %and_bool: (2, 2, bool) = logical_and(x=%gt_bool, y=%z_truthy)
    %out: (2, 2, fp32) = cast(x=%and_bool, dtype="fp32")

The rules (each a pattern below):

1. ``cast(x, "bool")`` where ``x`` is a chain of numeric casts of a bool ``%b``
   (``%b → uint8/int8/int16/uint16/int32/fp16/fp32 → … → bool``) → ``%b``. Every numeric dtype
   holds 0 and 1 exactly, so each hop is lossless; any other op in the chain stops the match.
2. Any other ``cast(x, "bool")`` → ``not_equal(x, 0)``: NaN is true and −0 false, as in WebNN
   (and numpy's ``astype(bool)``). int8/uint8/int16/uint16, which MIL comparisons refuse, are
   first cast to int32 (``%x_int32``).
3. ``select(cond=logical_not(%c), a=%a, b=%b)`` → ``select(cond=%c, a=%b, b=%a)``;
   ``logical_not(logical_not(%c))`` → ``%c``.
4. ``select(cond=%c, a=1, b=0)`` with constant all-ones / all-zeros (+0) numeric operands and the
   output shaped like ``%c`` → ``cast(%c, dtype)``; ``a=0, b=1`` → ``cast(logical_not(%c), dtype)``.

Ops that other ops still read (a cast of a bool that is also an output) stay; only uses move.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types

from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..declaration import LintRule, PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="canonicalize_uint8_select",
    summary="Make every `select.cond` and logical-op input come straight from a bool producer.",
    slots=(
        Slot(
            20,
            "common::select_optimization",
            "after const_elimination folded the select operands, before select_optimization reads them",
        ),
        Slot(
            100,
            "common::remove_symbolic_reshape",
            "again: removing a window can bring a condition next to what canonicalizes it, as in "
            "logical_not(slice(concat(logical_not(x), c))) (found by the fuzzer: without this run the "
            "pipeline is not idempotent)",
        ),
    ),
    rules=(
        LintRule(
            "non-bool-condition",
            "info",
            "a `cast` to bool (WebNN's uint8 booleans, numeric truth values)",
            "valid MIL; WebNN converters wrap every comparison and logical op in casts (rustnn's Core ML backend)",
        ),
        LintRule(
            "bool-simplification",
            "info",
            "`select` of constant ones and zeros, `select` of a `logical_not`, `logical_not` of a `logical_not`",
            "valid MIL that a cast or swapped operands compute with fewer ops",
        ),
    ),
)

#: Lint rules: a cast to bool (rules 1, 2); a select or logical_not that simplifies (3, 4).
RULE = "non-bool-condition"
SIMPLIFY_RULE = "bool-simplification"

#: Dtypes MIL comparisons accept; narrower ints are cast to int32 before ``not_equal``.
COMPARABLE_DTYPES = (types.fp16, types.fp32, types.int32)


def _casts_to_bool(op: Operation) -> bool:
    return op.dtype.val == "bool"


def bool_source(var: Var) -> Var | None:
    """The bool ``var`` is a chain of casts of (``var`` itself if bool), or None."""
    while not types.is_bool(var.dtype):
        producer = var.op
        if producer is None or producer.op_type != "cast":
            return None
        var = producer.x
    return var


def negated(var: Var) -> Var | None:
    """``c`` where ``var`` is ``logical_not(c)``, else None."""
    producer = var.op
    return producer.x if producer is not None and producer.op_type == "logical_not" else None


def _shape_of(var: Var) -> tuple | None:
    """The shape of a tensor, None for a scalar."""
    return tuple(var.shape) if types.is_tensor(var.sym_type) else None


def _all_equal(value: Any, number: int) -> bool:
    """Every element equals ``number`` (−0 equals 0 here; see :class:`SelectOfOnesZeros`)."""
    return bool(np.all(np.asarray(value) == number))


class CastRoundTripToBool(RewritePattern[Var]):
    """Rule 1: ``cast(x, "bool")`` of numeric casts of a bool → that bool."""

    op_types = ("cast",)
    rule = RULE

    def match(self, op: Operation) -> Var | None:
        if not _casts_to_bool(op):
            return None  # not a candidate of any rule
        return bool_source(op.x)  # None: rule 2's to rewrite

    def detail(self, op: Operation, match: Var) -> str:
        return f"to bool round-trips bool '{match.name}': its uses read '{match.name}' directly"

    def rewrite(self, op: Operation, match: Var, rewriter: Rewriter) -> Var:
        return match


class CastToBoolAsNotEqual(RewritePattern[Var]):
    """Rule 2: ``cast(x, "bool")`` → ``not_equal(x, 0)`` (narrow ints through int32)."""

    op_types = ("cast",)
    rule = RULE

    def match(self, op: Operation) -> Var | None:
        if not _casts_to_bool(op) or types.is_bool(op.x.dtype):
            return None  # not a cast to bool, or rule 1's to rewrite
        return op.x

    def detail(self, op: Operation, match: Var) -> str:
        dtype = types.builtin_to_string(match.dtype)
        return f"of {dtype} '{match.name}' to bool becomes not_equal('{match.name}', 0)"

    def rewrite(self, op: Operation, match: Var, rewriter: Rewriter) -> Var:
        x = match
        if x.dtype not in COMPARABLE_DTYPES:
            x = rewriter.add("cast", f"{match.name}_int32", x=x, dtype="int32")
        zero = np.zeros((), dtype=types.nptype_from_builtin(x.dtype))
        return rewriter.add("not_equal", f"{match.name}_truthy", x=x, y=zero)


class SelectOfOnesZeros(RewritePattern[tuple[bool]]):
    """Rule 4: ``select(c, 1, 0)`` → ``cast(c, dtype)``, ``select(c, 0, 1)`` → the cast of
    ``logical_not(c)``."""

    op_types = ("select",)
    rule = SIMPLIFY_RULE

    def match(self, op: Operation) -> tuple[bool] | Declined | None:
        out = op.outputs[0]
        if types.is_bool(out.dtype) or op.a.val is None or op.b.val is None:
            return None  # selects bools, or values known only at run time: not a candidate
        if _all_equal(op.a.val, 1) and _all_equal(op.b.val, 0):
            negate, zeros = False, op.b.val
        elif _all_equal(op.a.val, 0) and _all_equal(op.b.val, 1):
            negate, zeros = True, op.a.val
        else:
            return None  # other constants
        if np.any(np.signbit(zeros)):
            return Declined(op, "its zeros include −0, and a cast of a bool gives +0")
        if _shape_of(op.cond) != _shape_of(out):
            return Declined(op, f"cond's shape {_shape_of(op.cond)} is not the output's {_shape_of(out)}")
        return (negate,)

    def detail(self, op: Operation, match: tuple[bool]) -> str:
        dtype = types.builtin_to_string(op.outputs[0].dtype)
        cond = f"logical_not('{op.cond.name}')" if match[0] else f"'{op.cond.name}'"
        return f"of constant ones and zeros becomes cast({cond}, {dtype})"

    def rewrite(self, op: Operation, match: tuple[bool], rewriter: Rewriter) -> Var:
        (negate,) = match
        dtype = types.builtin_to_string(op.outputs[0].dtype)
        cond = op.cond
        if negate:
            cond = rewriter.add("logical_not", f"{cond.name}_not", x=cond)
        return rewriter.add("cast", f"{cond.name}_{dtype}", x=cond, dtype=dtype)


class _ReadsLogicalNot(RewritePattern[Var]):
    """Rule 3: an op whose input ``reads`` is ``logical_not(c)`` (the match is ``c``)."""

    rule = SIMPLIFY_RULE
    reads = ""

    def match(self, op: Operation) -> Var | None:
        return negated(op.inputs[self.reads])


class SelectOfLogicalNot(_ReadsLogicalNot):
    """``select(logical_not(c), a, b)`` → ``select(c, b, a)``."""

    op_types, reads = ("select",), "cond"

    def detail(self, op: Operation, match: Var) -> str:
        return f"reads logical_not('{match.name}'): it reads '{match.name}' with a and b swapped"

    def rewrite(self, op: Operation, match: Var, rewriter: Rewriter) -> Var:
        return rewriter.add("select", f"{op.outputs[0].name}_swapped", cond=match, a=op.b, b=op.a)


class DoubleLogicalNot(_ReadsLogicalNot):
    """``logical_not(logical_not(c))`` → ``c``."""

    op_types, reads = ("logical_not",), "x"

    def detail(self, op: Operation, match: Var) -> str:
        return f"of a logical_not: its uses read '{match.name}' directly"

    def rewrite(self, op: Operation, match: Var, rewriter: Rewriter) -> Var:
        return match


@register(DECLARATION)
class CanonicalizeUint8Select(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        # Order matters per op type: a round trip is resolved before a cast becomes a
        # comparison, and select(c, 1, 0) becomes a cast before its logical_not is swapped away
        # (the cast reuses an existing logical_not instead of adding one).
        return [
            CastRoundTripToBool(),
            CastToBoolAsNotEqual(),
            SelectOfOnesZeros(),
            SelectOfLogicalNot(),
            DoubleLogicalNot(),
        ]

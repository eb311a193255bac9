"""webnn::guard_const_elimination — values known only in part are folded with their own dtype.

A ``concat`` of a const and a run-time input has a partially known value (numbers for the
const's part, symbols for the rest, an object-dtype numpy array); a ``slice_by_index`` (or
``gather``, ``squeeze``…) of the const's part is then fully known. ``common::const_elimination``
folds it with ``mb.const(val=...)``, which infers the dtype from the Python numbers: int32. An
fp32 ``[-10.5, 0.25]`` becomes int32 ``[-10, 0]``, a bool ``[True]`` int32 ``[1]``; where an
``add`` or ``concat`` reads the slice the pass raises ``ValueError``, and a value beyond int32
raises ``OverflowError`` (docs/coremltools-passes.md). ``torch.cat([buffer, x])[:2]`` does not
convert under DEFAULT. This pass runs before every ``common::const_elimination`` of
``mil_passes.pipeline()`` and at its end (the backend runs const_elimination twice more).

Given::

    %c: (4, fp32)^ = concat(values=([-10.5, 0.25], %x), axis=0)   # %x: (2, fp32)
    %s: (2, fp32)* = slice_by_index(x=%c, begin=[0], end=[2])

Result (the const const_elimination would make, with the var's declared dtype)::

    %s_value: (2, fp32)* = const(val=[-10.5, 0.25])

Rules:
- First, values coremltools' value inference got wrong (``_known_values``: a ``band_part`` of a
  const holding inf or NaN outside the band, an interleaved ``concat`` of consts) are set right,
  and every op that reads them is inferred again, so const_elimination folds the right numbers.

- An output of a non-const op is folded here when coremltools would fold it
  (``Var.can_be_folded_to_const()``) and its value is an object-dtype array: the numbers
  came from consts, so converting them to the declared dtype is exact (an fp32 number is an
  fp32 again, a bool a bool).
- const_elimination's ``skip_const_by_size`` option, set on a ``mil_passes.pipeline()``, applies
  here too: a larger value is left alone (a refusal), as const_elimination leaves it.
- Values with a numeric dtype are const_elimination's to fold: it types them right. A value
  the declared dtype cannot hold exactly is left alone (a refusal): const_elimination, not this
  pass, decides what to do with it.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from ..inference import repair_types
from ..rewriter import PatternPass, Refusal, Rewriter, RewritePattern
from . import register
from ._known_values import VALUE_HOLES, set_value

RULE = "partially-known-value"


def typed_value(var: Var) -> np.ndarray | None:
    """``var``'s value as an array of its declared dtype when it is exactly that, else None."""
    value = np.asarray(var.val)
    dtype = np.dtype(types.nptype_from_builtin(var.dtype))
    try:
        with np.errstate(all="ignore"):
            typed = value.astype(dtype)
    except (TypeError, ValueError, OverflowError):
        return None
    same = [a == b or (a != a and b != b) for a, b in zip(value.ravel().tolist(), typed.ravel().tolist())]
    if not all(same) or typed.shape != tuple(var.shape):
        return None
    return typed


class ObjectValueToTypedConst(RewritePattern[list[tuple[Var, np.ndarray]]]):
    """Each foldable output of ``op`` whose value is an object array → a const of its dtype."""

    #: Every op but const: any op's value inference may read a partially known input.
    op_types = tuple(sorted((set(SSAOpRegistry.core_ops) | set(SSAOpRegistry.dialect_ops)) - {"const"}))
    rule = RULE

    def __init__(self, skip_const_by_size: float | None = None) -> None:
        self.skip_const_by_size = skip_const_by_size

    def match(self, op: Operation) -> list[tuple[Var, np.ndarray]] | Refusal | None:
        if op.op_type == "const" or op.blocks:
            return None
        candidates = [
            out
            for out in op.outputs
            if isinstance(out.sym_val, np.ndarray)  # cheap tests first: this runs on every op
            and out.sym_val.dtype == object
            and types.is_tensor(out.sym_type)
            and out.can_be_folded_to_const()
        ]
        if not candidates:
            return None
        limit = self.skip_const_by_size
        if limit is not None and any(out.val.size > limit for out in candidates):
            return Refusal(op, f"a value has more than skip_const_by_size={limit:g} elements")
        typed = [(out, typed_value(out)) for out in candidates]
        exact = [(out, value) for out, value in typed if value is not None]
        if not exact:
            return Refusal(op, f"the value of '{candidates[0].name}' does not fit its declared dtype")
        return exact

    def describe(self, op: Operation, match: list[tuple[Var, np.ndarray]]) -> str:
        names = ", ".join(f"'{out.name}'" for out, _ in match)
        return f"{op.op_type} '{op.name}': the known value of {names} becomes a const of its declared dtype"

    def rewrite(self, op: Operation, match: list[tuple[Var, np.ndarray]], rewriter: Rewriter) -> None:
        for out, value in match:
            rewriter.replace(out, rewriter.emit(op, "const", f"{out.name}_value", val=value))


@register("guard_const_elimination")
class GuardConstElimination(PatternPass):
    """Fold each partially known value that ``common::const_elimination`` would fold as int32."""

    name = "webnn::guard_const_elimination"

    def __init__(self) -> None:
        super().__init__()
        self._skip_const_by_size: float | None = None

    @property
    def skip_const_by_size(self) -> float | None:
        """const_elimination's option (``mil_passes.pipeline()`` hands it on): larger values stay."""
        return self._skip_const_by_size

    @skip_const_by_size.setter
    def skip_const_by_size(self, threshold: str | float) -> None:
        try:
            self._skip_const_by_size = float(threshold)
        except (TypeError, ValueError):
            raise ValueError(f"skip_const_by_size must be a number, got {threshold!r}") from None

    def apply(self, prog) -> None:
        # Values first: what coremltools inferred wrong (band_part, interleaved concat) is set
        # right, and every op that reads it inferred again, before const_elimination folds them.
        repaired = repair_types(prog, VALUE_HOLES, set_value)
        super().apply(prog)
        assert self.last_result is not None  # PatternPass.apply sets it
        self.last_result.rewritten += len(repaired)

    def patterns(self) -> list[RewritePattern]:
        return [ObjectValueToTypedConst(self._skip_const_by_size)]

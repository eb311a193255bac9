"""The guard of ``common::const_elimination``: values known only in part are folded with their own
dtype (a pass of its own: it repairs values first and takes const_elimination's options)."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from ..type_repair import repair_types
from ..rewriter import PatternPass, Declined, Rewriter, RewritePattern
from ._known_values import VALUE_HOLES, set_value
from .guard import Guard


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

    def __init__(self, skip_const_by_size: float | None = None) -> None:
        self.skip_const_by_size = skip_const_by_size

    def match(self, op: Operation) -> list[tuple[Var, np.ndarray]] | Declined | None:
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
            return Declined(op, f"a value has more than skip_const_by_size={limit:g} elements")
        typed = [(out, typed_value(out)) for out in candidates]
        exact = [(out, value) for out, value in typed if value is not None]
        if not exact:
            return Declined(op, f"the value of '{candidates[0].name}' does not fit its declared dtype")
        return exact

    def rewrite(self, op: Operation, match: list[tuple[Var, np.ndarray]], rewriter: Rewriter) -> tuple[Var | None, ...]:
        values = dict(match)
        return tuple(rewriter.const(values[out], f"{out.name}_value") if out in values else None for out in op.outputs)


class GuardConstElimination(PatternPass):
    """``common::const_elimination`` folds a fully known slice (``gather``, ``squeeze``…) of a
    partially known ``concat(const, x)`` with ``mb.const(val=...)``, which infers the dtype from the
    Python numbers: an fp32 ``[-10.5, 0.25]`` becomes int32 ``[-10, 0]``, a bool ``[True]`` int32
    ``[1]``; where an ``add`` or ``concat`` reads the slice it raises ``ValueError``, beyond int32
    ``OverflowError`` (``torch.cat([buffer, x])[:2]`` does not convert under DEFAULT). And it folds
    two values coremltools' value inference gets wrong: a ``band_part`` of a const holding inf or
    NaN outside the band (NaN instead of 0), an interleaved ``concat`` of consts (joined plainly).

    The guard first sets those two values right (``_known_values``) and infers every op that reads
    them again; then it folds each foldable output whose value is an object array (its numbers came
    from consts) into a const of its *declared* dtype, which changes no number. A value larger than
    const_elimination's ``skip_const_by_size`` is left, as the pass leaves it, and so is one its
    declared dtype cannot hold exactly (a refusal each); numeric values are the pass's to fold."""

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


CONST_ELIMINATION = Guard("common::const_elimination", pass_class=GuardConstElimination, shares_options=True)

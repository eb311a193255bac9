"""What kind of failure a culprit pass made: a miscompile, a crash, or a documented precision loss.

- ``crash``: the pass raised.
- ``precision``: the outputs keep their dtypes and shapes and only values change, and either
  the pass declares fp16 compute (:data:`FP16_PASSES`: rounding, and overflow beyond ±65504,
  are what it documents), or every element that changed beyond the tolerance was already inf or
  NaN before the pass (a fusion's algebra meets IEEE special values: ``0.5 * x * (1 + erf(x / √2))``
  is NaN at ``x = -inf`` where ``gelu`` is 0).
- ``miscompile``: anything else (a changed dtype, shape, int or bool value, a finite value
  beyond the tolerance, or a program that no longer validates).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from coremltools.converters.mil.mil import Program

from coremltools.converters.mil.mil import types

from ..ir import iter_ops
from ..reference.interpreter import evaluate_vars
from ..verify import TOLERANCE, PassRow

MISCOMPILE, CRASH, PRECISION = "miscompile", "crash", "precision"
FAILURE_CLASSES = (MISCOMPILE, CRASH, PRECISION)
#: Passes that declare fp16 compute.
FP16_PASSES = frozenset({"common::add_fp16_cast"})


def failure_class(
    row: PassRow,
    before: Program | None = None,
    after: Program | None = None,
    feeds: Sequence[Mapping[str, np.ndarray]] = (),
) -> str:
    """The class of a culprit row; ``before``/``after`` (the programs around the culprit pass)
    and ``feeds`` let a change confined to non-finite values count as precision."""
    if row.status == "raised":
        return CRASH
    if row.status != "changed" or row.error is not None or not row.outputs:
        return MISCOMPILE
    if any(o.dtype_before != o.dtype_after or o.shape_before != o.shape_after for o in row.outputs.values()):
        return MISCOMPILE
    if row.name in FP16_PASSES:
        return PRECISION
    if before is not None and after is not None and feeds:
        if changed_only_where_nonfinite(before, after, feeds) or removed_op_overflowed(before, after, feeds):
            return PRECISION
    return MISCOMPILE


def _outputs(prog: Program, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        values = evaluate_vars(prog, feeds)
    return [np.asarray(values[var]) for var in prog.functions["main"].outputs]


def _computes_fp16(prog: Program) -> bool:
    return any(
        var.sym_type is not None and types.is_tensor(var.sym_type) and var.dtype == types.fp16
        for op in iter_ops(prog)
        for var in op.outputs
    )


def changed_only_where_nonfinite(before: Program, after: Program, feeds: Sequence[Mapping[str, np.ndarray]]) -> bool:
    """True when every float output element that differs beyond the programs' tolerance (fp16's
    when either computes in fp16, as ``verify`` has it) was inf or NaN in ``before``, and no int
    or bool element differs (inputs matched by position)."""
    rtol, atol = TOLERANCE["fp16" if _computes_fp16(before) or _computes_fp16(after) else "fp32"]
    names_before = list(before.functions["main"].inputs)
    names_after = list(after.functions["main"].inputs)
    for feed in feeds:
        want = _outputs(before, feed)
        got = _outputs(after, {new: feed[old] for old, new in zip(names_before, names_after)})
        for b, a in zip(want, got):
            if b.dtype.kind != "f":
                if not np.array_equal(b, a):
                    return False
                continue
            wide_b, wide_a = b.astype(np.float64), a.astype(np.float64)
            finite = np.abs(wide_b[np.isfinite(wide_b)])
            scale = float(finite.max()) if finite.size else 0.0
            with np.errstate(invalid="ignore"):
                diff = np.abs(wide_a - wide_b)
            same = (wide_a == wide_b) | (np.isnan(wide_a) & np.isnan(wide_b))
            close = np.nan_to_num(diff, nan=np.inf) <= max(atol, rtol * scale)
            differs = ~same & ~close
            if np.any(np.isfinite(wide_b[differs])):
                return False
    return True


def removed_op_overflowed(before: Program, after: Program, feeds: Sequence[Mapping[str, np.ndarray]]) -> bool:
    """True when an op of ``before`` that ``after`` no longer has (by name) made an inf from finite
    float inputs on one of the feeds: the pass replaced a computation that overflowed."""
    kept = {op.name for op in iter_ops(after)}
    removed = [op for op in iter_ops(before) if op.name not in kept and op.op_type != "const"]
    if not removed:
        return False
    for feed in feeds:
        with np.errstate(all="ignore"):
            values = evaluate_vars(before, feed)
        for op in removed:
            inputs = [values.get(var) for var in op.inputs.values() if not isinstance(var, (list, tuple))]
            if any(v is None or not _all_finite_floats(v) for v in inputs):
                continue
            if any(var in values and _has_inf(values[var]) for var in op.outputs):
                return True
    return False


def _all_finite_floats(value) -> bool:
    array = np.asarray(value)
    return array.dtype.kind != "f" or bool(np.all(np.isfinite(array)))


def _has_inf(value) -> bool:
    array = np.asarray(value)
    return array.dtype.kind == "f" and bool(np.any(np.isinf(array)))

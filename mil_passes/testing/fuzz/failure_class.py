"""What kind of failure a culprit pass made: a miscompile, a crash, or a documented precision loss.

- ``crash``: the pass raised.
- ``precision``: the outputs keep their dtypes and shapes and only values change, and either
  the pass declares fp16 compute (:data:`FP16_PASSES`: rounding, and overflow beyond ±65504,
  are what it documents), or every element that changed beyond the tolerance was already inf or
  NaN before the pass (a fusion's algebra meets IEEE special values: ``0.5 * x * (1 + erf(x / √2))``
  is NaN at ``x = -inf`` where ``gelu`` is 0), or an op the pass removed overflowed, or every such
  element changed by no more than the rounding of the ops the pass replaced can account for
  (:func:`within_rounding_of_removed_ops`: the written computation is ill-conditioned there).
- ``miscompile``: anything else (a changed dtype, shape, int or bool value, a finite value
  beyond the tolerance, or a program that no longer validates).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
from coremltools.converters.mil.mil import Program

from coremltools.converters.mil.mil import types

from ...ir import input_vars, iter_ops
from ...reference.interpreter import evaluate_vars
from ...verify import TOLERANCE, PassRow

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
        if (
            changed_only_where_nonfinite(before, after, feeds)
            or removed_op_overflowed(before, after, feeds)
            or within_rounding_of_removed_ops(before, after, feeds)
        ):
            return PRECISION
    return MISCOMPILE


def outputs_of(prog: Program, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``main``'s outputs on ``feeds``, in order, under the interpreter (NaN and overflow silent)."""
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
    tolerance = _tolerance(before, after)
    for feed in feeds:
        for b, a in zip(outputs_of(before, feed), outputs_of(after, feed_for(before, after, feed))):
            if b.dtype.kind != "f":
                if not np.array_equal(b, a):
                    return False
                continue
            if np.any(np.isfinite(b[_differs(b, a, tolerance)])):
                return False
    return True


def _tolerance(before: Program, after: Program) -> tuple[float, float]:
    """(rtol, atol): fp16's when either program computes in fp16, as ``verify`` has it."""
    return TOLERANCE["fp16" if _computes_fp16(before) or _computes_fp16(after) else "fp32"]


def feed_for(before: Program, after: Program, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feed`` (for ``before``) keyed by ``after``'s input names, matched by position (a pass may
    rename an input)."""
    names = zip(before.functions["main"].inputs, after.functions["main"].inputs)
    return {new: feed[old] for old, new in names}


def _differs(b: np.ndarray, a: np.ndarray, tolerance: tuple[float, float]) -> np.ndarray:
    """Per element of a float output, whether ``a`` differs from ``b`` beyond the tolerance
    (relative to ``b``'s largest finite magnitude)."""
    rtol, atol = tolerance
    wide_b, wide_a = b.astype(np.float64), a.astype(np.float64)
    finite = np.abs(wide_b[np.isfinite(wide_b)])
    scale = float(finite.max()) if finite.size else 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(wide_a - wide_b)
    same = (wide_a == wide_b) | (np.isnan(wide_a) & np.isnan(wide_b))
    close = np.nan_to_num(diff, nan=np.inf) <= max(atol, rtol * scale)
    return ~same & ~close


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


#: Perturbed evaluations per feed in :func:`within_rounding_of_removed_ops`.
PERTURBATIONS = 4


def within_rounding_of_removed_ops(
    before: Program, after: Program, feeds: Sequence[Mapping[str, np.ndarray]], seed: int = 0
) -> bool:
    """True when, on every feed, each float output element that differs beyond the tolerance
    differs by no more than the rounding of the ops the pass removed can account for.

    The estimate is the usual forward-error one: an fp computation of ``n`` ops is exact for
    inputs off by about ``n`` units in the last place, so two computations of the same function
    differ by up to ``n`` times what one ulp on their inputs moves the result. Measured: the
    float values that flow into the removed ops from outside them are moved by one ulp, up or
    down at random (:data:`PERTURBATIONS` times), and ``before`` is evaluated again; each
    changed element must lie within ``2 (n + 1)`` times the largest move of that element (``n``
    removed ops for ``before``'s rounding, as many for the replacement's). Where the written
    computation is well-conditioned one ulp moves an output by about fp32's precision, far
    below the tolerance, so a wrong rewrite is still a miscompile; where it cancels (``x*s +
    (b - mean*s)`` at ``x`` near -2³¹, ulp 256) one ulp moves the output as much as the fusion did.
    Int and bool outputs must be equal; only the function's own block is considered.
    """
    func = before.functions["main"]
    kept = {op.name for op in iter_ops(after)}
    removed = [op for op in func.operations if op.name not in kept and op.op_type != "const"]
    if not removed:
        return False
    made_inside = {var for op in removed for var in op.outputs}
    boundary = list(
        dict.fromkeys(
            var
            for op in removed
            for var in input_vars(op)
            if var not in made_inside and (var.op is None or var.op.op_type != "const")
        )
    )
    factor = 2.0 * (len(removed) + 1)
    tolerance = _tolerance(before, after)
    rng = np.random.default_rng(seed)
    for feed in feeds:
        with np.errstate(all="ignore"):
            values = evaluate_vars(before, feed)
        movable = [var for var in boundary if _is_float_array(values.get(var))]
        if not movable:
            return False
        want = [np.asarray(values[var]) for var in func.outputs]
        got = outputs_of(after, feed_for(before, after, feed))
        moves = [np.zeros(np.shape(w)) for w in want]
        for _ in range(PERTURBATIONS):
            nudged = {var: _nudged(np.asarray(values[var]), rng) for var in movable}
            with np.errstate(all="ignore"):
                moved = evaluate_vars(before, feed, replacing=nudged)
            for i, var in enumerate(func.outputs):
                if want[i].dtype.kind == "f":
                    with np.errstate(invalid="ignore"):
                        move = np.abs(np.asarray(moved[var], np.float64) - want[i].astype(np.float64))
                    moves[i] = np.fmax(moves[i], np.nan_to_num(move, nan=np.inf))
        for b, a, move in zip(want, got, moves):
            if b.dtype.kind != "f":
                if not np.array_equal(b, a):
                    return False
                continue
            differs = _differs(b, a, tolerance)
            with np.errstate(invalid="ignore"):
                change = np.abs(a.astype(np.float64) - b.astype(np.float64))
            if not np.all(change[differs] <= factor * move[differs]):
                return False
    return True


def _is_float_array(value) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and np.asarray(value).dtype.kind == "f"


def _nudged(value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each element one ulp up or down (at random), in its own dtype."""
    toward = np.where(rng.random(value.shape) < 0.5, -np.inf, np.inf).astype(value.dtype)
    return np.nextafter(value, toward).astype(value.dtype)

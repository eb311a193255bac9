"""Where coremltools' value inference computes a wrong constant, and the right one.

``common::const_elimination`` folds each op whose value coremltools inferred when the op was
made. Two inferences are wrong (coremltools 9.0, iOS15 op definitions):

- ``band_part`` multiplies x by a 0/1 mask: an inf or NaN outside the band becomes NaN, not 0;
- ``concat`` joins its values with ``np.concatenate`` whatever ``interleave`` says.

:data:`VALUE_HOLES` gives, for each, the right value (or None when coremltools' is right), in the
form ``mil_passes.type_repair.repair_types`` takes; :func:`set_value` writes it into the op's output,
after which ``repair_types`` infers again every op that reads it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Operation, types


def _differs(known, right: np.ndarray) -> bool:
    known = np.asarray(known)
    if known.shape != right.shape or known.dtype == object:
        return True
    return not bool(
        np.all((known == right) | (np.isnan(known) & np.isnan(right)) if right.dtype.kind == "f" else known == right)
    )


def band_part_value(op: Operation) -> np.ndarray | None:
    """``x`` where the band keeps it, 0 elsewhere (not ``x * mask``), if coremltools' differs."""
    x = op.x.val
    if x is None or op.lower.val is None or op.upper.val is None or op.outputs[0].val is None:
        return None
    x = np.asarray(x)
    rows, cols = np.indices(x.shape[-2:])
    lower, upper = int(op.lower.val), int(op.upper.val)
    kept = ((lower < 0) | (rows - cols <= lower)) & ((upper < 0) | (cols - rows <= upper))
    right = np.where(kept, x, np.zeros((), x.dtype)).astype(x.dtype)
    return right if _differs(op.outputs[0].val, right) else None


def interleaved_concat_value(op: Operation) -> np.ndarray | None:
    """The interleaved join of known values, if coremltools (which ignores ``interleave``) differs."""
    if op.interleave is None or not op.interleave.val or op.outputs[0].val is None:
        return None
    values = [v.val for v in op.values]
    if any(v is None for v in values):
        return None
    arrays = [np.asarray(v) for v in values]
    if any(a.dtype == object for a in arrays):
        return None
    axis = int(op.axis.val) % arrays[0].ndim
    stacked = np.stack(arrays, axis=axis + 1)  # [..., n, len(values), ...] → interleaved along axis
    shape = list(arrays[0].shape)
    shape[axis] *= len(arrays)
    right = stacked.reshape(shape)
    return right if _differs(op.outputs[0].val, right) else None


#: op type -> (its right value, or None; why coremltools' is wrong), as ``repair_types`` takes them
VALUE_HOLES = {
    "band_part": (band_part_value, "coremltools multiplies by the band mask: inf * 0 is NaN"),
    "concat": (interleaved_concat_value, "coremltools' concat value ignores interleave"),
}


def set_value(op: Operation, value: Any) -> None:
    """Write ``value`` as the value of ``op``'s first output (until it is inferred again)."""
    out = op.outputs[0]
    known = out.sym_type()
    known.val = np.asarray(value, dtype=types.nptype_from_builtin(out.dtype))
    out._sym_val = known

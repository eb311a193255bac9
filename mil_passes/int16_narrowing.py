"""The ``op_selector`` that ``mil_passes.pipeline()`` gives ``common::add_int16_cast``: narrow only what fits.

``common::add_int16_cast`` (fp16 compute precision only) casts the int32 inputs of ``gather``,
``gather_along_axis``, ``gather_nd``, ``squeeze`` and ``topk`` to int16 (and their results back
to int32). It checks the range of const inputs only: a run-time int32 *value* is narrowed too, so
a gathered 2147483647 comes back as -1, a token id or a KV-cache position ``pos + T`` above 32767
wraps. And it narrows the run-time indices of a gather along a symbolic axis, which may be longer
than 32767 at run time.

This is not a pass: ``ct.convert`` removes ``common::add_int16_cast`` by name when it computes in
fp32, which a replacement pass would escape. The pipeline keeps coremltools' pass and sets its
``op_selector`` option to :func:`int16_narrowing_is_exact`, so the pass transforms an op only
when every int32 input it would narrow provably fits 16 bits:

- a const (the pass itself checks its range),
- a cast from bool, int8, uint8, int16 or uint16 (the value came from 16 bits or fewer),
- the indices of a ``gather`` / ``gather_along_axis`` along a static axis of at most 32767
  elements, or of a ``gather_nd`` into such axes (a valid index is within ±dim);
- ``topk``'s returned indices (its ``output_indices_dtype``) along such an axis.

Anything else (a function input, an ``add``, a ``shape``, a cast from fp32 or int32) keeps the op
in int32. Ops of other types never reach the selector.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

INT16_MAX = int(np.iinfo(np.int16).max)

#: Dtypes whose every value an int16 or uint16 holds (the pass picks uint16 for a cast of uint16).
_NARROW_SOURCES = (types.bool, types.int8, types.uint8, types.int16, types.uint16)


def _static_dim_fits(x: Var, axis: int) -> bool:
    shape = x.shape
    if shape is None or not -len(shape) <= axis < len(shape):
        return False
    dim = shape[axis]
    return not is_symbolic(dim) and int(dim) <= INT16_MAX


def _indices_fit(op: Operation) -> bool:
    """Every valid index of ``op`` lies within ±32767."""
    if op.op_type in ("gather", "gather_along_axis", "topk"):
        axis = op.axis.val if op.axis is not None else -1
        return axis is not None and _static_dim_fits(op.x, int(axis))
    if op.op_type == "gather_nd":
        depth = op.indices.shape[-1] if op.indices.shape else None
        batch = int(op.batch_dims.val) if getattr(op, "batch_dims", None) is not None else 0
        if depth is None or is_symbolic(depth):
            return False
        return all(_static_dim_fits(op.x, batch + k) for k in range(int(depth)))
    return False


def _fits_int16(op: Operation, name: str, var: Var) -> bool:
    producer = var.op
    if producer is not None and producer.op_type == "const":
        return True  # add_int16_cast checks a const's range itself
    if producer is not None and producer.op_type == "cast" and producer.x.dtype in _NARROW_SOURCES:
        return True
    return name == "indices" and _indices_fit(op)


def int16_narrowing_is_exact(op: Operation) -> bool:
    """True when ``common::add_int16_cast`` may narrow every int32 input of ``op`` exactly."""
    for name, var in op.inputs.items():
        if not isinstance(var, Var):
            return False  # a list input: no op the pass handles has one
        if var.dtype == types.str:
            if var.val == "int32" and not _indices_fit(op):
                return False  # topk's indices dtype: indices along a long or symbolic axis
            continue
        if var.is_tensor_or_scalar_of(dtype="int32") and not _fits_int16(op, name, var):
            return False
    return True


def narrowing_selector(
    user_selector: Callable[[Operation], bool] | None = None, skipped_types: frozenset[str] = frozenset()
) -> Callable[[Operation], bool]:
    """:func:`int16_narrowing_is_exact`, and the user's own ``op_selector`` / ``skip_ops_by_type``
    (add_int16_cast refuses both options at once, so the pipeline folds them into one)."""
    if user_selector is None and not skipped_types:
        return int16_narrowing_is_exact

    def selector(op: Operation) -> bool:
        if op.op_type in skipped_types or (user_selector is not None and not user_selector(op)):
            return False
        return int16_narrowing_is_exact(op)

    return selector

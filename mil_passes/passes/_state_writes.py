"""What a run-time state write writes, for ``webnn::dynamic_state_update_to_mask``: the run-time
axis and its bounds, the constant windows of the other axes, and the shapes the blend needs (the
zeros around the update, the constant part of the mask, a rank-5 state's axes merged to rank 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.types.symbolic import any_symbolic, is_symbolic

from ..rewriter import Declined
from ..semantics import slice_positions
from ._position_masks import Bound, source_of
from ._shape_values import Values

STATE_READERS = ("read_state", "coreml_update_state")


@dataclass(frozen=True)
class Write:
    """A run-time write: the run-time ``axis``, its bounds (``end`` 1: a squeezed index), the
    constant window of every other axis (``None`` on ``axis``), the squeezed axes, and how many
    rows the update writes along ``axis`` (``None``: known at run time)."""

    axis: int
    begin: Bound
    end: Bound | int
    windows: tuple[tuple[int, int] | None, ...]
    squeezed: tuple[int, ...]
    rows: int | None


def _flags(op: Operation, name: str, rank: int) -> list[bool] | None:
    var = getattr(op, name, None)
    if var is None:
        return [False] * rank
    return None if var.val is None else [bool(v) for v in np.asarray(var.val).reshape(-1)]


def _writes_state(op: Operation) -> bool:
    """Whether ``op`` writes a state: it reads one, or a state update reads its result (through
    ``cast``s: at fp16, coremltools computes in fp32 until ``add_fp16_cast``)."""
    result = op.outputs[0]
    while len(result.child_ops) == 1 and result.child_ops[0].op_type == "cast":
        result = result.child_ops[0].outputs[0]
    if any(reader.op_type == "coreml_update_state" for reader in result.child_ops):
        return True
    source = op.x.op
    while source is not None and source.op_type == "cast":
        source = source.x.op
    return source is not None and source.op_type in STATE_READERS


def plan(op: Operation) -> Write | Declined | None:
    """The run-time write ``op`` makes, or why it is left (None: not a run-time state write)."""
    if op.begin.val is not None and op.end.val is not None or not _writes_state(op):
        return None
    shape = op.x.shape
    if not types.is_float(op.x.dtype):
        return Declined(op, "writes an integer state: the masked blend multiplies")
    if any_symbolic(shape):
        return Declined(op, "the state's shape is known only at run time")
    rank = len(shape)
    stride = op.stride.val if op.stride is not None else np.ones(rank)
    if stride is None or any(int(s) != 1 for s in np.asarray(stride).reshape(-1)):
        return Declined(op, "a strided write (only stride 1 becomes a window)")
    begin_mask, end_mask, squeeze = (_flags(op, n, rank) for n in ("begin_mask", "end_mask", "squeeze_mask"))
    if begin_mask is None or end_mask is None or squeeze is None:
        return Declined(op, "its begin, end or squeeze masks are computed at run time")
    values = Values()
    begins, ends = values.elements(op.begin), values.elements(op.end)
    if begins is None or ends is None or begins.shape != (rank,) or ends.shape != (rank,):
        return Declined(op, "its begin and end are not vectors of one entry per axis")
    runtime: int | None = None
    windows: list[tuple[int, int] | None] = []
    for axis in range(rank):
        begin = 0 if begin_mask[axis] else begins[axis]
        end = int(shape[axis]) if end_mask[axis] or squeeze[axis] else ends[axis]
        if _is_int(begin) and _is_int(end):
            positions = slice_positions(int(shape[axis]), int(begin), int(end), 1, squeeze=squeeze[axis])
            if not positions:
                return Declined(op, f"it writes nothing along axis {axis}")
            windows.append((positions.start, positions.start + len(positions)))
            continue
        if runtime is not None:
            return Declined(op, f"it writes at run-time positions on axes {runtime} and {axis}")
        runtime = axis
        windows.append(None)
    if runtime is None:
        return Declined(op, "its positions are constants that const_elimination has not folded")
    squeezed = tuple(a for a in range(rank) if squeeze[a])
    update_shape = list(op.update.shape)
    for axis in squeezed:
        update_shape.insert(axis, 1)
    if len(update_shape) != rank:
        return Declined(op, "its update does not have the window's rank")
    rows = update_shape[runtime]
    return Write(
        axis=runtime,
        begin=Bound(None, runtime) if begin_mask[runtime] else source_of(op.begin, runtime),
        end=1 if squeeze[runtime] else Bound(None, runtime) if end_mask[runtime] else source_of(op.end, runtime),
        windows=tuple(windows),
        squeezed=squeezed,
        rows=None if is_symbolic(rows) else int(rows),
    )


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer))


def singleton_merge(shape: tuple[int, ...], update_shape, axis: int) -> int | None:
    """For a rank-5 state: an axis ``i`` such that axes ``i`` and ``i + 1`` merge exactly (one of
    them has size 1, so every operand of the blend broadcasts the same at rank 4), or None. The
    update's sizes must be static (it is reshaped), but for the rows it writes on ``axis``."""
    if len(shape) != 5 or any(is_symbolic(d) for i, d in enumerate(update_shape) if i != axis):
        return None
    return next((i for i in range(4) if 1 in (shape[i], shape[i + 1])), None)


def merged(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` with axes ``axis`` and ``axis + 1`` merged into one."""
    return (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])


def padding(windows, shape) -> np.ndarray | None:
    """Zeros around the update on the constant axes it covers only in part (a window of one
    position broadcasts instead), or None when none needs them."""
    pads = []
    for window, size in zip(windows, shape):
        start, stop = window if window is not None and window[1] - window[0] > 1 else (0, size)
        pads += [start, size - stop]
    return np.array(pads, np.int32) if any(pads) else None


def constant_mask(windows, shape, dtype) -> np.ndarray | None:
    """1 inside the constant windows, 0 outside (size 1 on the run-time axis and on full axes),
    or None when every constant window is its whole axis."""
    mask = np.ones([1] * len(shape), types.nptype_from_builtin(dtype))
    for axis, (window, size) in enumerate(zip(windows, shape)):
        if window is None or window == (0, size):
            continue
        line_shape = [1] * len(shape)
        line_shape[axis] = size
        line = np.zeros(line_shape, mask.dtype)
        np.moveaxis(line, axis, 0)[window[0] : window[1]] = 1
        mask = mask * line
    return None if mask.size == 1 else mask

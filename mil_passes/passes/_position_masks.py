"""Masks of positions known at run time, for ``webnn::dynamic_state_update_to_mask``.

A window ``[start, stop)`` on one axis of a tensor whose start and stop are computed at run time
becomes an fp16 (or fp32) 0/1 mask along that axis, and a one-hot matrix that places ``T`` rows
at ``start``. Both are built once per run and block for each pair of run-time bounds
(:class:`Bound`, through ``Rewriter.shared``), so every layer that writes a cache at the same
offset shares them.

The bounds are read as numpy reads ``x[begin:end]`` on an axis of ``size`` elements (MIL's
``slice_update`` does the same): a negative bound counts from the end, and a bound is clipped to
``[0, size]``. A squeezed axis writes the one position ``begin`` (``begin + size`` if negative).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Var, types

from ..rewriter import Rewriter


SCALAR = -1  # a Bound's index when its var is the scalar itself


@dataclass(frozen=True)
class Bound:
    """One entry of a ``begin`` or ``end`` vector: entry ``index`` of ``vector`` (a rank-1 int
    var; :data:`SCALAR`: ``vector`` is a scalar), or ``None`` when the slice's mask makes it 0
    (begin) or the size (end)."""

    vector: Var | None
    index: int


def source_of(vector: Var, index: int) -> Bound:
    """Where entry ``index`` of ``vector`` comes from: through ``concat``s of rank-1 pieces along
    axis 0, the piece that holds it (so that two begin vectors made of the same run-time scalar
    share one mask)."""
    while vector.op is not None and vector.op.op_type == "concat":
        op = vector.op
        if op.axis.val is None or int(op.axis.val) != 0 or (op.interleave is not None and op.interleave.val):
            break
        lengths = [
            int(v.shape[0]) if v.rank == 1 and isinstance(v.shape[0], (int, np.integer)) else -1 for v in op.values
        ]
        if min(lengths) < 0 or not 0 <= index < sum(lengths):
            break
        for piece, length in zip(op.values, lengths):
            if index < length:
                vector = piece
                break
            index -= length
    if vector.op is not None and vector.op.op_type == "expand_dims" and vector.op.x.rank == 0:
        return Bound(vector.op.x, SCALAR)  # one run-time scalar, often made a vector once per layer
    return Bound(vector, index)


#: Positions are counted in the state's float dtype up to this size (fp16 holds every integer up
#: to 2048; coremltools' add_fp16_cast may turn fp32 arithmetic into fp16 after the pass), so the
#: mask is built on the Neural Engine; on longer axes they are counted in int32.
EXACT_FLOAT_POSITIONS = 2048


@dataclass(frozen=True, eq=False)
class AxisMasks:
    """The masks of one run-time window on one axis of ``size`` elements (``rank`` axes in all)."""

    size: int
    axis: int
    rank: int
    dtype: type  # the state's: the masks' dtype
    count: type  # what positions are counted in: ``dtype``, or int32 on an axis too long for it
    inside: Var  # 1 in the window, 0 outside, shaped (1, …, size, …, 1)
    start: Var  # (1,) of ``count``: the window's first position
    stop: Var  # (1,) of ``count``: one past its last

    def value(self, number: int | list[int] | np.ndarray) -> np.ndarray:
        return _counted(self.count, number)


def window(rewriter: Rewriter, begin: Bound, end: Bound | int, axis: int, rank: int, size: int, dtype) -> AxisMasks:
    """The masks of ``[begin, end)`` on ``axis`` (``end`` an int: ``begin + end``, a squeezed
    axis's one position), built before the op being rewritten the first time a run asks for them."""
    key = ("position masks", begin, end, axis, rank, size, dtype)
    return rewriter.shared(key, lambda: _build(rewriter, begin, end, axis, rank, size, dtype))


def _build(rewriter: Rewriter, begin: Bound, end: Bound | int, axis, rank, size, dtype) -> AxisMasks:
    add = rewriter.add
    name = f"state_position_{axis}"
    count = dtype if size <= EXACT_FLOAT_POSITIONS else types.int32
    start = _position(rewriter, begin, size, count, name + "_start", squeezed=isinstance(end, int))
    if isinstance(end, int):
        stop = add("add", name + "_stop", x=start, y=_counted(count, end))
    else:
        stop = _position(rewriter, end, size, count, name + "_stop", squeezed=False, missing=size)
    shape = [1] * rank
    shape[axis] = size
    positions = _counted(count, np.arange(size).reshape(shape))
    if count == types.int32:
        after_start = add("greater_equal", name + "_after_start", x=positions, y=start)
        before_stop = add("less", name + "_before_stop", x=positions, y=stop)
        inside = add("logical_and", name + "_inside", x=after_start, y=before_stop)
        mask = add("cast", name + "_mask", x=inside, dtype=_dtype_name(dtype))
        return AxisMasks(size, axis, rank, dtype, count, mask, start, stop)
    # Integers in floats: clip(p - start + 1, 0, 1) is 1 from start on, clip(stop - p, 0, 1) before stop.
    zero, one = _counted(count, 0), _counted(count, 1)
    from_start = add("sub", name + "_from_start", x=positions, y=start)
    from_start = add("add", name + "_from_start_1", x=from_start, y=one)
    after_start = add("clip", name + "_after_start", x=from_start, alpha=zero, beta=one)
    to_stop = add("sub", name + "_to_stop", x=stop, y=positions)
    before_stop = add("clip", name + "_before_stop", x=to_stop, alpha=zero, beta=one)
    mask = add("mul", name + "_mask", x=after_start, y=before_stop)
    return AxisMasks(size, axis, rank, dtype, count, mask, start, stop)


def _position(
    rewriter: Rewriter, bound: Bound, size: int, count, name: str, *, squeezed: bool, missing: int = 0
) -> Var:
    """The bound as numpy reads it, a (1,) of ``count``: ``missing`` for a masked bound; a
    negative one plus ``size``; clipped to ``[0, size]`` (a squeezed index is in range or
    invalid). Counted in fp16, a bound beyond ±2048 rounds, and is clipped the same."""
    add = rewriter.add
    if bound.vector is None:
        return rewriter.const(_counted(count, [missing]), name)
    if bound.vector.val is not None:  # a constant bound of a run-time window's other end
        value = int(np.asarray(bound.vector.val).reshape(-1)[max(bound.index, 0)])
        return rewriter.const(_counted(count, [numpy_position(value, size, squeezed)]), name)
    if bound.index == SCALAR:
        entry = add("expand_dims", name + "_entry", x=bound.vector, axes=[0])
    else:
        begin, end = np.array([bound.index], np.int32), np.array([bound.index + 1], np.int32)
        entry = add("slice_by_index", name + "_entry", x=bound.vector, begin=begin, end=end)
    if entry.dtype != count:
        entry = add("cast", name + "_counted", x=entry, dtype=_dtype_name(count))
    negative = add("less", name + "_negative", x=entry, y=_counted(count, 0))
    from_end = add("add", name + "_from_end", x=entry, y=_counted(count, size))
    position = add("select", name + "_wrapped", cond=negative, a=from_end, b=entry)
    if squeezed:
        return position
    at_least_0 = add("maximum", name + "_at_least_0", x=position, y=_counted(count, 0))
    return add("minimum", name, x=at_least_0, y=_counted(count, size))


def inside_and_keep(rewriter: Rewriter, masks: AxisMasks, constant: np.ndarray | None) -> tuple[Var, Var]:
    """The mask of a write (``masks.inside`` times ``constant``, the windows of its constant
    axes) and ``1 - mask``; shared by every write without a constant part."""
    key = ("position blend", masks, None if constant is None else (constant.shape, constant.tobytes()))

    def build() -> tuple[Var, Var]:
        one = np.array(1, types.nptype_from_builtin(masks.dtype))
        name, mask = f"state_position_{masks.axis}", masks.inside
        if constant is not None:
            mask = rewriter.add("mul", name + "_written", x=mask, y=constant)
        return mask, rewriter.add("sub", name + "_kept", x=one, y=mask)

    return rewriter.shared(key, build)


def one_hot(rewriter: Rewriter, masks: AxisMasks, rows: int | None) -> Var:
    """``P[i, j] = 1 if i - start == j``, of shape ``(size, rows)`` (``rows`` None: ``stop -
    start``, known at run time): ``matmul(P, update)`` places the update's rows at ``start``."""
    return rewriter.shared(("position one-hot", masks, rows), lambda: _one_hot(rewriter, masks, rows))


def _one_hot(rewriter: Rewriter, masks: AxisMasks, rows: int | None) -> Var:
    add = rewriter.add
    name = f"state_position_{masks.axis}_one_hot"
    column = masks.value(np.arange(masks.size).reshape(masks.size, 1))
    offsets = add("sub", name + "_offsets", x=column, y=masks.start)  # (size, 1)
    if rows is None:
        count = add("sub", name + "_rows", x=masks.stop, y=masks.start)
        if masks.count != types.int32:
            count = add("cast", name + "_rows_int32", x=count, dtype="int32")
        count = add("squeeze", name + "_count", x=count, axes=[0])
        row = add("range_1d", name + "_row", start=np.int32(0), end=count, step=np.int32(1))
        if masks.count != types.int32:
            row = add("cast", name + "_row_counted", x=row, dtype=_dtype_name(masks.count))
    else:
        row = masks.value(np.arange(rows))
    if masks.count == types.int32:
        hits = add("equal", name + "_hits", x=offsets, y=row)
        return add("cast", name, x=hits, dtype=_dtype_name(masks.dtype))
    # Integers in floats: 1 - |i - start - j| is 1 where they are equal, at most 0 elsewhere.
    apart = add("sub", name + "_apart", x=offsets, y=row)
    distance = add("abs", name + "_distance", x=apart)
    closeness = add("sub", name + "_closeness", x=masks.value(1), y=distance)
    return add("relu", name, x=closeness)


def numpy_position(bound: int, size: int, squeezed: bool) -> int:
    """A constant bound as numpy reads it on an axis of ``size`` (see the module's docstring)."""
    position = bound + size if bound < 0 else bound
    return position if squeezed else min(max(position, 0), size)


def _counted(count, number) -> np.ndarray:
    """``number`` as an array of the dtype positions are counted in."""
    return np.asarray(number, types.nptype_from_builtin(count))


def _dtype_name(dtype) -> str:
    return types.builtin_to_string(dtype)

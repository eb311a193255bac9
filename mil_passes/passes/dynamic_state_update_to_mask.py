"""``webnn::dynamic_state_update_to_mask``: a state written at run-time positions becomes a masked
blend of the whole state.

Lint rule: ``ane-dynamic-state-update``. Slot in ``pipeline()``: after ``remove_redundant_ops``
(the layers' copies of the run-time offset are one var by then, so one mask serves them all),
before ``add_fp16_cast``; ``matmul_rank5_to_rank4`` runs again after it.

Given (a KV cache written at the run-time position ``%pos``, as coremltools converts
``k_cache[:, :, pos:pos + T, :] = k``)::

    %cache = read_state(input=%k_cache)                                  # (1, 2, 16, 8) fp16
    %begin = concat(values=([0, 0], %pos, [0]), axis=0)
    %end = concat(values=([1, 2], %pos_end, [8]), axis=0)
    %written = slice_update(x=%cache, update=%k, begin=%begin, end=%end)   # %k: (1, 2, T, 8)
    %new = coreml_update_state(state=%k_cache, value=%written)

Result (the mask and the one-hot placement built once per block for each run-time offset, and
shared by every layer that writes there)::

    %start = minimum(maximum(select(less(%p, 0), %p + 16, %p), 0), 16)  # numpy's reading,
    %stop = ... the same of %pos_end ...                  # %p = cast(%pos, "fp16"): exact to 2048
    %m = mul(clip(arange(16) - %start + 1, 0, 1), clip(%stop - arange(16), 0, 1))   # (1, 1, 16, 1)
    %keep = sub(x=1, y=%m)                                                       # (1, 1, 16, 1)
    %P = relu(1 - abs(arange(16)[:, None] - %start - arange(T)))                 # (16, T) one-hot
    %placed = matmul(x=%P, y=%k)                                                 # (1, 2, 16, 8)
    %written = add(x=mul(x=%cache, y=%keep), y=mul(x=%placed, y=%m))
    %new = coreml_update_state(state=%k_cache, value=%written)

Positions are counted in the state's dtype (fp16 holds every integer up to 2048), so the mask is
built by ops the Neural Engine runs; on an axis longer than 2048 they are counted in int32
(comparisons, ``logical_and``, a cast). One new row (``T`` = 1, a decode step) is placed by
broadcasting, without the matmul; the matmul's batch axes are merged to rank 3. A rank-5 state
is blended in rank 4 (a singleton axis merged into its neighbour, reshaped back). Axes written
at constant positions narrower than the state (the layer of a ``[layers, …]`` cache) multiply
the mask by a constant one; their rows are padded with zeros (or broadcast, a single row).

Exact for finite values: every kept element is multiplied by 1 and gets ``+ 0``, every written
one is ``0 + u`` and each output of the one-hot matmul has one nonzero term. Not exact for
non-finite ones: an inf or NaN in the cache where the window writes becomes NaN (``inf * 0``),
and an inf or NaN row of the update makes NaN of the whole column it is multiplied along
(``0 * inf`` in the matmul and in ``placed * 0``). A ``-0`` in the cache or the update may come
out ``+0`` (``-0 + +0``). A cache of finite fp16 values, as every write of finite keys and values
keeps it, is written bit for bit.

The Neural Engine rejects a state written at a run-time offset (apple/coreai-torch#6); the
blend of the whole state is elementwise and runs there (Apple's ``neural_engine_rules.md``: no
cache writes at run-time positions inside the model). Refused: a strided write, masks that are
not constants, a state of run-time shape, run-time bounds on more than one axis, an integer state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, types
from coremltools.converters.mil.mil.types.symbolic import any_symbolic, is_symbolic

from ..rewriter import PatternPass, Refusal, RewritePattern, Rewriter
from ..semantics import slice_positions
from . import register
from ._position_masks import Bound, PositionMasks, source_of
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


def plan(op: Operation) -> Write | Refusal | None:
    """The run-time write ``op`` makes, or why it is left (None: not a run-time state write)."""
    if op.begin.val is not None and op.end.val is not None or not _writes_state(op):
        return None
    shape = op.x.shape
    if not types.is_float(op.x.dtype):
        return Refusal(op, "writes an integer state: the masked blend multiplies")
    if any_symbolic(shape):
        return Refusal(op, "the state's shape is known only at run time")
    rank = len(shape)
    stride = op.stride.val if op.stride is not None else np.ones(rank)
    if stride is None or any(int(s) != 1 for s in np.asarray(stride).reshape(-1)):
        return Refusal(op, "a strided write (only stride 1 becomes a window)")
    begin_mask, end_mask, squeeze = (_flags(op, n, rank) for n in ("begin_mask", "end_mask", "squeeze_mask"))
    if begin_mask is None or end_mask is None or squeeze is None:
        return Refusal(op, "its begin, end or squeeze masks are computed at run time")
    values = Values()
    begins, ends = values.elements(op.begin), values.elements(op.end)
    if begins is None or ends is None or begins.shape != (rank,) or ends.shape != (rank,):
        return Refusal(op, "its begin and end are not vectors of one entry per axis")
    runtime: int | None = None
    windows: list[tuple[int, int] | None] = []
    for axis in range(rank):
        begin = 0 if begin_mask[axis] else begins[axis]
        end = int(shape[axis]) if end_mask[axis] or squeeze[axis] else ends[axis]
        if _is_int(begin) and _is_int(end):
            positions = slice_positions(int(shape[axis]), int(begin), int(end), 1, squeeze=squeeze[axis])
            if not positions:
                return Refusal(op, f"it writes nothing along axis {axis}")
            windows.append((positions.start, positions.start + len(positions)))
            continue
        if runtime is not None:
            return Refusal(op, f"it writes at run-time positions on axes {runtime} and {axis}")
        runtime = axis
        windows.append(None)
    if runtime is None:
        return Refusal(op, "its positions are constants that const_elimination has not folded")
    squeezed = tuple(a for a in range(rank) if squeeze[a])
    update_shape = list(op.update.shape)
    for axis in squeezed:
        update_shape.insert(axis, 1)
    if len(update_shape) != rank:
        return Refusal(op, "its update does not have the window's rank")
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


class RuntimeStateWrite(RewritePattern[Write]):
    """``slice_update`` of a state at run-time positions → ``state * (1 - m) + placed(update) * m``."""

    op_types = ("slice_update",)
    rule = "ane-dynamic-state-update"

    def __init__(self) -> None:
        self._masks: PositionMasks | None = None

    def match(self, op: Operation) -> Write | Refusal | None:
        return plan(op)

    def describe(self, op: Operation, match: Write) -> str:
        return (
            f"slice_update '{op.name}' writes a state at run-time positions on axis {match.axis}, which the Neural "
            "Engine rejects: it becomes a masked blend of the whole state (a position mask shared by every layer)"
        )

    def cause(self, op: Operation, match: Write) -> str:
        return "writes a state at run-time positions: a masked blend of the whole state"

    def rewrite(self, op: Operation, match: Write, rewriter: Rewriter) -> None:
        if self._masks is None or self._masks.rewriter is not rewriter:
            self._masks = PositionMasks(rewriter)
        out, shape, dtype = op.outputs[0], tuple(int(d) for d in op.x.shape), op.x.dtype
        update = op.update
        if match.squeezed:
            update = rewriter.emit(op, "expand_dims", f"{out.name}_update", x=update, axes=list(match.squeezed))
        padding = _padding(match.windows, shape)
        if padding is not None:
            update = rewriter.emit(op, "pad", f"{out.name}_padded", x=update, pad=padding, mode="constant")
        merge = _singleton_merge(shape, update.shape, match.axis)
        blend_shape = shape if merge is None else _merged(shape, merge)
        axis = match.axis if merge is None or match.axis <= merge else match.axis - 1
        masks = self._masks.window(op, match.begin, match.end, axis, len(blend_shape), shape[match.axis], dtype)
        placed = update if match.rows == 1 else self._placed(op, update, masks, match, rewriter)
        constant = _constant_mask(match.windows, shape, dtype)
        state = op.x
        if merge is not None:  # the blend in rank 4: a singleton axis merged into its neighbour
            constant = None if constant is None else constant.reshape(_merged(constant.shape, merge))
            state = rewriter.emit(op, "reshape", f"{out.name}_rank4", x=state, shape=np.array(blend_shape, np.int32))
            target = np.array(_merged(tuple(int(d) for d in placed.shape), merge), np.int32)
            placed = rewriter.emit(op, "reshape", f"{out.name}_placed_rank4", x=placed, shape=target)
        mask, keep = self._masks.inside_and_keep(op, masks, constant)
        kept = rewriter.emit(op, "mul", f"{out.name}_kept", x=state, y=keep)
        written = rewriter.emit(op, "mul", f"{out.name}_written", x=placed, y=mask)
        blend_name = out.name if merge is None else f"{out.name}_blend"
        result = rewriter.emit(op, "add", blend_name, x=kept, y=written)
        if merge is not None:
            result = rewriter.emit(op, "reshape", out.name, x=result, shape=np.array(shape, np.int32))
        rewriter.replace(out, result)

    def _placed(self, op: Operation, update, masks, match: Write, rewriter: Rewriter):
        """The update's rows at their run-time positions along the axis: a one-hot matmul, on the
        last two axes (the written axis moved next to last unless it is last), its batch axes
        merged into one where the tensor has more than 4 (the Neural Engine's matmul takes rank 4)."""
        assert self._masks is not None
        one_hot = self._masks.one_hot(op, masks, match.rows)
        rank, axis, name = len(op.x.shape), match.axis, f"{op.outputs[0].name}_placed"
        perm = None
        if axis < rank - 2:
            perm = list(range(rank))
            perm[axis], perm[rank - 2] = rank - 2, axis
            update = rewriter.emit(op, "transpose", f"{name}_moved", x=update, perm=perm)
        last = axis == rank - 1
        lead, rows_at = tuple(update.shape[:-2]), rank - 1 if last else rank - 2
        other = update.shape[rank - 2 if last else rank - 1]
        merged = rank > 4 and not any_symbolic(lead) and not is_symbolic(other)
        if merged:
            target = [
                int(np.prod(lead)),
                *(-1 if i == rows_at else int(d) for i, d in enumerate(update.shape) if i >= rank - 2),
            ]
            update = rewriter.emit(op, "reshape", f"{name}_batched", x=update, shape=np.array(target, np.int32))
        if last:
            product = rewriter.emit(op, "matmul", f"{name}_rows", x=update, y=one_hot, transpose_y=True)
        else:
            product = rewriter.emit(op, "matmul", f"{name}_rows", x=one_hot, y=update)
        if merged:
            tail = (int(other), masks.size) if last else (masks.size, int(other))
            product = rewriter.emit(
                op, "reshape", f"{name}_unbatched", x=product, shape=np.array([*map(int, lead), *tail], np.int32)
            )
        if perm is not None:
            product = rewriter.emit(op, "transpose", name, x=product, perm=perm)
        return product


def _singleton_merge(shape: tuple[int, ...], update_shape, axis: int) -> int | None:
    """For a rank-5 state: an axis ``i`` such that axes ``i`` and ``i + 1`` merge exactly (one of
    them has size 1, so every operand of the blend broadcasts the same at rank 4), or None. The
    update's sizes must be static (it is reshaped), but for the rows it writes on ``axis``."""
    if len(shape) != 5 or any(is_symbolic(d) for i, d in enumerate(update_shape) if i != axis):
        return None
    return next((i for i in range(4) if 1 in (shape[i], shape[i + 1])), None)


def _merged(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """``shape`` with axes ``axis`` and ``axis + 1`` merged into one."""
    return (*shape[:axis], shape[axis] * shape[axis + 1], *shape[axis + 2 :])


def _padding(windows, shape) -> np.ndarray | None:
    """Zeros around the update on the constant axes it covers only in part (a window of one
    position broadcasts instead), or None when none needs them."""
    pads = []
    for window, size in zip(windows, shape):
        start, stop = window if window is not None and window[1] - window[0] > 1 else (0, size)
        pads += [start, size - stop]
    return np.array(pads, np.int32) if any(pads) else None


def _constant_mask(windows, shape, dtype) -> np.ndarray | None:
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


@register("dynamic_state_update_to_mask")
class DynamicStateUpdateToMask(PatternPass):
    """Rewrite every state written at run-time positions as a masked blend of the whole state."""

    name = "webnn::dynamic_state_update_to_mask"

    def patterns(self) -> list[RewritePattern]:
        return [RuntimeStateWrite()]

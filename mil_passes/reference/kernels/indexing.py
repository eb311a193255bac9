"""Indexing kernels: gathers, scatters, one_hot, slice updates, windows and sorting.

Index rules, as MIL defines them:

- Before iOS17, an index may be negative (``-D <= i < D``, counted from the end).
- From iOS17 on (the ops that take ``validate_indices``), negative indices are out of bounds.
- An out-of-bounds index is undefined behaviour on Core ML, so these kernels raise
  :class:`~mil_passes.reference.errors.PredictionError` (a ``ValueError``) naming the op, the
  index and the valid range instead of inventing a value; ``predict`` reports it as Core ML's
  ``predict`` reports a model that fails (``RuntimeError``), which is what coremltools' op tests
  pin for ``validate_indices=True``.
- A scatter with ``validate_indices=False`` (iOS17+) drops the updates whose index is out of
  range: Core ML's result is undefined there, and the op tests pin only that it is not the
  result of wrapping the index.
- Integer ``div`` scatters have no documented rounding: ``UnsupportedOpError``.

Scatter modes (``update``, ``add``, ``sub``, ``mul``, ``div``, ``max``, ``min``) apply the
updates one at a time in row-major order of ``updates``: duplicate indices accumulate, and for
``update`` the last write wins. fp16 arithmetic is done in fp32 and rounded once at the end.
Sorts are stable: equal values keep their input order (``torch.sort(stable=True)``).

coremltools' own ``value_inference`` is replaced here where it is missing (``gather_nd``,
``scatter``, ``scatter_nd``, ``one_hot``, …) or wrong: ``scatter_along_axis`` ignores ``mode``,
``cumsum(exclusive=True)`` raises, ``band_part`` multiplies (NaN/inf leak out of the band,
-0.0 appears), ``topk``/``argsort`` negate the input (wraps for unsigned ints) and sort unstably.
"""

from __future__ import annotations

import numpy as np

from ..errors import PredictionError, UnsupportedOpError
from . import kernel

SCATTER_MODES = ("update", "add", "sub", "mul", "div", "max", "min")

_REDUCERS = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "max": np.maximum,
    "min": np.minimum,
}


# -- shared helpers ---------------------------------------------------------------------------


def _describe(op) -> str:
    return f"op '{op.name}' ({op.op_type})"


def _axis(op, axis, rank: int) -> int:
    value = int(np.asarray(axis))
    if not -rank <= value < rank:
        raise ValueError(f"{_describe(op)}: axis {value} is out of range for rank {rank}")
    return value + rank if value < 0 else value


def _flag(args: dict, name: str, default: bool = False) -> bool:
    value = args.get(name)
    return default if value is None else bool(np.asarray(value))


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """fp16 is computed in fp32 and rounded once, when the interpreter casts the result."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def checked_indices(op, indices, sizes, what: str = "") -> np.ndarray:
    """``indices`` as int64 in ``[0, size)``, with negatives resolved where the opset allows.

    ``sizes`` broadcasts against ``indices`` (a scalar, or one size per last-axis component for
    ``*_nd`` ops). Raises ``ValueError`` for any index outside the valid range.
    """
    indices = np.asarray(indices).astype(np.int64)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.int64), indices.shape)
    negatives_allowed = "validate_indices" not in op.inputs
    low = -sizes if negatives_allowed else np.zeros_like(sizes)
    bad = (indices < low) | (indices >= sizes)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        value, size = int(indices[where]), int(sizes[where])
        valid = f"[{-size}, {size})" if negatives_allowed else f"[0, {size})"
        note = " (iOS17+ takes no negative indices)" if value < 0 and not negatives_allowed else ""
        raise PredictionError(
            f"{_describe(op)}: index {value} at {list(where)} of 'indices' is out of range {valid}{what}{note}"
        )
    return np.where(indices < 0, indices + sizes, indices)


def scatter_indices(op, args, sizes, what: str = "") -> tuple[np.ndarray, np.ndarray | None]:
    """A scatter's indices as :func:`checked_indices` gives them, and ``None``; or, with
    ``validate_indices=False``, the indices (out-of-range ones set to 0) and the mask of the
    in-range ones: the updates to keep."""
    raw = np.asarray(args["indices"]).astype(np.int64)
    if args.get("validate_indices") is None or bool(np.asarray(args["validate_indices"])):
        return checked_indices(op, raw, sizes, what), None
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.int64), raw.shape)
    valid = (raw >= 0) & (raw < sizes)
    return np.where(valid, raw, 0), valid


def _apply_scatter(
    op, data: np.ndarray, targets: np.ndarray, updates: np.ndarray, mode: str, keep: np.ndarray | None = None
):
    """Apply ``updates`` to ``data.flat[targets]`` one by one, in order, by ``mode``; only where
    ``keep`` (broadcast against ``targets``) is true, when it is given."""
    if mode not in SCATTER_MODES:
        raise ValueError(f"{_describe(op)}: unknown mode '{mode}' (MIL modes: {', '.join(SCATTER_MODES)})")
    dtype = _work_dtype(data.dtype)
    if mode == "div" and np.issubdtype(dtype, np.integer):
        detail = f"mode 'div' on {data.dtype} data has no documented rounding"
        raise UnsupportedOpError(op.op_type, op.name, detail)
    out = data.astype(dtype).reshape(-1)
    values = updates.astype(dtype).reshape(-1)
    if keep is not None:
        kept = np.broadcast_to(keep, targets.shape).reshape(-1)
        targets, values = targets.reshape(-1)[kept], values[kept]
    targets = targets.reshape(-1)
    if mode == "update":
        # the last write to each position wins
        reversed_first = np.unique(targets[::-1], return_index=True)[1]
        last = targets.size - 1 - reversed_first
        out[targets[last]] = values[last]
    else:
        with np.errstate(all="ignore"):
            _REDUCERS[mode].at(out, targets, values)
    return out.reshape(data.shape)


# -- gathers ----------------------------------------------------------------------------------


@kernel("gather_along_axis")
def gather_along_axis(op, args):
    x = np.asarray(args["x"])
    axis = _axis(op, args["axis"], x.ndim)
    indices = checked_indices(op, args["indices"], x.shape[axis], f" on axis {axis}")
    return np.take_along_axis(x, indices, axis=axis)


@kernel("gather_nd")
def gather_nd(op, args):
    x = np.asarray(args["x"])
    batch_dims = int(np.asarray(args["batch_dims"])) if args.get("batch_dims") is not None else 0
    raw = np.asarray(args["indices"])
    depth = raw.shape[-1]
    sizes = x.shape[batch_dims : batch_dims + depth]
    indices = checked_indices(op, raw, np.asarray(sizes, dtype=np.int64))
    lead_shape = indices.shape[:-1]
    batch_grids = np.indices(lead_shape, sparse=True)[:batch_dims]
    index = [np.broadcast_to(grid, lead_shape) for grid in batch_grids]
    index += [indices[..., k] for k in range(depth)]
    if not index:  # indices [..., 0]: every entry selects all of x
        return np.broadcast_to(x, lead_shape + x.shape).copy()
    return x[tuple(index)]


# -- scatters ---------------------------------------------------------------------------------


@kernel("scatter")
def scatter(op, args):
    data = np.asarray(args["data"])
    axis = _axis(op, args["axis"], data.ndim)
    indices, keep = scatter_indices(op, args, data.shape[axis], f" on axis {axis}")
    before = int(np.prod(data.shape[:axis], dtype=np.int64))
    after = int(np.prod(data.shape[axis + 1 :], dtype=np.int64))
    rows = np.arange(before, dtype=np.int64)[:, None, None] * data.shape[axis]
    targets = (rows + indices.reshape(1, -1, 1)) * after + np.arange(after)[None, None, :]
    keep = None if keep is None else keep.reshape(1, -1, 1)
    return _apply_scatter(op, data, targets, np.asarray(args["updates"]), str(args["mode"]), keep)


@kernel("scatter_along_axis")
def scatter_along_axis(op, args):
    data = np.asarray(args["data"])
    axis = _axis(op, args["axis"], data.ndim)
    indices, keep = scatter_indices(op, args, data.shape[axis], f" on axis {axis}")
    coords = list(np.indices(indices.shape, sparse=True))
    coords[axis] = indices
    targets = np.ravel_multi_index(np.broadcast_arrays(*coords), data.shape)
    return _apply_scatter(op, data, targets, np.asarray(args["updates"]), str(args["mode"]), keep)


@kernel("scatter_nd")
def scatter_nd(op, args):
    data = np.asarray(args["data"])
    depth = np.asarray(args["indices"]).shape[-1]
    indices, keep = scatter_indices(op, args, np.asarray(data.shape[:depth], dtype=np.int64))
    keep = None if keep is None else keep.all(axis=-1, keepdims=True)
    inner = int(np.prod(data.shape[depth:], dtype=np.int64))
    if depth:
        components = tuple(indices[..., k] for k in range(depth))
        lead = np.ravel_multi_index(components, data.shape[:depth])
    else:
        lead = np.zeros(indices.shape[:-1], dtype=np.int64)
    targets = lead[..., None] * inner + np.arange(inner)
    return _apply_scatter(op, data, targets, np.asarray(args["updates"]), str(args["mode"]), keep)


# -- one_hot, slice_update, crop, reshape_like ------------------------------------------------


@kernel("one_hot")
def one_hot(op, args):
    """Indices outside ``[0, one_hot_vector_size)`` give a vector of ``off_value`` (TF's rule)."""
    indices = np.asarray(args["indices"]).astype(np.int64)
    depth = int(np.asarray(args["one_hot_vector_size"]))
    axis = int(np.asarray(args["axis"]))
    axis = axis + indices.ndim + 1 if axis < 0 else axis
    hot = np.expand_dims(indices, axis) == np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    return np.where(hot, np.asarray(args["on_value"]), np.asarray(args["off_value"]))


@kernel("slice_update")
def slice_update(op, args):
    """``x[begin:end:stride] = update`` per axis, with the masks of ``slice_by_index``."""
    x = np.asarray(args["x"])
    rank = x.ndim
    begin = np.asarray(args["begin"]).reshape(-1).tolist()
    end = np.asarray(args["end"]).reshape(-1).tolist()
    stride = args.get("stride")
    stride = [1] * rank if stride is None else np.asarray(stride).reshape(-1).tolist()
    masks = {
        name: np.zeros(rank, bool) if args.get(name) is None else np.asarray(args[name]).reshape(-1)
        for name in ("begin_mask", "end_mask", "squeeze_mask")
    }
    window = []
    for axis in range(rank):
        if masks["squeeze_mask"][axis]:  # a masked begin is 0, as in slice_by_index
            index = 0 if masks["begin_mask"][axis] else int(begin[axis])
            if not -x.shape[axis] <= index < x.shape[axis]:
                raise ValueError(
                    f"{_describe(op)}: squeezed index {index} is out of range for axis {axis} of size {x.shape[axis]}"
                )
            window.append(index)
            continue
        start = None if masks["begin_mask"][axis] else int(begin[axis])
        stop = None if masks["end_mask"][axis] else int(end[axis])
        window.append(slice(start, stop, int(stride[axis])))
    out = x.copy()
    region = out[tuple(window)]
    update = np.asarray(args["update"])
    if update.size != region.size:
        raise ValueError(f"{_describe(op)}: 'update' has shape {update.shape} but the slice has shape {region.shape}")
    out[tuple(window)] = update.reshape(region.shape)
    return out


@kernel("crop")
def crop(op, args):
    x = np.asarray(args["x"])
    top, bottom = (int(v) for v in np.asarray(args["crop_height"]).reshape(-1))
    left, right = (int(v) for v in np.asarray(args["crop_width"]).reshape(-1))
    height, width = x.shape[-2:]
    return x[..., top : height - bottom, left : width - right]


@kernel("reshape_like")
def reshape_like(op, args):
    shape: list[int] = []
    for ref, begin, end, end_mask in zip(args["ref_tensors"], args["begins"], args["ends"], args["end_masks"]):
        ref_shape = np.asarray(ref).shape
        start = int(np.asarray(begin))
        stop = None if bool(np.asarray(end_mask)) else int(np.asarray(end))
        shape += ref_shape[start:stop]
    return np.asarray(args["x"]).reshape(shape)


# -- space_to_batch / batch_to_space / sliding_windows / band_part ----------------------------


def _block(args: dict) -> tuple[int, int]:
    block_h, block_w = (int(v) for v in np.asarray(args["block_shape"]).reshape(-1))
    return block_h, block_w


@kernel("space_to_batch")
def space_to_batch(op, args):
    """TF's ``space_to_batch_nd`` in NCHW: output batch ``(i_h * block_w + i_w) * N + n``."""
    x = np.asarray(args["x"])
    block_h, block_w = _block(args)
    pads = np.asarray(args["paddings"]).reshape(2, 2).astype(int)
    padded = np.pad(x, ((0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])))
    n, c, h, w = padded.shape
    blocks = padded.reshape(n, c, h // block_h, block_h, w // block_w, block_w)
    blocks = blocks.transpose(3, 5, 0, 1, 2, 4)
    return blocks.reshape(block_h * block_w * n, c, h // block_h, w // block_w)


@kernel("batch_to_space")
def batch_to_space(op, args):
    """Inverse of ``space_to_batch``, then ``crops`` are removed from each spatial axis."""
    x = np.asarray(args["x"])
    block_h, block_w = _block(args)
    crops = np.asarray(args["crops"]).reshape(2, 2).astype(int)
    batch, c, h, w = x.shape
    n = batch // (block_h * block_w)
    blocks = x.reshape(block_h, block_w, n, c, h, w).transpose(2, 3, 4, 0, 5, 1)
    full = blocks.reshape(n, c, h * block_h, w * block_w)
    return full[:, :, crops[0, 0] : h * block_h - crops[0, 1], crops[1, 0] : w * block_w - crops[1, 1]]


@kernel("sliding_windows")
def sliding_windows(op, args):
    x = np.asarray(args["x"])
    axis = _axis(op, args["axis"], x.ndim)
    size = int(np.asarray(args["size"]))
    stride = int(np.asarray(args["stride"])) if args.get("stride") is not None else 1
    count = (x.shape[axis] - size) // stride + 1
    starts = np.arange(count) * stride
    positions = starts[:, None] + np.arange(size)[None, :]
    return np.take(x, positions, axis=axis)


@kernel("band_part")
def band_part(op, args):
    """Keep ``lower`` sub- and ``upper`` super-diagonals (negative: all); zero the rest."""
    x = np.asarray(args["x"])
    lower = int(np.asarray(args["lower"]))
    upper = int(np.asarray(args["upper"]))
    rows, cols = x.shape[-2:]
    offset = np.arange(rows)[:, None] - np.arange(cols)[None, :]
    keep = ((lower < 0) | (offset <= lower)) & ((upper < 0) | (-offset <= upper))
    return np.where(keep, x, np.zeros((), dtype=x.dtype))


# -- cumsum and sorting -----------------------------------------------------------------------


@kernel("cumsum")
def cumsum(op, args):
    x = np.asarray(args["x"])
    axis = _axis(op, args["axis"], x.ndim)
    reverse = _flag(args, "reverse")
    data = np.flip(x, axis) if reverse else x
    total = np.cumsum(data, axis=axis, dtype=_work_dtype(x.dtype))
    if _flag(args, "exclusive"):
        zeros = np.zeros_like(np.take(total, [0], axis=axis))
        shifted = np.take(total, np.arange(x.shape[axis] - 1), axis=axis)
        total = np.concatenate([zeros, shifted], axis)
    return np.flip(total, axis) if reverse else total


def stable_argsort(x: np.ndarray, axis: int, ascending: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis``; equal values keep their input order.

    Descending order is built without negating ``x`` (which wraps for unsigned ints): sort the
    reversed axis ascending, reverse the result, and map positions back. NaN sorts as the
    largest value, as in ``torch.sort``.
    """
    if ascending:
        return np.argsort(x, axis=axis, kind="stable")
    size = x.shape[axis]
    flipped_order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return size - 1 - np.flip(flipped_order, axis)


@kernel("argsort")
def argsort(op, args):
    x = np.asarray(args["x"])
    axis = _axis(op, args["axis"], x.ndim)
    return stable_argsort(x, axis, _flag(args, "ascending"))


@kernel("topk")
def topk(op, args):
    """Top ``k`` values and their indices, sorted (also when ``sort=False`` leaves order free)."""
    x = np.asarray(args["x"])
    axis = _axis(op, args["axis"], x.ndim)
    k = int(np.asarray(args["k"]))
    k = x.shape[axis] if k == -1 else k
    order = np.take(stable_argsort(x, axis, _flag(args, "ascending")), np.arange(k), axis=axis)
    values = np.take_along_axis(x, order, axis=axis)
    if not _flag(args, "return_indices", default=True):
        return values
    return values, order

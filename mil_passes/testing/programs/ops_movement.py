"""Drawing the arguments of the data-movement ops of the op table (concat, slices, split,
stack, transpose, reshape, expand_dims, squeeze, gather, tile).

On a symbolic dim only what holds at every size is drawn: full windows, ``-1`` in reshape.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .grower import (
    MAX_ELEMENTS,
    Grower,
    dtype_of,
    is_static,
    numel,
    shape_of,
)
from .recipe import Operand, Ref
from .ops_base import axis_arg, factor, shape_arg


def add_concat(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    xv = g.var(x)
    shape, rank = shape_of(xv), len(shape_of(xv))
    index = g.draw(st.integers(0, rank - 1))
    others = [d for i, d in enumerate(shape) if i != index]

    def fits(v) -> bool:
        s = shape_of(v)
        rest = [d for i, d in enumerate(s) if i != index]
        return dtype_of(v) == dtype_of(xv) and len(s) == rank and rest == others

    pieces: list[Operand] = [x]
    for _ in range(g.draw(st.integers(1, 5)) - 1):
        piece: Operand | None = g.pick(fits) if g.draw(st.booleans()) else None
        if piece is None and all(is_static(d) for d in others):
            dims = list(shape)
            dims[index] = g.draw(st.integers(1, 4))
            piece = g.const(dtype_of(xv), tuple(dims))
        pieces.append(piece if piece is not None else x)
    pieces = g.shuffle(pieces)
    sizes = [shape_arg(g, p)[index] for p in pieces]
    total = sum(sizes) if all(is_static(s) for s in sizes) else 4 * len(sizes)
    if numel(tuple(others)) * total > MAX_ELEMENTS:
        return None
    args: dict[str, object] = {"values": tuple(pieces), "axis": g.ints(axis_arg(g, index, rank))}
    same = all(shape_arg(g, p) == shape for p in pieces)
    if same and len(pieces) > 1 and g.chance(8):
        args["interleave"] = np.bool_(True)
    return g.emit("concat", args)


def window(g: Grower, dim) -> tuple[int, int, int, bool, bool, int | None]:
    """``(begin, end, stride, begin_mask, end_mask, length)`` of a non-empty window on ``dim``."""
    if not is_static(dim):
        return 0, 0, 1, True, True, None
    stride = g.choose((1, 1, 1, 2, -1))
    begin_mask = g.draw(st.integers(0, 3)) == 0
    end_mask = g.draw(st.integers(0, 3)) == 0
    begin = g.draw(st.integers(-dim, dim - 1))
    end = g.draw(st.integers(-dim, dim))
    chosen = slice(None if begin_mask else begin, None if end_mask else end, stride)
    length = len(range(dim)[chosen])
    if length == 0:
        return 0, 0, 1, True, True, dim
    return begin, end, stride, begin_mask, end_mask, length


def add_slice_by_index(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    shape = shape_of(g.var(x))
    windows = [window(g, d) for d in shape]
    squeeze = [w[5] == 1 and g.chance(3) for w in windows]
    if all(squeeze):
        squeeze[0] = False
    args = {
        "x": x,
        "begin": g.ints([w[0] for w in windows]),
        "end": g.ints([w[1] for w in windows]),
        "stride": g.ints([w[2] for w in windows]),
        "begin_mask": np.array([w[3] for w in windows]),
        "end_mask": np.array([w[4] for w in windows]),
    }
    if any(squeeze):
        args["squeeze_mask"] = np.array(squeeze)
    return g.emit("slice_by_index", args)


def add_slice_by_size(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    begin, size = [], []
    for d in shape_of(g.var(x)):
        b = g.draw(st.integers(0, d - 1)) if is_static(d) else 0
        s = g.draw(st.integers(0, d - b)) if is_static(d) else 0
        begin.append(b)
        size.append(s if s > 0 else -1)
    return g.emit("slice_by_size", {"x": x, "begin": g.ints(begin), "size": g.ints(size)})


def add_split(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    shape = shape_of(g.var(x))
    axes = [i for i, d in enumerate(shape) if is_static(d) and d >= 2]
    if not axes:
        return None
    index = g.choose(axes)
    dim = shape[index]
    args = {"x": x, "axis": g.ints(axis_arg(g, index, len(shape)))}
    divisors = [k for k in range(2, dim + 1) if dim % k == 0]
    if g.draw(st.booleans()):
        args["num_splits"] = g.ints(g.choose(divisors))
    else:
        cuts = sorted(g.subset(range(1, dim), 1, min(2, dim - 1)))
        bounds = [0, *cuts, dim]
        args["split_sizes"] = g.ints([b - a for a, b in zip(bounds, bounds[1:])])
    return g.emit("split", args)


def add_stack(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    xv = g.var(x)
    shape, rank = shape_of(xv), len(shape_of(xv))
    count = g.draw(st.integers(1, 4))
    if numel(shape) * count > MAX_ELEMENTS:
        return None
    values: list[object] = [x]
    for _ in range(count - 1):
        ref = g.pick(lambda v: dtype_of(v) == dtype_of(xv) and shape_of(v) == shape)
        if ref is None and all(is_static(d) for d in shape) and g.draw(st.booleans()):
            values.append(g.const(dtype_of(xv), shape))
        else:
            values.append(ref if ref is not None else x)
    axis = g.draw(st.integers(-(rank + 1), rank))
    return g.emit("stack", {"values": tuple(values), "axis": g.ints(axis)})


def add_transpose(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    rank = len(shape_of(g.var(x)))
    perm = g.shuffle(range(rank))
    return g.emit("transpose", {"x": x, "perm": g.ints(perm)})


def add_reshape(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    shape = shape_of(g.var(x))
    static = int(np.prod([d for d in shape if is_static(d)], dtype=np.int64))
    if all(is_static(d) for d in shape):
        target = factor(g, static, g.draw(st.integers(1, 4)))
        if g.draw(st.booleans()):
            target[g.draw(st.integers(0, len(target) - 1))] = -1
        if len(target) == len(shape):  # 0 copies the dim at the same index (every opset agrees)
            target = [0 if t == d and g.chance(3) else t for t, d in zip(target, shape)]
    else:  # -1 takes every symbolic dim; zeros would leave a literal 0 in the type (docs/evidence.md §3)
        target = factor(g, static, g.draw(st.integers(1, 3))) if static > 1 or g.draw(st.booleans()) else []
        target.insert(g.draw(st.integers(0, len(target))), -1)
    return g.emit("reshape", {"x": x, "shape": g.ints(target)})


def add_expand_dims(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    rank = len(shape_of(g.var(x)))
    count = g.draw(st.integers(1, 2))
    if rank + count > 5:
        return None
    positions = g.subset(range(rank + count), count, count)
    axes = [axis_arg(g, p, rank + count) for p in sorted(positions)]
    return g.emit("expand_dims", {"x": x, "axes": g.ints(axes)})


def add_squeeze(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    shape = shape_of(g.var(x))
    ones = [i for i, d in enumerate(shape) if is_static(d) and d == 1]
    if not ones or len(ones) == len(shape) and len(shape) == 1:
        return None
    # without axes only on static shapes: a symbolic dim that is 1 at run time must stay
    if len(ones) < len(shape) and all(is_static(d) for d in shape) and g.chance(4):
        return g.emit("squeeze", {"x": x})
    chosen = g.subset(ones, 1, min(len(ones), len(shape) - 1))
    return g.emit("squeeze", {"x": x, "axes": g.ints([axis_arg(g, i, len(shape)) for i in sorted(chosen)])})


def add_gather(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    shape = shape_of(g.var(x))
    axes = [i for i, d in enumerate(shape) if is_static(d)]
    if not axes:
        return None
    index = g.choose(axes)
    dim = shape[index]
    indices_shape = g.choose(((), (1,), (2,), (3,), (2, 2)))
    if len(shape) - 1 + len(indices_shape) < 1:
        indices_shape = (1,)
    rest = numel(shape) // int(dim) * int(np.prod(indices_shape, dtype=np.int64))
    if rest > MAX_ELEMENTS:
        return None
    count = int(np.prod(indices_shape, dtype=np.int64))
    indices = g.draw(st.lists(st.integers(-dim, dim - 1), min_size=count, max_size=count))
    indices = g.ints(indices).reshape(indices_shape)
    return g.emit("gather", {"x": x, "indices": indices, "axis": g.ints(axis_arg(g, index, len(shape)))})


def add_tile(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    shape = shape_of(g.var(x))
    reps = [g.choose((1, 1, 2, 3)) for _ in shape]
    if numel(shape) * int(np.prod(reps)) > MAX_ELEMENTS:
        return None
    return g.emit("tile", {"x": x, "reps": g.ints(reps)})

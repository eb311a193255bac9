"""DEFAULT plants of data movement (``optimize_tensor_operation.py``, ``optimize_repeat_ops.py``'s
reshapes, transposes and pads, ``reduce_transposes``, ``remove_redundant_ops``,
``const_deduplication``, ``sanitize_input_output_names``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .default_base import float_dtype, runtime, runtime_of_rank, scalar
from ..programs.grower import Grower, dtype_of, is_static, shape_of
from ..programs.recipe import Ref


def _perm(g: Grower, rank: int) -> list[int]:
    return g.shuffle(range(rank))


def plant_transposes(g: Grower) -> list[Ref]:
    """``transpose(transpose(x, p), q)`` (``merge_consecutive_transposes``), or a transpose, an
    elementwise op and the inverse transpose (``reduce_transposes``); the look-alike: a
    non-inverse second perm, or the middle var also an output."""
    dtype = g.choose(("fp32", "fp16", "int32"))
    rank = g.draw(st.integers(2, 4))
    x = runtime_of_rank(g, rank, dtype)
    perm = _perm(g, rank)
    moved = g.emit("transpose", {"x": x, "perm": g.ints(perm)})[0]
    middle = moved
    if g.draw(st.booleans()):
        op = g.choose(("relu", "add", "mul") if dtype != "int32" else ("add", "mul"))
        args = {"x": moved} if op == "relu" else {"x": moved, "y": scalar(dtype, 2)}
        middle = g.emit(op, args)[0]
    inverse = list(np.argsort(perm)) if g.draw(st.integers(0, 3)) else _perm(g, rank)
    keep = g.emit("transpose", {"x": middle, "perm": g.ints(inverse)})
    if g.chance(5):
        keep.append(middle)
    return keep


def plant_reshapes(g: Grower) -> list[Ref]:
    """``reshape(reshape(x, a), b)``, sometimes three (``merge_consecutive_reshapes``)."""
    dtype = g.choose(("fp32", "int32", "bool"))
    x = runtime_of_rank(g, g.draw(st.integers(1, 3)), dtype)
    size = int(np.prod(g.var(x).shape))
    out = x
    for _ in range(g.draw(st.integers(2, 3))):
        dims = [d for d in range(1, size + 1) if size % d == 0]
        first = g.choose(dims)
        target = [first, size // first] if g.draw(st.booleans()) else [size]
        if g.chance(4):
            target[0] = -1
        out = g.emit("reshape", {"x": out, "shape": g.ints(target)})[0]
    return [out]


def plant_squeeze_expand(g: Grower) -> list[Ref]:
    """``expand_dims(squeeze(x, axes), axes)`` (``fuse_squeeze_expand_dims``); the look-alike
    expands other axes."""
    dtype = g.choose(("fp32", "int32"))
    shape = [g.draw(st.integers(1, 3)) for _ in range(g.draw(st.integers(2, 4)))]
    units = g.subset(range(len(shape)), 1, 2)
    for axis in units:
        shape[axis] = 1
    if len(units) == len(shape):
        shape.append(2)
    x = runtime(g, tuple(shape), dtype)
    narrow = g.emit("squeeze", {"x": x, "axes": g.ints(units)})[0]
    axes = units if g.draw(st.integers(0, 3)) else [0]
    return g.emit("expand_dims", {"x": narrow, "axes": g.ints(axes)})


def plant_stack_split(g: Grower, kinds: tuple[str, ...] = ("reshape", "split")) -> list[Ref]:
    """``stack`` then ``split`` on the same axis then ``squeeze`` of each piece (``fuse_stack_split``),
    or ``stack`` of two then a ``reshape`` that folds the new axis into a neighbour
    (``replace_stack_reshape``); the look-alikes: a split on another axis, an unfolding reshape, a
    stack of three folded (the pass handles two). ``kinds``: what follows the stack, drawn from."""
    dtype = g.choose(("fp32", "int32"))
    rank = g.draw(st.integers(1, 3))
    x = runtime_of_rank(g, rank, dtype)
    shape = tuple(int(d) for d in g.var(x).shape)
    n = g.choose((2, 2, 3))
    parts = [x] + [runtime(g, shape, dtype) for _ in range(n - 1)]
    axis = g.draw(st.integers(0, rank))
    stacked = g.emit("stack", {"values": tuple(parts), "axis": g.ints(axis)})[0]
    if g.choose(kinds) == "reshape":
        dims = list(shape)
        if axis < rank and g.draw(st.booleans()):
            dims[axis] *= n  # the new axis folded into the one after it
        elif axis > 0:
            dims[axis - 1] *= n  # ... or before it (interleaved)
        else:
            dims = [n * int(np.prod(shape))]
        return g.emit("reshape", {"x": stacked, "shape": g.ints(dims)})
    split_axis = axis if g.draw(st.integers(0, 3)) else (axis + 1) % (rank + 1)
    size = int(g.var(stacked).shape[split_axis])
    pieces = g.emit("split", {"x": stacked, "num_splits": scalar("int32", size), "axis": g.ints(split_axis)})
    return [g.emit("squeeze", {"x": piece, "axes": g.ints([split_axis])})[0] for piece in pieces]


def plant_concat_interleave(g: Grower) -> list[Ref]:
    """``reshape(transpose(reshape(concat(a, b, axis=-3), [B, n, C, H, W]), [0, 2, 1, 3, 4]), [B, nC, H, W])``
    (``detect_concat_interleave``), or the nested interleaved concats of a pixel shuffle
    (``concat_to_pixel_shuffle``)."""
    dtype = float_dtype(g)
    shape = (1, g.draw(st.integers(1, 2)), g.draw(st.integers(1, 3)), g.draw(st.integers(1, 3)))
    b, c, h, w = shape
    if g.draw(st.booleans()):
        parts = [runtime(g, shape, dtype) for _ in range(4)]
        inner_axis = 2
        rows = [
            g.emit(
                "concat", {"values": (parts[0], parts[1]), "axis": g.ints(inner_axis), "interleave": np.bool_(True)}
            )[0],
            g.emit(
                "concat", {"values": (parts[2], parts[3]), "axis": g.ints(inner_axis), "interleave": np.bool_(True)}
            )[0],
        ]
        return g.emit("concat", {"values": tuple(rows), "axis": g.ints(3), "interleave": np.bool_(not g.chance(5))})
    n = g.draw(st.integers(2, 3))
    parts = [runtime(g, shape, dtype) for _ in range(n)]
    joined = g.emit("concat", {"values": tuple(parts), "axis": g.ints(-3)})[0]
    split = g.emit("reshape", {"x": joined, "shape": g.ints([b, n, c, h, w])})[0]
    perm = [0, 2, 1, 3, 4] if g.draw(st.integers(0, 3)) else [0, 1, 2, 4, 3]
    moved = g.emit("transpose", {"x": split, "perm": g.ints(perm)})[0]
    out_shape = [int(d) for d in g.var(moved).shape]
    return g.emit("reshape", {"x": moved, "shape": g.ints([b, n * c, out_shape[3], out_shape[4]])})


def plant_reflection_pad(g: Grower) -> list[Ref]:
    """``concat(x[..., 1:2], x, x[..., -2:-1])`` on the last axis: reflection padding by one
    (``use_reflection_padding``); the look-alike takes ``x[..., 0:1]`` (replication)."""
    dtype = float_dtype(g)
    rank = g.draw(st.integers(2, 4))
    shape = [g.draw(st.integers(1, 2)) for _ in range(rank - 1)] + [g.draw(st.integers(3, 5))]
    x = runtime(g, tuple(shape), dtype)

    def window(start: int) -> Ref:
        begin = [0] * (rank - 1) + [start]
        end = [0] * (rank - 1) + [start + 1 if start != -1 else 0]
        mask = [True] * (rank - 1) + [False]
        return g.emit(
            "slice_by_index",
            {
                "x": x,
                "begin": g.ints(begin),
                "end": g.ints(end),
                "begin_mask": np.array(mask),
                "end_mask": np.array(mask[:-1] + [start == -1]),
            },
        )[0]

    left = window(1 if g.draw(st.integers(0, 3)) else 0)
    right = window(-2)
    return g.emit("concat", {"values": (left, x, right), "axis": g.ints(rank - 1)})


def plant_high_rank(g: Grower) -> list[Ref]:
    """``reshape`` to rank 6, ``transpose``, ``reshape`` back to rank ≤ 5
    (``expand_high_rank_reshape_and_transpose``)."""
    dtype = float_dtype(g)
    dims = [g.draw(st.integers(1, 2)) for _ in range(6)]
    size = int(np.prod(dims))
    x = runtime(g, (size,), dtype)
    wide = g.emit("reshape", {"x": x, "shape": g.ints(dims)})[0]
    moved = g.emit("transpose", {"x": wide, "perm": g.ints(_perm(g, 6))})[0]
    return g.emit(
        "reshape", {"x": moved, "shape": g.ints([size // dims[0], dims[0]] if g.draw(st.booleans()) else [size])}
    )


def plant_redundant(g: Grower) -> list[Ref]:
    """Two ops of one type on the same inputs (equal consts), both read (``remove_redundant_ops``);
    the look-alike: a different const."""
    dtype = float_dtype(g)
    x = runtime_of_rank(g, g.draw(st.integers(1, 3)), dtype)
    op = g.choose(("relu", "add", "mul", "reduce_sum"))
    value = g.draw(st.integers(1, 3))

    def one(v: float) -> Ref:
        if op == "relu":
            return g.emit("relu", {"x": x})[0]
        if op == "reduce_sum":
            return g.emit("reduce_sum", {"x": x, "keep_dims": np.bool_(True)})[0]
        return g.emit(op, {"x": x, "y": scalar(dtype, v)})[0]

    first = one(value)
    second = one(value + 1 if g.chance(4) else value)
    return g.emit("sub", {"x": first, "y": second}) if g.draw(st.booleans()) else [first, second]


def plant_large_consts(g: Grower) -> list[Ref]:
    """The same const of 100+ elements read by two ops (``const_deduplication``); the look-alike:
    one element differs."""
    dtype = g.choose(("fp32", "int32"))
    shape = (g.choose((4, 5, 8)), 25)
    x = runtime(g, shape, dtype)
    value = g.const(dtype, shape)
    other = value.copy()
    if g.chance(4):
        other.flat[0] = other.flat[0] + 1
    return [g.emit("add", {"x": x, "y": value})[0], g.emit("mul", {"x": x, "y": other})[0]]


def plant_odd_names(g: Grower) -> list[Ref]:
    """An output named as Core ML names may not be (``sanitize_input_output_names``)."""
    x = g.pick(lambda v: v.val is None and dtype_of(v) != "bool" and len(shape_of(v)) >= 1)
    if x is None:
        return []
    name = g.choose(("out.1", "1st", "y/z", "a-b", "x:0"))
    return g.emit("identity", {"x": x}, name=name)


def plant_symbolic_reshape(g: Grower) -> list[Ref]:
    """``reshape(x, concat(shape(x)[i] ..., consts))`` of a var with symbolic dims, as a frontend
    writes a flatten: the symbolic dims come from ``shape``, the static rest is one const
    (``remove_symbolic_reshape`` solves the symbols or writes -1)."""
    x = g.pick(lambda v: len(shape_of(v)) >= 1 and any(not is_static(d) for d in shape_of(v)))
    if x is None:
        return []
    shape = shape_of(g.var(x))
    dims = g.emit("shape", {"x": x})[0]
    symbolic = [i for i, d in enumerate(shape) if not is_static(d)]
    rest = int(np.prod([int(d) for d in shape if is_static(d)]))
    head = g.emit("gather", {"x": dims, "indices": g.ints(symbolic), "axis": g.ints(0)})[0]
    pieces = (head, g.ints([rest])) if g.draw(st.booleans()) else (g.ints([rest]), head)
    target = g.emit("concat", {"values": pieces, "axis": g.ints(0)})[0]
    return g.emit("reshape", {"x": x, "shape": target})

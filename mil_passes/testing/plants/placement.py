"""Plants of the Neural Engine rewrites: a gather by constant indices, a k=1 topk read for its
index, a rank-5 matmul, a rank-5 elementwise op, a scatter into a rank-5 tensor, data movement on
a rank-5 tensor — each with the look-alikes its pass must leave (run-time indices, too many runs,
values read, broadcast batch axes, index tuples of 4 or 5 axes, a transpose that splits every pair)."""

from __future__ import annotations

import coremltools as ct
import numpy as np
from hypothesis import strategies as st

from ...passes import (
    data_movement_rank5_to_rank4,
    elementwise_rank5_to_rank4,
    gather_to_slice,
    matmul_rank5_to_rank4,
    scatter_rank5_to_rank4,
    topk_to_argmax,
)
from ..programs.grower import NUMERIC, SMALL_INT, Grower, dtype_of, is_static, numel, shape_of
from ..programs.recipe import DTYPES, Ref
from .glue import run_time_head

FLOATS = ("fp32", "fp16")


def _static_var(
    g: Grower, dtypes: tuple[str, ...], min_rank: int, fallback: tuple[int, ...], run_time: bool = False
) -> Ref:
    """A visible var of one of ``dtypes``, of rank ≥ ``min_rank``, with a static size somewhere, and
    no value known only in part (coremltools' value inference of a gather or topk trips on symbols);
    ``run_time``: computed when the program runs (a gather of a known value is const_elimination's)."""
    ref = g.pick(
        lambda v: (
            dtype_of(v) in dtypes
            and len(shape_of(v)) >= min_rank
            and any(map(is_static, shape_of(v)))
            and numel(shape_of(v)) <= 64
            and (v.sym_val is None or v.val is not None)
            and not (run_time and v.val is not None)
        )
    )
    return ref if ref is not None else g.emit("identity", {"x": g.const(g.choose(dtypes), fallback)})[0]


def plant_constant_gather(g: Grower) -> list[Ref]:
    """``gather(x, const indices, axis)``: runs of consecutive positions (one, several, more than
    the pass takes), negative and repeated indices, a 0-d index; now and then run-time indices."""
    x = _static_var(g, NUMERIC + SMALL_INT if g.ios17 else NUMERIC, 1, (2, 6, 3), run_time=not g.chance(6))
    shape = shape_of(g.var(x))
    axis = g.choose([i for i, d in enumerate(shape) if is_static(d)])
    size = int(shape[axis])
    form = g.choose(("run", "run", "runs", "runs", "runs", "scalar", "many", "runtime"))
    if form == "scalar":
        indices = g.ints(g.draw(st.integers(-size, size - 1)))
    elif form == "many":
        indices = g.ints(g.draw(st.lists(st.integers(0, size - 1), min_size=6, max_size=10)))
    else:
        runs = 1 if form == "run" else g.draw(st.integers(2, 4))
        positions: list[int] = []
        for _ in range(runs):
            start = g.draw(st.integers(0, size - 1))
            positions += range(start, g.draw(st.integers(start + 1, size)))
        indices = g.ints([p - size if g.chance(4) else p for p in positions])
    operand: np.ndarray | Ref = indices
    if form == "runtime":
        operand = g.emit("identity", {"x": indices})[0]  # an identity of a const: known only once folded
    axis_arg = axis - len(shape) if g.draw(st.booleans()) else axis
    return g.emit("gather", {"x": x, "indices": operand, "axis": g.ints(axis_arg)})


def plant_top_index(g: Grower) -> list[Ref]:
    """``topk(x, k)`` read for its indices, its values, or both; k = 1 mostly, ascending or not."""
    x = _static_var(g, FLOATS + ("int32",), 1, (2, 5), run_time=not g.chance(6))
    shape = shape_of(g.var(x))
    axis = g.choose([i for i, d in enumerate(shape) if is_static(d)])
    k = 1 if g.draw(st.integers(0, 6)) else min(2, int(shape[axis]))
    args = {"x": x, "k": g.ints(k), "axis": g.ints(axis - len(shape) if g.draw(st.booleans()) else axis)}
    args["ascending"] = np.bool_(g.chance(6))
    values, indices = g.emit("topk", args)
    read = g.choose(("indices",) * 5 + ("values", "both"))
    if read == "indices":  # out of sight, so the values become no output (every unused var does)
        g.scopes[-1][:] = [ref for ref in g.scopes[-1] if ref != values]
    return {"indices": [indices], "values": [values], "both": [values, indices]}[read]


def _seeded(g: Grower, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A const of small integers from one drawn seed: a rank-5 operand drawn element by element
    would fill hypothesis's buffer, and the programs it overran would be dropped with every other
    plant they held."""
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    return rng.integers(-4, 5, size=shape).astype(DTYPES[dtype])


def plant_rank5_matmul(g: Grower) -> list[Ref]:
    """A batched matmul with rank-5 operands: equal batch axes, one broadcast whole, a matrix, a
    rank-3 right side; now and then batch axes that broadcast against each other (left)."""
    dtype = g.choose(FLOATS)
    a, b, c, m, k, n = (g.draw(st.integers(1, 3)) for _ in range(6))
    form = g.choose(("equal", "equal", "whole", "matrix", "rank3", "crossed"))
    x_shape = (a, b, c, m, k)
    y_shape = {
        "equal": (a, b, c, k, n),
        "whole": (1, 1, c, k, n),
        "matrix": (k, n),
        "rank3": (c, k, n),
        "crossed": (1, b, c, k, n) if a > 1 else (a, 2, c, k, n) if b == 1 else (a, 1, c, k, n),
    }[form]
    transpose_x, transpose_y = g.chance(3), g.chance(3)
    if transpose_x:
        x_shape = (*x_shape[:-2], k, m)
    if transpose_y and len(y_shape) >= 2:
        y_shape = (*y_shape[:-2], y_shape[-1], y_shape[-2])
    x = g.emit("identity", {"x": _seeded(g, dtype, x_shape)})[0]
    if g.draw(st.booleans()):
        x = g.emit("add", {"x": x, "y": g.const(dtype, ())})[0]  # computed, not a const
    y_value = _seeded(g, dtype, y_shape)
    y = y_value if g.draw(st.booleans()) else g.emit("identity", {"x": y_value})[0]
    flags = {"transpose_x": np.bool_(transpose_x), "transpose_y": np.bool_(transpose_y)}
    return g.emit("matmul", {"x": x, "y": y, **flags})


def plant_rank5_elementwise(g: Grower) -> list[Ref]:
    """An elementwise op on rank-5 tensors: operands of the output's shape, broadcast whole over the
    leading axes, of rank 3, a scalar; now and then one broadcast across every pair of axes (left)."""
    dtype = g.choose(FLOATS)
    out = tuple(g.draw(st.integers(1, 3)) for _ in range(5))
    form = g.choose(("equal", "leading", "rank3", "scalar", "crossed"))
    if form == "crossed":  # no two adjacent axes merge: every size > 1, the operand 1 on every other axis
        out = tuple(max(d, 2) for d in out)
    y_shape = {
        "equal": out,
        "leading": (1, 1, *out[2:]),
        "rank3": out[2:],
        "scalar": (),
        "crossed": (out[0], 1, out[2], 1, out[4]),
    }[form]
    x = g.emit("identity", {"x": _seeded(g, dtype, out)})[0]
    y_value = _seeded(g, dtype, y_shape)
    y = y_value if form == "scalar" or g.draw(st.booleans()) else g.emit("identity", {"x": y_value})[0]
    op_type = g.choose(("add", "mul", "sub", "maximum", "relu", "select"))
    if op_type == "relu":
        return g.emit("relu", {"x": g.emit("add", {"x": x, "y": y})[0]})
    if op_type == "select":
        cond = g.emit("greater", {"x": x, "y": g.const(dtype, ())})[0]
        return g.emit("select", {"cond": cond, "a": x, "b": y})
    return g.emit(op_type, {"x": x, "y": y})


def plant_rank5_scatter(g: Grower) -> list[Ref]:
    """A scatter into a rank-5 tensor: ``scatter`` (indices of rank 1 or 2), ``scatter_along_axis``
    or ``scatter_nd`` (index tuples of 1 to 5 axes: 4 and 5 are left), by ``update`` (repeated
    indices: the last write wins) or ``add`` (its updates then made run-time values: coremltools folds
    a scatter of consts as an update, whatever its mode); negative indices before iOS17. Sizes and
    indices come from one drawn seed (few draws, as for :func:`_seeded`)."""
    dtype = g.choose(FLOATS)
    op_type = g.choose(("scatter", "scatter_along_axis", "scatter_nd"))
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    data_shape = tuple(int(d) for d in rng.integers(1, 4, size=5))
    negatives = not g.ios17 and g.chance(3)

    def positions(shape: tuple[int, ...], size) -> np.ndarray:
        drawn = rng.integers(0, size, size=shape)
        return (drawn - size if negatives else drawn).astype(np.int32)

    axis = g.draw(st.integers(0, 4))
    zero = _run_time_zero(g, dtype)  # coremltools folds a scatter of consts as "update" whatever its mode
    args: dict = {"mode": g.choose(("update", "add")) if zero is not None else "update"}
    if op_type == "scatter":
        indices_shape = tuple(int(d) for d in rng.integers(1, 4, size=rng.integers(1, 3)))
        args["indices"] = positions(indices_shape, data_shape[axis])
        updates_shape = (*data_shape[:axis], *indices_shape, *data_shape[axis + 1 :])
    elif op_type == "scatter_along_axis":
        updates_shape = (*data_shape[:axis], int(rng.integers(1, 4)), *data_shape[axis + 1 :])
        args["indices"] = positions(updates_shape, data_shape[axis])
    else:
        depth, rows = axis + 1, int(rng.integers(1, 4))
        args["indices"] = positions((rows, depth), np.array(data_shape[:depth]))
        updates_shape = (rows, *data_shape[depth:])
    if op_type != "scatter_nd":
        args["axis"] = g.ints(axis - 5 if g.draw(st.booleans()) else axis)
    data = g.emit("identity", {"x": _seeded(g, dtype, data_shape)})[0]
    updates = g.emit("identity", {"x": _seeded(g, dtype, updates_shape)})[0]
    if zero is not None:
        updates = g.emit("add", {"x": updates, "y": zero})[0]
    return g.emit(op_type, {"data": data, "updates": updates, **args})


def _run_time_zero(g: Grower, dtype: str) -> Ref | None:
    """``[0]`` of ``dtype`` that coremltools cannot fold (``x > x`` of an element of a run-time var,
    false even for NaN), or None where no run-time float var is visible."""
    first = run_time_head(g, FLOATS, 1)
    if first is None:
        return None
    return g.emit("cast", {"x": g.emit("greater", {"x": first, "y": first})[0], "dtype": np.str_(dtype)})[0]


def _rank5_window(rng: np.random.Generator, size: int) -> tuple[int, int, int, bool]:
    """``slice_by_index`` bounds on an axis of ``size`` (begin, end, stride, end_mask): whole, one
    position, a run, a stride, reversed (a masked end), a negative begin."""
    form = int(rng.integers(0, 6))
    start = int(rng.integers(0, size))
    if form == 0:
        return 0, size, 1, False
    if form == 1:
        return start, start + 1, 1, False
    if form == 4:
        return start, 0, -1, True
    if form == 5:
        return start - size, size, 1, False
    return start, size, 1 if form == 2 else 2, False


def plant_rank5_data_movement(g: Grower) -> list[Ref]:
    """Data movement on a rank-5 tensor (sizes 1 to 3 from one drawn seed): a transpose that keeps
    a pair together or moves a size-1 axis, slices of every kind (squeezes, strides, reversed, by
    size), a slice_update, a concat, a split or a tile along one axis, a reshape from rank 4 and
    back; now and then a transpose that splits every pair (left)."""
    dtype = g.choose(FLOATS + ("int32",))
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    shape = tuple(int(d) for d in rng.integers(1, 4, size=5))
    form = g.choose(("transpose", "slice", "slice_by_size", "slice_update", "concat", "split", "tile", "chain"))
    if form == "chain":  # rank 4 -> rank 5 -> transpose -> rank 4: the attention heads' round trip
        flat = g.emit("identity", {"x": _seeded(g, dtype, (shape[0], shape[1] * shape[2], *shape[3:]))})[0]
        x = g.emit("reshape", {"x": flat, "shape": g.ints(shape)})[0]
        moved = g.emit("transpose", {"x": x, "perm": g.ints([0, 2, 3, 1, 4])})[0]
        return g.emit("reshape", {"x": moved, "shape": g.ints([shape[0], -1, shape[1], shape[4]])})
    x = g.emit("identity", {"x": _seeded(g, dtype, shape)})[0]
    axis = int(rng.integers(0, 5))
    if form == "transpose":
        perm = [int(a) for a in rng.permutation(5)]
        if g.chance(5):  # every pair split (sizes above 1): left
            x = g.emit("identity", {"x": _seeded(g, dtype, tuple(d + 1 for d in shape))})[0]
            perm = [4, 3, 2, 1, 0]
        return g.emit("transpose", {"x": x, "perm": g.ints(perm)})
    if form == "slice_by_size":
        starts = [int(rng.integers(0, d)) for d in shape]  # coremltools types a negative begin of size -1 wrong
        size = [int(rng.integers(1, d - b + 1)) if g.chance(2) else -1 for b, d in zip(starts, shape)]
        return g.emit("slice_by_size", {"x": x, "begin": g.ints(starts), "size": g.ints(size)})
    if form in ("slice", "slice_update"):
        begin, end, stride, end_mask = zip(*(_rank5_window(rng, d) for d in shape))
        args = {"x": x, "begin": g.ints(begin), "end": g.ints(end), "stride": g.ints(stride)}
        args["end_mask"] = np.array(end_mask, np.bool_)
        bounds = zip(shape, begin, end, stride, end_mask)
        window = tuple(len(range(d)[b : None if m else e : s]) for d, b, e, s, m in bounds)
        if form == "slice":
            squeeze = [size == 1 and g.chance(3) for size in window]
            return g.emit("slice_by_index", {**args, "squeeze_mask": np.array(squeeze, np.bool_)})
        if g.opset < ct.target.iOS18:  # slice_update is iOS18's
            return []
        update = g.emit("identity", {"x": _seeded(g, dtype, window)})[0]
        return g.emit("slice_update", {**args, "update": update})
    if form == "concat":
        other = (*shape[:axis], int(rng.integers(1, 4)), *shape[axis + 1 :])
        piece = g.emit("identity", {"x": _seeded(g, dtype, other)})[0]
        return g.emit("concat", {"values": (x, piece), "axis": g.ints(axis - 5 if g.chance(2) else axis)})
    if form == "split":
        return g.emit("split", {"x": x, "num_splits": g.ints(shape[axis]), "axis": g.ints(axis)})
    reps = [int(r) for r in rng.integers(1, 3, size=5)]
    return g.emit("tile", {"x": x, "reps": g.ints(reps)})


PLACEMENT_PLANTS = {
    gather_to_slice.DECLARATION.name: plant_constant_gather,
    topk_to_argmax.DECLARATION.name: plant_top_index,
    matmul_rank5_to_rank4.DECLARATION.name: plant_rank5_matmul,
    elementwise_rank5_to_rank4.DECLARATION.name: plant_rank5_elementwise,
    scatter_rank5_to_rank4.DECLARATION.name: plant_rank5_scatter,
    data_movement_rank5_to_rank4.DECLARATION.name: plant_rank5_data_movement,
}

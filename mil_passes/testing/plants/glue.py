"""Plants of the int32 glue rewrites: a narrowing cast of int32 data movement, and a
``gather_along_axis`` by tiled indices; each with the look-alikes its pass must leave."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..programs.grower import Grower, dtype_of, is_static, numel, shape_of
from ..programs.recipe import DTYPES, Ref

NARROW = ("fp16", "int16", "bool", "uint8")


def seeded(g: Grower, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A const of small numbers from one drawn seed (drawn element by element, a const would fill
    hypothesis's buffer, and the programs it overran would be dropped with every plant they held)."""
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    return rng.integers(-4, 5, size=shape).astype(DTYPES[dtype])


def run_time_head(g: Grower, dtypes: tuple[str, ...], count: int) -> Ref | None:
    """The first ``count`` elements (one where a dim is known only at run time) of a visible var of
    one of ``dtypes`` whose value coremltools cannot fold, flattened; None where there is none. At
    most one dim of it is a run-time one: flattening two makes a product of symbols, which sympy
    prints in the order of their names, process-wide counters that ``program_text`` renumbers."""
    source = g.pick(
        lambda v: (
            v.sym_val is None  # not even in part (a shape of symbolic and static dims)
            and dtype_of(v) in dtypes
            and len(shape_of(v)) >= 1
            and sum(not is_static(d) for d in shape_of(v)) <= 1
        )
    )
    if source is None:
        return None
    dims = shape_of(g.var(source))
    count = min(count, numel(dims)) if all(map(is_static, dims)) else 1  # a run-time size is at least 1
    flat = g.emit("reshape", {"x": source, "shape": g.ints([-1])})[0]
    return g.emit("slice_by_index", {"x": flat, "begin": g.ints([0]), "end": g.ints([count])})[0]


def _int32_var(g: Grower, rank: int) -> Ref:
    ref = g.pick(
        lambda v: (
            dtype_of(v) == "int32"
            and len(shape_of(v)) == rank
            and all(map(is_static, shape_of(v)))
            and numel(shape_of(v)) <= 32
        )
    )
    if ref is None:
        ref = g.emit("identity", {"x": seeded(g, "int32", (2, 3)[:rank] if rank <= 2 else (2, 3, 2))})[0]
    return ref


def plant_moved_cast(g: Grower) -> list[Ref]:
    """``cast(move(x: int32), narrow)`` for a data movement of an int32 var; now and then the moved
    value is read again (left), or the cast is to fp32 (not a candidate)."""
    x = _int32_var(g, 2)
    rows, cols = (int(d) for d in shape_of(g.var(x)))
    move = g.choose(("expand_dims", "reshape", "transpose", "tile", "slice_by_index", "concat"))
    args: dict = {
        "expand_dims": {"x": x, "axes": g.ints([g.draw(st.integers(-3, 2))])},
        "reshape": {"x": x, "shape": g.ints([rows * cols])},
        "transpose": {"x": x, "perm": g.ints([1, 0])},
        "tile": {"x": x, "reps": g.ints([1, 2])},
        "slice_by_index": {"x": x, "begin": g.ints([0, 0]), "end": g.ints([rows, max(1, cols - 1)])},
        "concat": {"values": (x, seeded(g, "int32", (rows, cols))), "axis": g.ints(0)},
    }[move]
    moved = g.emit(move, args)[0]
    narrow = NARROW if g.ios17 else ("fp16", "bool")  # int16 and uint8 casts from iOS17 on
    dtype = "fp32" if g.chance(8) else g.choose(narrow)
    out = g.emit("cast", {"x": moved, "dtype": np.str_(dtype)})
    return out + [moved] if g.chance(8) else out


def plant_tiled_gather(g: Grower) -> list[Ref]:
    """``gather_along_axis(x, tile(expand_dims(idx, [-1]), [1, 1, C]), axis=1)``: a detector head's
    box gather; now and then reps that do not cover the last axis (left)."""
    dtype = g.choose(("fp32", "fp16"))
    batch, rows, width, keep = (g.draw(st.integers(1, 3)) for _ in range(4))
    x = g.emit("identity", {"x": seeded(g, dtype, (batch, rows + 1, width))})[0]
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    indices = g.emit("identity", {"x": rng.integers(0, rows + 1, (batch, keep)).astype(np.int32)})[0]
    expanded = g.emit("expand_dims", {"x": indices, "axes": g.ints([-1])})[0]
    reps = [1, 1, width] if not g.chance(5) else [1, 1, 1]
    tiled = g.emit("tile", {"x": expanded, "reps": g.ints(reps)})[0]
    if reps[-1] != width:
        return []  # a gather_along_axis needs indices of x's shape but the gathered axis
    return g.emit("gather_along_axis", {"x": x, "indices": tiled, "axis": g.ints(1)})


def plant_guarded_gather(g: Grower) -> list[Ref]:
    """coremltools' negative-index guard of an embedding lookup: int16 ids cast to int32,
    ``select(ids >= 0, ids, ids + D)``, cast to int16, gathered from a table of D rows; the ids in
    range (``[-2D, D)``); now and then int32 ids (left)."""
    if not g.ios17:
        return []
    rows, width = g.draw(st.integers(1, 12)), g.draw(st.integers(1, 3))
    table = g.emit("identity", {"x": seeded(g, g.choose(("fp16", "fp32")), (rows, width))})[0]
    rng = np.random.default_rng(g.draw(st.integers(0, 1 << 16)))
    values = rng.integers(-2 * rows, rows, (g.draw(st.integers(1, 4)),))
    narrow = not g.chance(5)
    ids = g.emit("identity", {"x": values.astype(np.int16 if narrow else np.int32)})[0]
    if narrow:
        ids = g.emit("cast", {"x": ids, "dtype": np.str_("int32")})[0]
    keep = g.emit("greater_equal", {"x": ids, "y": g.ints(0)})[0]
    wrapped = g.emit("add", {"x": ids, "y": g.ints(rows)})[0]
    index = g.emit("select", {"cond": keep, "a": ids, "b": wrapped})[0]
    index16 = g.emit("cast", {"x": index, "dtype": np.str_("int16")})[0]
    return g.emit("gather", {"x": table, "indices": index16, "axis": g.ints(0)})


def plant_one_hot_gather(g: Grower) -> list[Ref]:
    """A gather from a constant table by a run-time integer in fp16: ``cast(x > 0, fp16) + k``, a row
    number or one counted from the end, now and then through the guard ``gather_index_guard_in_fp16``
    leaves (``select(ids >= 0, minimum(ids, D), ids + D)``), cast to int16; ``x`` a small float var,
    or the first elements of any run-time one; now and then a table holding -0 or inf, or ids known
    before run time (left)."""
    if not g.ios17:
        return []
    rows, width = g.draw(st.integers(1, 12)), g.draw(st.integers(1, 3))
    table = seeded(g, g.choose(("fp16", "fp32")), (rows, width))
    if g.chance(6):
        table[0, 0] = g.choose((-0.0, np.inf))
    x = g.pick(
        lambda v: (
            v.val is None
            and dtype_of(v) in ("fp16", "fp32")
            and 1 <= len(shape_of(v)) <= 2
            and all(map(is_static, shape_of(v)))
            and numel(shape_of(v)) <= 8
        )
    )
    if x is None:
        x = run_time_head(g, ("fp16", "fp32", "int32"), 4)
    guarded = not g.chance(6)
    offset = np.float16(g.draw(st.integers(-2 * rows if guarded else -rows, rows - 2)))  # offset + 1 in range
    if x is None or g.chance(8):
        flag = g.emit("identity", {"x": np.array([True, False])})[0]  # known before run time
    else:
        flag = g.emit("greater", {"x": x, "y": DTYPES[dtype_of(g.var(x))](0)})[0]
    ids = g.emit("add", {"x": g.emit("cast", {"x": flag, "dtype": np.str_("fp16")})[0], "y": offset})[0]
    index = ids
    if guarded:
        keep = g.emit("greater_equal", {"x": ids, "y": np.float16(0)})[0]
        wrapped = g.emit("add", {"x": ids, "y": np.float16(rows)})[0]
        capped = g.emit("minimum", {"x": ids, "y": np.float16(rows)})[0]
        index = g.emit("select", {"cond": keep, "a": capped, "b": wrapped})[0]
    index16 = g.emit("cast", {"x": index, "dtype": np.str_("int16")})[0]
    return g.emit("gather", {"x": table, "indices": index16, "axis": g.ints(0)})


GLUE_PLANTS = {
    "cast_before_data_movement": plant_moved_cast,
    "tiled_gather_to_gather": plant_tiled_gather,
    "gather_index_guard_in_fp16": plant_guarded_gather,
    "gather_to_one_hot_matmul": plant_one_hot_gather,
}

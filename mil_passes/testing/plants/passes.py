"""Pattern plants: for each pass, a small piece of program that gives the pass work to do.

``programs(plant=...)`` drops these into random programs at random places, built from the vars
already there, so every pass meets its pattern in at least a third of the drawn programs, in
every variety its guards must tell apart. ``PLANTS`` maps a pass name (without ``webnn::``) to
its plant; a plant returns the refs that must stay live (so dead-code removal does not take the
pattern away before the pass sees it).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from coremltools.converters.mil.mil import Var
from hypothesis import strategies as st

from ..programs.grower import BASIC, MAX_ELEMENTS, NUMERIC, Grower, dtype_of, is_static, numel, shape_of
from ..programs.ops_base import factor, operand
from ..programs.ops_elementwise import add_select
from ..programs.recipe import DTYPES, Operand, Ref
from ...passes import (
    band_part_difference_to_select,
    canonicalize_uint8_select,
    concat_slice_to_slice_concat,
    fold_shape_ops,
    rename_duplicate_temporaries,
    share_runtime_shapes,
)
from .glue import GLUE_PLANTS, seeded
from .masks import MASK_PLANTS
from .placement import PLACEMENT_PLANTS

Plant = Callable[[Grower], "list[Ref]"]


def _base(g: Grower, dtypes: tuple[str, ...], shape: tuple[int, ...]) -> Ref:
    """A visible var of one of ``dtypes`` with rank ≥ 1, or a new const operand to build on."""
    ref = g.pick(lambda v: dtype_of(v) in dtypes and len(shape_of(v)) >= 1 and numel(shape_of(v)) <= 64)
    if ref is None:
        dtype = g.choose(dtypes)
        ref = g.emit("identity", {"x": g.const(dtype, shape)})[0]
    return ref


def plant_concat_window(g: Grower) -> list[Ref]:
    """``y = slice_by_index(concat(pieces), window)`` with the window often across a seam,
    sometimes joined again by ``concat``/``stack`` (the streaming-cache update)."""
    x = _base(g, g.dtypes("concat", "values"), (1, 4, 7))
    xv = g.var(x)
    shape, rank = shape_of(xv), len(shape_of(xv))
    static_axes = [i for i, d in enumerate(shape) if is_static(d)]
    if not static_axes:
        return []
    axis = rank - 1 if rank - 1 in static_axes and g.draw(st.integers(0, 2)) else g.choose(static_axes)
    others = [d for i, d in enumerate(shape) if i != axis]
    pieces: list[Operand] = [x]

    def same_rest(v: Var) -> bool:
        return (
            dtype_of(v) == dtype_of(xv)
            and len(shape_of(v)) == rank
            and [s for i, s in enumerate(shape_of(v)) if i != axis] == others
            and is_static(shape_of(v)[axis])
        )

    for _ in range(g.draw(st.integers(1, 3))):
        dims = list(shape)
        dims[axis] = g.choose((1, 2, 3, 7, 8))
        piece: Operand | None = g.pick(same_rest) if g.draw(st.booleans()) else None
        if piece is None and all(is_static(d) for d in others):
            piece = g.const(dtype_of(xv), tuple(dims))
        pieces.append(piece if piece is not None else x)
    pieces = g.shuffle(pieces)
    sizes = [int(shape_of(g.var(p))[axis]) if isinstance(p, Ref) else np.shape(p)[axis] for p in pieces]
    total = sum(sizes)
    if numel(tuple(others)) * total > MAX_ELEMENTS:
        return []
    axis_arg = axis - rank if g.draw(st.integers(0, 2)) else axis
    joined = g.emit("concat", {"values": tuple(pieces), "axis": g.ints(axis_arg)})[0]

    width = g.draw(st.integers(1, total))
    if g.draw(st.booleans()):  # new[..., -K:]
        begin, end, begin_mask, end_mask = -width, 0, False, True
    else:
        start = g.draw(st.integers(0, total - width))
        begin = start - total if g.draw(st.booleans()) else start
        end, begin_mask, end_mask = start + width, False, start + width == total and g.draw(st.booleans())
    stride = 2 if g.chance(8) else 1
    squeeze = width == 1 and rank > 1 and g.chance(4)

    def mask(value: bool) -> np.ndarray:
        return np.array([value if i == axis else True for i in range(rank)])

    args = {
        "x": joined,
        "begin": g.ints([begin if i == axis else 0 for i in range(rank)]),
        "end": g.ints([end if i == axis else 0 for i in range(rank)]),
        "stride": g.ints([stride if i == axis else 1 for i in range(rank)]),
        "begin_mask": mask(begin_mask),
        "end_mask": mask(end_mask),
    }
    if squeeze:
        args["squeeze_mask"] = np.array([i == axis for i in range(rank)])
    window = g.emit("slice_by_index", args)[0]
    keep = [window]
    if g.draw(st.booleans()):  # the slice joined with other tensors (the ANE trigger)
        op = g.choose(("concat", "stack"))
        if op == "stack" or squeeze:
            keep = g.emit("stack", {"values": (window, window), "axis": g.ints(0)})
        else:
            keep = g.emit("concat", {"values": (window, x), "axis": g.ints(axis_arg)})
    if g.chance(4):
        keep.append(joined)  # the concat is also an output
    return keep


def plant_shape_chain(g: Grower) -> list[Ref]:
    """A ``shape`` op feeding ``fill`` or ``reshape``, directly or via ``gather``/slice/concat."""
    x = _base(g, BASIC, (2, 6))
    shape = shape_of(g.var(x))
    rank = len(shape)
    dims = g.emit("shape", {"x": x})[0]
    kind = g.choose(("fill", "reshape", "reshape_split", "gather_fill"))
    if kind == "fill":
        value = g.const(g.choose(BASIC), ())
        return g.emit("fill", {"shape": dims, "value": value})
    if kind == "gather_fill":
        picks = g.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=3))
        chosen = g.emit("gather", {"x": dims, "indices": g.ints(picks), "axis": g.ints(0)})[0]
        value = g.const(g.choose(BASIC), ())
        return g.emit("fill", {"shape": chosen, "value": value})
    if kind == "reshape":
        return g.emit("reshape", {"x": x, "shape": dims})
    # the dims up to the last symbolic one come from `shape`; the static rest is a const
    symbolic = [i for i, d in enumerate(shape) if not is_static(d)]
    keep = g.draw(st.integers(max(1, symbolic[-1] + 1 if symbolic else 1), rank))
    rest = int(np.prod([int(d) for d in shape[keep:]], dtype=np.int64))
    tail = factor(g, rest, 1 if keep >= 4 else g.draw(st.integers(1, 2))) if keep < rank else []
    form = g.choose(("slice", "gather", "scalars"))
    if form == "scalars":  # torch's frontend: one scalar per dim, joined by concat
        pieces = [g.emit("gather", {"x": dims, "indices": g.ints(i), "axis": g.ints(0)})[0] for i in range(keep)]
        return g.emit(
            "reshape",
            {
                "x": x,
                "shape": g.emit("concat", {"values": (*pieces, *(g.ints(t) for t in tail)), "axis": g.ints(0)})[0],
            },
        )
    if form == "slice":
        head = {"x": dims, "begin": g.ints([0]), "end": g.ints([keep]), "end_mask": np.array([keep == rank])}
        head_ref = g.emit("slice_by_index", head)[0]
    else:
        head_ref = g.emit("gather", {"x": dims, "indices": g.ints(list(range(keep))), "axis": g.ints(0)})[0]
    target = head_ref
    if tail:
        target = g.emit("concat", {"values": (head_ref, g.ints(tail)), "axis": g.ints(0)})[0]
    return g.emit("reshape", {"x": x, "shape": target})


def plant_repeated_shape(g: Grower) -> list[Ref]:
    """``shape`` of a var whose run-time dims an earlier var has: a copy of a var with a symbolic
    dim, or two windows of equal-shaped vars cut at one run-time end (a symbolic dim, or an argmax),
    which coremltools gives fresh symbols each."""
    dtypes = g.dtypes("shape")
    x = g.pick(
        lambda v: (
            dtype_of(v) in dtypes
            and len(shape_of(v)) >= 1
            and not all(map(is_static, shape_of(v)))
            and numel(shape_of(v)) <= 64
        )
    )
    if x is not None and g.draw(st.booleans()):
        return g.emit("shape", {"x": g.emit("identity", {"x": x})[0]})
    if x is not None:
        axis = g.draw(st.integers(0, len(shape_of(g.var(x))) - 1))
        dims = g.emit("shape", {"x": x})[0]
        length = g.emit("slice_by_index", {"x": dims, "begin": g.ints([axis]), "end": g.ints([axis + 1])})[0]
    else:  # a length only the run time knows, from the data
        flat = g.emit("reshape", {"x": _base(g, NUMERIC, (2, 6)), "shape": g.ints([-1])})[0]
        top = g.emit("reduce_argmax", {"x": flat, "axis": g.ints(0), "keep_dims": np.array(True)})[0]
        length = g.emit("add", {"x": top, "y": g.ints([1])})[0]
    end = g.emit("concat", {"values": (g.ints([2]), length), "axis": g.ints(0)})[0]
    dtype = g.choose(BASIC)
    windows = []
    for _ in range(2):
        whole = g.emit("identity", {"x": seeded(g, dtype, (2, 6))})[0]
        windows.append(g.emit("slice_by_index", {"x": whole, "begin": g.ints([0, 0]), "end": end})[0])
    return [g.emit("shape", {"x": window})[0] for window in windows]


def plant_bool_round_trip(g: Grower) -> list[Ref]:
    """WebNN booleans: a bool cast to uint8 and back, feeding ``select`` or a logical op; also the
    look-alikes that must stay (an int cond, a float cast to uint8 then to bool)."""
    narrow = "uint8" if g.ios17 else "int32"
    stem = g.choose(("out", "t", "cmp"))
    if not g.name_pool:  # programs with unique names (coremltools' targets): one stem per plant
        stem = g.name(stem)
    source = g.choose(("compare", "compare", "bool", "int", "float"))
    if source in ("compare", "bool"):
        flag = g.pick(lambda v: dtype_of(v) == "bool" and len(shape_of(v)) >= 1) if source == "bool" else None
        if flag is None:
            x = _base(g, NUMERIC, (2, 2))
            xv = g.var(x)
            op = g.choose(("greater", "less", "equal", "not_equal"))
            flag = g.emit(op, {"x": x, "y": operand(g, dtype_of(xv), shape_of(xv))}, name=f"{stem}_bool")[0]
        wide = g.emit("cast", {"x": flag, "dtype": narrow}, name=stem)[0]
    elif source == "int":
        wide = _base(g, ("int32",), (2, 2))
    else:  # coremltools cannot fold a float-to-uint8 cast of negative values: use a runtime var
        runtime_float = g.pick(lambda v: dtype_of(v) in ("fp32", "fp16") and len(shape_of(v)) >= 1 and v.val is None)
        if runtime_float is None:
            return []
        wide = g.emit("cast", {"x": runtime_float, "dtype": narrow}, name=stem)[0]
    name = f"{stem}_bool" if g.name_pool and g.draw(st.booleans()) else None  # WebNN reuses the producer's name
    cond = g.emit("cast", {"x": wide, "dtype": "bool"}, name=name)[0]
    shape = shape_of(g.var(cond))
    consumer = g.choose(("select", "select", "logical_and", "logical_or", "logical_not"))
    if consumer == "select":
        dtype = g.choose(NUMERIC)
        return add_select(g, "select", cond, dtype) or []
    if consumer == "logical_not":
        return g.emit("logical_not", {"x": cond})
    return g.emit(consumer, {"x": cond, "y": operand(g, "bool", shape)})


def plant_duplicate_names(g: Grower) -> list[Ref]:
    """Two ops with one name, as a WebNN converter writes them: ``t_bool`` (a comparison),
    ``t = cast(t_bool)``, and a cast back named ``t_bool`` again; or a name already in use."""
    names = [step.name for step in g.steps] + [g.var(r).name for r in g.scopes[0][:3]]
    x = _base(g, ("fp32", "fp16", "int32"), (2, 3))
    xv = g.var(x)
    if names and g.draw(st.booleans()):
        reused = g.choose(names)
        return g.emit("relu" if dtype_of(xv) != "int32" else "identity", {"x": x}, name=reused)
    stem = g.choose(("t", "y", "x0"))
    flag = g.emit("greater", {"x": x, "y": operand(g, dtype_of(xv), shape_of(xv))}, name=f"{stem}_bool")[0]
    wide = g.emit("cast", {"x": flag, "dtype": "int32"}, name=stem)[0]
    back = g.emit("cast", {"x": wide, "dtype": "bool"}, name=f"{stem}_bool")[0]
    return g.emit("logical_and", {"x": back, "y": flag}, name=f"{stem}_and")


def _finite(value: np.ndarray) -> np.ndarray:
    """``value`` with ±inf at the dtype's extremes and NaN at 0."""
    finfo = np.finfo(value.dtype)
    return np.nan_to_num(value, nan=0.0, posinf=float(finfo.max), neginf=float(finfo.min))


def _matrices(g: Grower, dtypes: tuple[str, ...]) -> Ref:
    """A visible var of rank ≥ 2 of one of ``dtypes``, or a new one."""
    ref = g.pick(lambda v: dtype_of(v) in dtypes and len(shape_of(v)) >= 2 and numel(shape_of(v)) <= 64)
    if ref is None:
        ref = g.emit("identity", {"x": g.const(g.choose(dtypes), (3, 4))})[0]
    return ref


def _finite_float(g: Grower) -> Ref:
    """A float var of rank ≥ 2 that is finite whatever the feeds: a ``fill`` of
    ``finfo(dtype).min`` or another value shaped like a visible var (transformers' causal mask), a
    const, or a comparison of a visible var cast to the dtype and scaled."""
    dtype = g.choose(("fp32", "fp16"))
    like = _matrices(g, BASIC)
    shape = shape_of(g.var(like))
    form = g.choose(("fill", "fill", "const", "compare"))
    if form == "fill":
        dims = g.emit("shape", {"x": like})[0] if g.draw(st.booleans()) or not all(map(is_static, shape)) else None
        target = g.ints([int(d) for d in shape]) if dims is None else dims
        value = np.finfo(DTYPES[dtype]).min if g.draw(st.booleans()) else _finite(g.const(dtype, ()))
        return g.emit("fill", {"shape": target, "value": np.asarray(value, DTYPES[dtype])})[0]
    if form == "const":
        return g.emit("identity", {"x": _finite(g.const(dtype, tuple(d if is_static(d) else 1 for d in shape)))})[0]
    compared = dtype_of(g.var(like))
    cond = like if compared == "bool" else g.emit("greater", {"x": like, "y": operand(g, compared, shape)})[0]
    flags = g.emit("cast", {"x": cond, "dtype": dtype})[0]  # 0 and 1: select types its output by a, b only
    return g.emit("mul", {"x": flags, "y": _finite(g.const(dtype, ()))})[0]


def plant_band_part_difference(g: Grower) -> list[Ref]:
    """torch's ``triu``/``tril`` as coremltools converts them, ``sub(v, band_part(v))`` on a finite
    float ``v`` (the pass turns the NaN of an infinite ``v`` into 0: not bit-exact there, tested
    apart), the band_part now and then also an output; and the look-alikes that stay: an int32
    ``v``, the frontend's bool form through int32 casts, a band_part of another var."""
    bounds = {"lower": g.ints(g.draw(st.integers(-1, 3))), "upper": g.ints(g.draw(st.integers(-1, 3)))}
    form = g.choose(("float", "float", "float", "float", "int32", "bool", "other"))
    if form == "bool":
        flag = _matrices(g, ("bool",))
        kept = g.emit("band_part", {"x": flag, **bounds})[0]
        wide = [g.emit("cast", {"x": ref, "dtype": "int32"})[0] for ref in (flag, kept)]
        difference = g.emit("sub", {"x": wide[0], "y": wide[1]})[0]
        return g.emit("cast", {"x": difference, "dtype": "bool"})
    v = _matrices(g, ("int32",)) if form == "int32" else _finite_float(g)
    source: Ref | None = v
    if form == "other":
        shape = shape_of(g.var(v))
        source = g.pick(lambda w: w is not g.var(v) and dtype_of(w) == dtype_of(g.var(v)) and shape_of(w) == shape)
        if source is None:
            source = g.emit("identity", {"x": v})[0]  # the same values, another var
    kept = g.emit("band_part", {"x": source, **bounds})[0]
    keep = g.emit("sub", {"x": v, "y": kept})
    if g.chance(4):
        keep.append(kept)  # the band_part is also an output: it stays for it
    return keep


#: The plant of each pass, by the pass's declared name.
PLANTS: dict[str, Plant] = {
    band_part_difference_to_select.DECLARATION.name: plant_band_part_difference,
    concat_slice_to_slice_concat.DECLARATION.name: plant_concat_window,
    fold_shape_ops.DECLARATION.name: plant_shape_chain,
    canonicalize_uint8_select.DECLARATION.name: plant_bool_round_trip,
    rename_duplicate_temporaries.DECLARATION.name: plant_duplicate_names,
    share_runtime_shapes.DECLARATION.name: plant_repeated_shape,
    **PLACEMENT_PLANTS,
    **MASK_PLANTS,
    **GLUE_PLANTS,
}

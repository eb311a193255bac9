"""Op-table entries of the elementwise ops (binary, unary, select, cast), ``fill`` and ``reduce_sum``.

Each ``add_*`` function draws what its op needs besides its first input ``x`` (vars that fit,
or consts), emits the op through the :class:`Grower` and returns its outputs, or None when
nothing fits.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .grower import (
    BASIC,
    Grower,
    broadcast,
    dtype_of,
    is_static,
    shape_of,
)
from .ops_base import axis_arg, operand, shape_arg
from .recipe import Operand, Ref


def add_binary(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    xv = g.var(x)
    y = operand(g, dtype_of(xv), shape_of(xv))
    first, second = (y, x) if g.chance(4) else (x, y)
    return g.emit(op_type, {"x": first, "y": second})


def add_unary(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    return g.emit(op_type, {"x": x})


def add_select(g: Grower, op_type: str, cond: Ref, dtype: str | None = None) -> list[Ref] | None:
    """``select(cond, a, b)`` where ``a`` covers ``cond``'s shape: coremltools types select as
    the broadcast of a and b alone (it ignores cond's shape). Consts are never 0-d: with a
    folded ``cond``, coremltools' value inference needs a tensor a or b."""
    cond_shape = shape_of(g.var(cond))
    dtype = dtype or g.choose(g.dtypes("select", "a"))
    a: Operand | None = g.pick(lambda v: dtype_of(v) == dtype and broadcast(cond_shape, shape_of(v)) == shape_of(v))
    if a is None or g.draw(st.booleans()):
        if not all(is_static(d) for d in cond_shape):
            if a is None:
                return None
        else:
            a = g.const(dtype, tuple(cond_shape) or (1,))
    b = operand(g, dtype, shape_arg(g, a), scalar=False)
    first, second = (b, a) if g.chance(2) else (a, b)
    return g.emit("select", {"cond": cond, "a": first, "b": second})


def add_cast(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    """A cast to a dtype of cast's own domain; of a folded ``x``, only to the basic dtypes
    (coremltools cannot fold a cast to a small int of some values: see ``not_folded``)."""
    targets = g.dtypes("cast") if g.var(x).val is None else tuple(d for d in g.dtypes("cast") if d in BASIC)
    return g.emit("cast", {"x": x, "dtype": g.choose(targets)})


# -- data movement ----------------------------------------------------------------------------
def add_fill(g: Grower, op_type: str, x: Ref | None) -> list[Ref]:
    shapes = [r for r in g.visible() if r in g.shape_refs]
    if shapes and g.draw(st.booleans()):
        target = g.choose(shapes)
    else:
        target = g.ints(g.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dtype = g.choose(g.dtypes("fill", "value"))
    return g.emit("fill", {"shape": target, "value": g.const(dtype, ())})


def add_reduce_sum(g: Grower, op_type: str, x: Ref) -> list[Ref]:
    rank = len(shape_of(g.var(x)))
    args = {"x": x, "keep_dims": np.bool_(g.draw(st.booleans()))}
    if g.draw(st.integers(0, 3)):
        chosen = g.subset(range(rank), 1, rank)
        args["axes"] = g.ints([axis_arg(g, i, rank) for i in sorted(chosen)])
    return g.emit("reduce_sum", args)

"""How a drawn program grows: op slots, plants, ``cond`` blocks, and the choice of outputs."""

from __future__ import annotations

from functools import partial

import numpy as np
from hypothesis import strategies as st

from .grower import BASIC, NUMERIC, Grower, dtype_of, is_static, shape_of
from ..plants.default import DEFAULT_PLANTS
from ..plants.passes import PLANTS
from .recipe import Ref


def grow_program(g: Grower, max_ops: int, nested: bool, plants: tuple[str, ...]) -> list[str]:
    """Fill ``max_ops`` op slots (each about half the time) and plant ``plants`` at drawn
    slots; return the plants that went in. Every slot and plant is one optional draw, so
    shrinking removes it whole."""
    where = {name: g.draw(st.integers(0, max_ops)) for name in plants}
    planted: list[str] = []

    def plant(name: str) -> None:
        start = len(g.scopes[-1])
        kept = (PLANTS[name] if name in PLANTS else DEFAULT_PLANTS[name])(g)
        if kept:
            g.keep.extend(kept)
            planted.append(name)
            if name in DEFAULT_PLANTS and not g.chance(4):  # a fusion's inner vars read later block it
                g.scopes[-1][start:] = [ref for ref in g.scopes[-1][start:] if ref in kept]

    for i in range(max_ops + 1):
        for name in plants:
            if where[name] == i:
                g.maybe(partial(plant, name), chances=3)
        if i < max_ops:
            g.maybe(lambda: grow_step(g, 0, nested))
    return planted


def grow_step(g: Grower, depth: int, nested: bool) -> None:
    """Add one op from the table (or, now and then, a ``cond``) to the innermost block."""
    if nested and depth < 2 and g.chance(8) and grow_cond(g, depth):
        return
    for _ in range(3):
        entry = g.choose(g.table)
        x = None
        if entry.input is not None:
            x = g.pick(partial(entry.accepts, g))
            if x is None:
                continue
        if entry.add(g, entry.op_type, x) is not None:
            return


def grow_cond(g: Grower, depth: int) -> bool:
    """``cond(reduce_sum(v) > 0)``: a grown true block; a false block of the same type."""
    source = g.pick(lambda v: dtype_of(v) in NUMERIC and v.val is None)
    if source is None:
        return False
    total = source
    if shape_of(g.var(source)):
        total = g.emit("reduce_sum", {"x": source, "keep_dims": np.bool_(False)})[0]
    pred = g.emit("greater", {"x": total, "y": g.const(dtype_of(g.var(source)), ())})[0]

    def true_block() -> Ref:
        for _ in range(3):
            g.maybe(lambda: grow_step(g, depth + 1, True))
        fits = [ref for ref in g.local() if _mirrorable(g, g.var(ref))]
        if fits:
            return g.choose(fits[::-1])
        return g.emit("identity", {"x": g.choose(g.outer())})[0]

    def false_block(target) -> Ref:
        g.maybe(lambda: grow_step(g, depth + 1, True))
        return _mirror(g, target)

    g.emit_cond(pred, true_block, false_block)
    return True


def _twins(g: Grower, shape: tuple) -> list[Ref]:
    return [ref for ref in g.outer() if shape_of(g.var(ref)) == shape]


def _mirrorable(g: Grower, var) -> bool:
    """The false block can make ``var``'s type: from an outer var of its shape, or by ``fill``."""
    shape = shape_of(var)
    return bool(_twins(g, shape)) or bool(shape) and all(is_static(d) for d in shape)


def _mirror(g: Grower, target) -> Ref:
    """A var of exactly ``target``'s type, built from outer vars (for the false block)."""
    dtype, twins = dtype_of(target), _twins(g, shape_of(target))
    if twins:
        source = g.choose(twins)
        if dtype_of(g.var(source)) == dtype:
            return g.emit("identity", {"x": source})[0]
        return g.emit("cast", {"x": source, "dtype": dtype})[0]
    fill_dtype = dtype if dtype in BASIC else "int32"
    shape = g.ints([int(d) for d in shape_of(target)])
    filled = g.emit("fill", {"shape": shape, "value": g.const(fill_dtype, ())})[0]
    return filled if fill_dtype == dtype else g.emit("cast", {"x": filled, "dtype": dtype})[0]


def choose_outputs(g: Grower, n_inputs: int, max_outputs: int) -> list[Ref]:
    """Unused vars (plant results first, then the newest), now and then a used one too; names
    distinct from each other and from the inputs."""
    made = [ref for ref in g.scopes[0] if ref.index >= n_inputs]
    unused = [ref for ref in made if ref not in g.used]
    ordered = [r for r in g.keep if r in unused] + unused[::-1]
    used = [ref for ref in made if ref in g.used]
    if used and g.chance(3):  # an output that is also used inside
        ordered.insert(0, g.choose(used))
    taken = {g.var(Ref(i)).name for i in range(n_inputs)}
    chosen: list[Ref] = []
    for ref in ordered:
        name = g.var(ref).name
        if name not in taken and ref not in chosen and len(chosen) < max_outputs:
            chosen.append(ref)
            taken.add(name)
    if not chosen:
        source = made[-1] if made else Ref(0)
        chosen = g.emit("identity", {"x": source}, name="output")
    return chosen

"""Shared helpers of the DEFAULT plants: run-time vars of a chosen shape, and const scalars."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ..programs.grower import NUMERIC, Grower, dtype_of, shape_of
from ..programs.recipe import DTYPES, Ref


def float_dtype(g: Grower) -> str:
    """fp32 two times in three, else fp16."""
    return g.choose(("fp32", "fp32", "fp16"))


def scalar(dtype: str, value: float) -> np.ndarray:
    """A 0-d const of ``dtype`` holding ``value``."""
    return np.asarray(value, dtype=DTYPES[dtype])


def runtime(g: Grower, shape: tuple[int, ...], dtype: str) -> Ref:
    """A var of ``dtype`` and static ``shape`` whose value is known only at run time: a visible
    one that fits (half the time), or the first element of a run-time var plus a drawn const of
    ``shape`` (so a fusion's input differs from feed to feed and is never folded)."""
    shape = tuple(int(d) for d in shape)
    fit = g.pick(lambda v: v.val is None and dtype_of(v) == dtype and shape_of(v) == shape)
    if fit is not None and g.draw(st.booleans()):
        return fit
    seed = g.pick(lambda v: v.val is None and dtype_of(v) in NUMERIC + ("bool",))
    if seed is None:
        return g.emit("identity", {"x": g.const(dtype, shape)})[0]
    if dtype_of(g.var(seed)) != dtype:
        seed = g.emit("cast", {"x": seed, "dtype": dtype})[0]
    flat = g.emit("reshape", {"x": seed, "shape": g.ints([-1])})[0]
    first = g.emit("slice_by_size", {"x": flat, "begin": g.ints([0]), "size": g.ints([1])})[0]
    if not shape:
        return g.emit("squeeze", {"x": first})[0]
    combine = "logical_xor" if dtype == "bool" else "add"
    return g.emit(combine, {"x": first, "y": g.const(dtype, shape)})[0]


def runtime_of_rank(g: Grower, rank: int, dtype: str, max_side: int = 4) -> Ref:
    """:func:`runtime` of a drawn static shape of ``rank``."""
    sides = g.draw(st.lists(st.integers(1, max_side), min_size=rank, max_size=rank))
    return runtime(g, tuple(sides), dtype)


def float_runtime(g: Grower, ranks: tuple[int, int]) -> tuple[str, Ref]:
    """A float dtype and a run-time input of it, of a rank drawn from ``ranks`` (inclusive)."""
    dtype = float_dtype(g)
    return dtype, runtime_of_rank(g, g.draw(st.integers(*ranks)), dtype)


def near(value: float, g: Grower, off: float) -> float:
    """``value``, or (one time in four: a look-alike that must stay) ``value + off``."""
    return value + off if g.chance(4) else value

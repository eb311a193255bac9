"""Helpers the op table's entries share: operands that broadcast, axes, factors."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .grower import MAX_ELEMENTS, Grower, broadcast, dtype_of, is_static, numel, shape_of
from .recipe import Operand, Ref


def axis_arg(g: Grower, index: int, rank: int) -> int:
    """``index`` written positive or negative."""
    return index - rank if g.draw(st.booleans()) else index


# -- operands ---------------------------------------------------------------------------------
def operand(g: Grower, dtype: str, shape: tuple, *, scalar: bool = True) -> Operand:
    """A var or const of ``dtype`` whose shape broadcasts with ``shape`` (a 0-d const only if
    ``scalar``)."""
    if g.draw(st.booleans()):
        ref = g.pick(
            lambda v: (
                dtype_of(v) == dtype and (b := broadcast(shape_of(v), shape)) is not None and numel(b) <= MAX_ELEMENTS
            )
        )
        if ref is not None:
            return ref
    dims = [d if is_static(d) and g.draw(st.integers(0, 3)) else 1 for d in shape]
    drop = g.draw(st.integers(0, max(0, len(dims) - (0 if scalar else 1))))
    return g.const(dtype, tuple(dims[drop:]))


def shape_arg(g: Grower, arg: Operand) -> tuple:
    return shape_of(g.var(arg)) if isinstance(arg, Ref) else np.shape(arg)


def factor(g: Grower, n: int, parts: int) -> list[int]:
    """``parts`` positive ints whose product is ``n``."""
    dims = []
    for _ in range(parts - 1):
        k = g.choose([k for k in range(1, n + 1) if n % k == 0])
        dims.append(k)
        n //= k
    return [*dims, n]

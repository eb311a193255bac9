"""Random feeds for a program's inputs (not its states): dims sized, floats normal, ints small, bools both ways."""

from __future__ import annotations

from typing import Mapping

import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from .interpreter import numpy_dtype

DEFAULT_SIZE_CHOICES = (1, 2, 3, 5)


def random_inputs(
    prog: Program,
    seed: int = 0,
    sizes: Mapping[str, int] | int | None = None,
    function: str = "main",
    int_range: tuple[int, int] | None = None,
) -> dict[str, np.ndarray]:
    """Feeds for ``prog``'s inputs.

    Symbolic dims get ``sizes[name]`` (or ``sizes`` itself when an int, else a size drawn from
    1, 2, 3, 5 per symbol); floats are standard normal, ints a small signed range (unsigned:
    0..9; ``int_range`` ``(low, high)`` inclusive when given), bools both values.
    """
    rng = np.random.default_rng(seed)
    func = prog.functions[function]
    chosen: dict[str, int] = {}

    def size_of(dim) -> int:
        if not is_symbolic(dim):
            return int(dim)
        key = str(dim)
        if key not in chosen:
            if isinstance(sizes, int):
                chosen[key] = sizes
            elif sizes is not None and key in sizes:
                chosen[key] = int(sizes[key])
            else:
                chosen[key] = int(rng.choice(DEFAULT_SIZE_CHOICES))
        return chosen[key]

    feeds = {}
    for name, var in func.inputs.items():
        if types.is_state(var.sym_type):  # not a feed: states start at zero (reference.state)
            continue
        shape = tuple(size_of(d) for d in var.shape) if types.is_tensor(var.sym_type) else ()
        dtype = numpy_dtype(var)
        if int_range is not None and np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(int_range[0], int_range[1] + 1, size=shape).astype(dtype)
        else:
            feeds[name] = random_array(rng, dtype, shape)
    return feeds


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``dtype`` that exercise signs, zeros and both booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=shape).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.integers(-5, 6, size=shape).astype(dtype)

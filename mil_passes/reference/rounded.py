"""Transcendental functions rounded once to fp16 or fp32, with the same bits on every numpy CPU dispatch.

numpy picks a SIMD loop for ``exp``, ``log``, ``tanh``… by the CPU it runs on (and by
``NPY_DISABLE_CPU_FEATURES``), and the loops disagree in the last bits: at fp16 and fp32 directly,
and at float64 by an ulp or two. Here a function is evaluated in float64 with numpy, and every
element whose float64 value lies within ``MARGIN`` (relative) of a rounding boundary of the target
dtype (the midpoint between two neighbours, or the overflow threshold) is evaluated again with
Python's ``math`` module (the C library's scalar functions, which numpy's dispatch never touches).
Any two float64 evaluations closer than ``MARGIN`` to each other round to the same fp16/fp32 value
everywhere else, so the result no longer depends on numpy's dispatch. NaNs come out as the one
positive quiet NaN (the SIMD loops differ in NaN sign bits too).

For fp16 inputs of a one-argument function there are only 65,536 inputs: :func:`fp16_table`
computes them all once and a kernel indexes the table by the input's bits.
"""

from __future__ import annotations

import math
from functools import lru_cache
from types import SimpleNamespace
from typing import Callable

import numpy as np

from . import error_function

MARGIN = 2.0**-40
"""Relative distance to a rounding boundary within which libm's scalar value decides. numpy's
float64 loops are within a few float64 ulps (2^-52 relative) of each other; 2^-40 leaves 4,096."""

ROUNDED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))


def _each(function: Callable[[float], float], ieee: Callable[[np.ndarray], np.ndarray]) -> Callable:
    """``function`` applied to each element as a Python float (float64 out). Where it raises (a
    pole, outside the domain, overflow) the value is ``ieee``'s: an infinity or NaN, which no
    rounding can change."""

    def safe(value: float) -> float:
        try:
            return function(value)
        except (ValueError, OverflowError):
            with np.errstate(all="ignore"):
                return float(ieee(np.float64(value)))

    vectorized = np.vectorize(safe, otypes=[np.float64])
    return lambda x: vectorized(x) if np.size(x) else np.asarray(x, np.float64)


def _pow(base: float, exponent: float) -> float:
    """``math.pow`` with IEEE's answers where it raises: inf for 0 to a negative power, NaN for a
    negative base to a non-integer power, inf on overflow."""
    try:
        return math.pow(base, exponent)
    except ValueError:
        return math.inf if base == 0.0 else math.nan
    except OverflowError:
        return math.inf


# The transcendental functions of the formulas, from two sources: numpy's float64 loops (fast,
# dispatch-dependent in the last bits) and libm's scalar functions via ``math`` (element by element).
# erf/erfc have no numpy ufunc: the fast pass uses error_function.py's (numpy, within 1e-13 of libm).
_IEEE_AND_LIBM: dict[str, tuple[Callable, Callable[[float], float]]] = {
    "exp": (np.exp, math.exp),
    "exp2": (np.exp2, lambda v: math.pow(2.0, v)),
    "expm1": (np.expm1, math.expm1),
    "log": (np.log, math.log),
    "log1p": (np.log1p, math.log1p),
    "sin": (np.sin, math.sin),
    "cos": (np.cos, math.cos),
    "tan": (np.tan, math.tan),
    "asin": (np.arcsin, math.asin),
    "acos": (np.arccos, math.acos),
    "atan": (np.arctan, math.atan),
    "sinh": (np.sinh, math.sinh),
    "cosh": (np.cosh, math.cosh),
    "tanh": (np.tanh, math.tanh),
    "atanh": (np.arctanh, math.atanh),
}
NUMPY = SimpleNamespace(
    **{name: ieee for name, (ieee, _) in _IEEE_AND_LIBM.items()},
    erf=error_function.erf,
    erfc=error_function.erfc,
    pow=np.power,
)
LIBM = SimpleNamespace(
    **{name: _each(libm, ieee) for name, (ieee, libm) in _IEEE_AND_LIBM.items()},
    erf=_each(math.erf, np.sign),  # (erf and erfc never raise)
    erfc=_each(math.erfc, np.sign),
    pow=np.vectorize(_pow, otypes=[np.float64]),
)

Formula = Callable[..., np.ndarray]
"""``formula(fn, *operands)``: float64 arithmetic on float64 operands, calling transcendental
functions only through the namespace ``fn`` (:data:`NUMPY` or :data:`LIBM`)."""

UNARY: dict[str, Formula] = {
    name: (lambda fn, x, name=name: getattr(fn, name)(x)) for name in vars(NUMPY) if name != "pow"
}
"""The one-argument functions by their MIL op names (``asin``, ``exp2``…)."""


CHUNK = 1 << 15
"""Elements per block of :func:`evaluate`, :func:`rounded`, :func:`exact` and :func:`near_a_boundary`
(rows of about as many per block in :func:`along`): their float64 temporaries stay in cache."""


def near_a_boundary(wide: np.ndarray, dtype) -> np.ndarray:
    """Where the float64 ``wide`` lies within ``MARGIN`` (relative) of a point where rounding to
    ``dtype`` changes: a midpoint between neighbours, or the overflow threshold."""
    dtype = np.dtype(dtype)
    flat = np.ascontiguousarray(wide, dtype=np.float64).reshape(-1)
    near = np.empty(flat.shape, dtype=bool)
    for start in range(0, flat.size, CHUNK):
        near[start : start + CHUNK] = _near(flat[start : start + CHUNK], dtype)
    return near.reshape(np.shape(wide))


def _near(wide: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """In float64 only (fp16 conversions of subnormals are slow): ``dtype``'s values around ``wide``
    are the multiples of ``2**step``, its ulp there, and the boundaries are the odd multiples of
    half of it; the overflow threshold (largest value + half an ulp) is one of them."""
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        magnitude = np.abs(wide)
        _, exponent = np.frexp(magnitude)  # magnitude in [2**(exponent-1), 2**exponent)
        step = np.maximum(exponent - 1, info.minexp) - info.nmant
        in_ulps = np.ldexp(magnitude, -step)  # exact: a power-of-two scaling
        from_midpoint = np.abs(in_ulps - np.floor(in_ulps) - 0.5)
        return np.isfinite(wide) & (from_midpoint <= in_ulps * MARGIN)


def evaluate(formula: Formula, dtype, *operands) -> np.ndarray:
    """``formula`` on the operands (broadcast) in float64, settled for rounding once to ``dtype``:
    elements near a rounding boundary of ``dtype`` are recomputed with :data:`LIBM`, NaNs are the
    positive quiet NaN. Returns float64 (the caller rounds); for other dtypes, numpy's value as is."""
    settle = np.dtype(dtype) if np.dtype(dtype) in ROUNDED_DTYPES else None
    return _blocks(formula, operands, np.float64, settle)


def rounded(formula: Formula, dtype, *operands) -> np.ndarray:
    """:func:`evaluate` rounded to ``dtype``."""
    settle = np.dtype(dtype) if np.dtype(dtype) in ROUNDED_DTYPES else None
    return _blocks(formula, operands, dtype, settle)


def exact(formula: Formula, dtype, *operands) -> np.ndarray:
    """``formula`` on the operands (broadcast) in float64, rounded once to ``dtype``, for a formula
    of IEEE arithmetic only (``+ - * /``, ``sqrt``, comparisons, ``minimum``…: correctly rounded,
    the same bits on every CPU), which needs no settling."""
    return _blocks(formula, operands, dtype, None)


def _blocks(formula: Formula, operands, dtype, settle: np.dtype | None) -> np.ndarray:
    """``formula`` of the broadcast operands in float64, ``CHUNK`` elements at a time (its
    temporaries stay in cache; the formula is elementwise, so each element's value is what one pass
    over the whole array gives), settled for ``settle`` (:func:`_settled`) and written as ``dtype``."""
    arrays = [np.asarray(o) for o in operands]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    flat = [_flat(a, shape) for a in arrays]
    size = math.prod(shape)
    result = np.empty(size, dtype=dtype)
    with np.errstate(all="ignore"):
        for start in range(0, size, CHUNK):
            parts = [f if f.ndim == 0 else np.asarray(f[start : start + CHUNK], dtype=np.float64) for f in flat]
            chunk = np.asarray(formula(NUMPY, *parts), dtype=np.float64)
            if settle is not None:
                chunk = _settled(formula, settle, chunk, parts)
            result[start : start + CHUNK] = chunk
    return result.reshape(shape)


def _flat(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` broadcast to ``shape``, as one flat run of elements (a view when it already has
    that shape and is contiguous), or as a float64 scalar when it has one element."""
    if array.size == 1 and math.prod(shape) != 1:
        return np.asarray(array, dtype=np.float64).reshape(())
    if array.shape != shape:
        array = np.broadcast_to(array, shape)
    return np.ascontiguousarray(array).reshape(-1)


def _settled(formula: Formula, dtype, wide: np.ndarray, operands: list[np.ndarray]) -> np.ndarray:
    """``wide`` (``formula`` of the flat float64 ``operands`` with numpy) with its elements near a
    rounding boundary of ``dtype`` recomputed with :data:`LIBM`, and its NaNs made positive quiet."""
    near = _near(wide, np.dtype(dtype))
    if near.any():
        wide = wide.copy()
        wide[near] = formula(LIBM, *(o if o.ndim == 0 else o[near] for o in operands))
    nan = np.isnan(wide)
    return np.where(nan, np.nan, wide) if nan.any() else wide


def along(formula: Formula, dtype, x, axes: tuple[int, ...]) -> np.ndarray:
    """``formula(fn, rows)`` on ``x`` in float64 with ``axes`` flattened into the last axis of a 2-D
    ``rows``; it returns ``[k, n]`` (the shape of x comes back) or ``[k, 1]`` (a reduction over
    ``axes``, returned with them kept as size 1). Settled as :func:`evaluate` does, a whole row at a
    time: a row with any element near a rounding boundary of ``dtype`` is recomputed with LIBM.
    Rows are independent, so they run a block of about ``CHUNK`` elements at a time."""
    x = np.asarray(x)
    others = [a for a in range(x.ndim) if a not in axes]
    order = others + list(axes)
    moved = np.transpose(x, order)
    rows = moved.reshape(math.prod(moved.shape[: len(others)]), -1)
    count, length = rows.shape
    width: int | None = None
    blocks = []
    step = max(1, CHUNK // max(1, length))
    with np.errstate(all="ignore"):
        for start in range(0, count, step):
            block = np.asarray(rows[start : start + step], dtype=np.float64)
            wide = np.asarray(formula(NUMPY, block), dtype=np.float64)
            if np.dtype(dtype) in ROUNDED_DTYPES and wide.size:
                near = _near(wide, np.dtype(dtype)).any(axis=1)
                if near.any():
                    wide = wide.copy()
                    wide[near] = formula(LIBM, block[near])
                wide = np.where(np.isnan(wide), np.nan, wide)
            width = wide.shape[1]
            blocks.append(wide)
    if width is None:  # no rows: the formula never ran
        wide = np.asarray(formula(NUMPY, np.asarray(rows, dtype=np.float64)), dtype=np.float64)
        width = wide.shape[1]
    else:
        wide = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    if width == length:
        return np.transpose(wide.reshape(moved.shape), np.argsort(order))
    kept = tuple(1 if a in axes else x.shape[a] for a in range(x.ndim))
    return wide.reshape(kept)


ALL_FP16 = np.arange(2**16, dtype=np.uint16).view(np.float16)


@lru_cache(maxsize=None)
def fp16_table(function: str | Formula) -> np.ndarray:
    """The fp16 result of a one-argument function (a key of :data:`UNARY`, or a formula of one
    operand) for every fp16 bit pattern, indexed by the input's bits (read-only, computed once)."""
    formula = UNARY[function] if isinstance(function, str) else function
    table = rounded(formula, np.float16, ALL_FP16)
    table.flags.writeable = False
    return table


def unary(name: str, x) -> np.ndarray:
    """The function ``name`` of ``x`` rounded once to x's dtype when x is fp16 (by table) or fp32;
    numpy's value for other dtypes."""
    x = np.asarray(x)
    if x.dtype == np.float16:
        return fp16_table(name).take(x.view(np.uint16))
    if x.dtype == np.float32:
        return rounded(UNARY[name], np.float32, x)
    with np.errstate(all="ignore"):
        return UNARY[name](NUMPY, x)

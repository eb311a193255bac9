"""``erf`` and ``erfc`` of float64 arrays with numpy alone, within 1e-13 (relative) of libm's.

numpy has no error function, and libm's (``math.erfc``) runs one Python call per element (about
100 ns each). Here ``erfc(u) = exp(-u²) erfcx(u)`` for ``u = |t|``, with ``erfcx`` (smooth and
bounded) interpolated by a Chebyshev polynomial of degree ``DEGREE`` on each piece of width
``PIECE`` up to ``LAST`` (beyond it ``exp(-u²)`` is 0 in float64); ``erfc(-u) = 2 - erfc(u)``.
``erf(t)`` is ``t P(t²)`` for ``|t| < 0.5`` (another interpolant) and ``±(1 - erfc(|t|))`` beyond.

The coefficients are computed once, on first use, from libm's ``erfc`` (and the asymptotic series
of ``erfcx`` from ``u = 10``, where ``erfc`` nears underflow). The error against libm stays below
1e-13 relative (``tests/test_error_function.py`` measures it; rounding ``u²`` in ``exp(-u²)``
accounts for most of it, 8e-14 near ``u = 27``), well inside ``rounded.MARGIN`` (9.1e-13): an
element this approximation puts farther than the margin from a rounding boundary rounds as libm's
value does, and :mod:`.rounded` recomputes the others with libm.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numpy.polynomial import chebyshev

from . import bitwise

PIECE = 0.25
DEGREE = 9
LAST = 28.0
SMALL = 0.5
"""Below it, erf is ``t P(t²)`` (``1 - erfc`` would lose erf's relative precision near 0)."""


def _erfcx(u: float) -> float:
    """``exp(u²) erfc(u)`` to a few float64 ulps: libm's erfc times ``exp(u²)`` split so that
    ``u²`` is not rounded (``hi²`` is exact), or the asymptotic series from ``u = 10``."""
    if u >= 10.0:
        total, term, n = 0.0, 1.0, 0
        while abs(term) > 1e-20:
            total += term
            n += 1
            term *= -(2 * n - 1) / (2 * u * u)
        return total / (u * math.sqrt(math.pi))
    hi = float(np.float32(u))
    return math.erfc(u) * math.exp(hi * hi) * math.exp((u - hi) * (u + hi))


@lru_cache(maxsize=None)
def _erfcx_pieces() -> np.ndarray:
    """``[DEGREE + 1, pieces]``: row ``j`` holds coefficient ``j`` of every piece's interpolant
    (in ``z`` from -1 to 1 across the piece)."""
    pieces = int(LAST / PIECE)
    rows = [
        chebyshev.chebinterpolate(
            np.vectorize(lambda z, start=p * PIECE: _erfcx(start + (z + 1.0) * PIECE / 2.0)), DEGREE
        )
        for p in range(pieces)
    ]
    table = np.ascontiguousarray(np.array(rows).T)
    table.flags.writeable = False
    return table


@lru_cache(maxsize=None)
def _erf_small() -> np.ndarray:
    """Chebyshev coefficients of ``erf(t) / t`` as a function of ``s = t²`` on ``[0, SMALL²]``
    (``s`` mapped to -1..1)."""
    top = SMALL * SMALL

    def ratio(z: float) -> float:
        t = math.sqrt((z + 1.0) * top / 2.0)
        return math.erf(t) / t if t else 2.0 / math.sqrt(math.pi)

    return chebyshev.chebinterpolate(np.vectorize(ratio), 12)


def _erfc_of_magnitude(u: np.ndarray) -> np.ndarray:
    """``erfc(u)`` for ``u >= 0`` (NaN for NaN)."""
    table = _erfcx_pieces()
    clamped = np.fmin(u, LAST)  # NaN and infinities read the last piece (exp makes them NaN and 0)
    piece = (clamped * (1.0 / PIECE)).astype(np.intp)
    np.minimum(piece, table.shape[1] - 1, out=piece)
    z = clamped * (2.0 / PIECE)
    z -= 2 * piece + 1
    twice_z = z + z
    # Clenshaw's recurrence, each piece's coefficients gathered per element.
    later, latest = np.zeros_like(z), table[DEGREE].take(piece)
    for j in range(DEGREE - 1, 0, -1):
        step = twice_z * latest
        step -= later
        step += table[j].take(piece)
        later, latest = latest, step
    erfcx = z * latest
    erfcx -= later
    erfcx += table[0].take(piece)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.exp(-(u * u)) * erfcx


def erfc(t) -> np.ndarray:
    """``erfc`` of a float64 array."""
    t = np.asarray(t, dtype=np.float64)
    tail = _erfc_of_magnitude(np.abs(t))
    return bitwise.where(t < 0, 2.0 - tail, tail)  # np.where mispredicts on mixed signs


def erf(t) -> np.ndarray:
    """``erf`` of a float64 array."""
    t = np.asarray(t, dtype=np.float64)
    u = np.abs(t)
    small = u < SMALL
    outer = np.copysign(1.0 - _erfc_of_magnitude(u), t)
    if not small.any():
        return outer
    near = t[small]
    inner = near * chebyshev.chebval(near * near * (2.0 / (SMALL * SMALL)) - 1.0, _erf_small())
    outer[small] = inner
    return outer

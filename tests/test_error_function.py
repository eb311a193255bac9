"""error_function.py: numpy's erf and erfc stay within 1e-13 (relative) of libm's, far inside
rounded.MARGIN, on a dense grid of the whole range and at the special values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mil_passes.reference import error_function, rounded

BOUND = 1e-13


def _grid() -> np.ndarray:
    rng = np.random.default_rng(0)
    magnitudes = np.concatenate(
        [
            np.linspace(0.0, 27.5, 200_001),  # every piece, up to where erfc underflows
            rng.uniform(0.0, 6.0, 100_000),
            rng.uniform(0.0, 0.6, 20_000),  # around erf's small-argument interpolant
            [5e-324, 1e-300, 1e-10, error_function.SMALL, np.nextafter(error_function.SMALL, 0.0)],
        ]
    )
    return np.concatenate([magnitudes, -magnitudes])


def _relative_error(fast: np.ndarray, libm: np.ndarray) -> np.ndarray:
    normal = np.abs(libm) > 1e-300  # below, libm's own value is subnormal: an absolute check
    return np.abs(fast[normal] - libm[normal]) / np.abs(libm[normal])


@pytest.mark.parametrize("name", ["erfc", "erf"])
def test_within_bound_of_libm(name):
    t = _grid()
    fast = getattr(error_function, name)(t)
    libm = np.array([getattr(math, name)(v) for v in t])
    assert _relative_error(fast, libm).max() < BOUND
    assert np.abs(fast - libm).max() < 1e-300 or _relative_error(fast, libm).max() < BOUND
    assert BOUND < rounded.MARGIN / 8


@pytest.mark.parametrize("name", ["erfc", "erf"])
def test_special_values(name):
    """Exact where the value is 0, 1 or 2 at float64 precision; NaN for NaN. (erfc(0) = 1 is
    within the bound, not exact.)"""
    values = np.array([np.inf, -np.inf, 1e300, -1e300, 30.0, -30.0] + ([0.0, -0.0] if name == "erf" else []))
    fast = getattr(error_function, name)(values)
    libm = np.array([getattr(math, name)(v) for v in values])
    np.testing.assert_array_equal(fast, libm)
    assert np.signbit(fast).tolist() == np.signbit(libm).tolist()
    assert np.isnan(getattr(error_function, name)(np.array([np.nan]))).all()


def test_rounded_uses_numpy_erfc_and_settles_with_libm():
    """The fast pass is error_function's; an element at an fp32 midpoint is recomputed with libm."""
    assert rounded.NUMPY.erfc is error_function.erfc and rounded.NUMPY.erf is error_function.erf
    x = np.linspace(-5, 5, 10_001).astype(np.float32)
    fast = rounded.rounded(rounded.UNARY["erf"], np.float32, x)
    libm = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(np.float32)
    np.testing.assert_array_equal(fast, libm)

"""``x @ weight.T`` for an fp16 weight, a block of rows at a time, with the bits of widening it whole.

``linear`` multiplies fp16 in fp32 (Core ML accumulates fp16 products in fp32) through BLAS:
``np.matmul(x, weight.astype(np.float32).T)``. At LLM widths the weights do not fit any cache of
widened copies, and numpy's fp16 to fp32 cast costs 3-5 ns an element on CPUs without AVX-512
FP16 (its half conversion is not vectorised there): a 1B-parameter decode step spent seconds
widening.

Here the weight is read a block of rows at a time into a small int32 buffer: the fp16 bits
widened (sign-extended), shifted left 13 and bits 28-30 cleared are the fp32 bits of
``w * 2**-112``, exactly, for every finite fp16 value (subnormals land on fp32 subnormals); three
integer passes in cache instead of numpy's cast. ``x`` is scaled by ``2**112`` (exact while
``|x| < 2**16``), so each product ``x' * w'`` is the same real number as ``x * w``: BLAS forms the
same products and sums and rounds them the same, and the result has the bits of the matmul of
the widened weight. For one row of ``x`` (a decode step) the product is a matrix-vector one
(BLAS's ``gemv``), each output the dot product of its own weight row, so a block of rows (whole
groups of :data:`BLOCK_ALIGN`) gives the bits of the whole, and no fp32 copy of the weight is
made. With more rows, BLAS's ``gemm`` tiles the weight rows in a way that depends on their number
(measured with OpenBLAS 0.3.30: 4 rows of ``x`` in blocks of 56 or 64 weight rows changed bits),
so the weight is widened whole this way, into one transient int32 buffer.

A weight holding inf or NaN (fp16 exponent 31) has no such image; :func:`matmul_fp16_t` returns
``None`` for it, as for any ``x`` it does not take. Whether a weight is finite is checked as its
blocks are read (two reductions), or once for a frozen weight (:mod:`.frozen`).
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

from .frozen import is_frozen

MAX_ROWS = 1
"""Rows of ``x`` (a decode step's one token) for which the weight is widened a block at a time."""

BLOCK_ELEMENTS = 1 << 15
"""Weight elements widened at a time (a 128 KiB int32 buffer, in L2)."""

BLOCK_ALIGN = 64
"""Blocks start at multiples of this many weight rows: BLAS's ``gemv`` works on groups of rows
(4 in OpenBLAS's Haswell kernel) and sums a last, partial group in another order, so a block
that ends inside a group changes the bits of its last rows."""

_SCALE = np.float32(2.0**112)
_CLEAR_28_TO_30 = np.int32(-0x70000001)  # 0x8FFFFFFF: keeps the sign, exponent and mantissa bits
_X_LIMIT = np.float32(2.0**16)
_EXPONENT_31 = 0x7C00  # int16 bits of +inf; of -inf and negative NaNs as uint16: 0xFC00 and above


def _finite(bits: np.ndarray) -> bool:
    """Whether the fp16 values with int16 ``bits`` are all finite (two reductions, no copy)."""
    return bool(bits.max() < _EXPONENT_31) and bool(bits.view(np.uint16).max() < 0xFC00)


_FINITE: dict[int, tuple[weakref.ref, bool]] = {}


def _forget(key: int, _: weakref.ref) -> None:
    _FINITE.pop(key, None)


def known_finite(weight: np.ndarray) -> bool | None:
    """Whether fp16 ``weight`` is all finite, worked out once for a frozen array (:mod:`.frozen`);
    ``None`` for a writeable one (checked block by block as it is read)."""
    if not is_frozen(weight):
        return None
    key = id(weight)
    known = _FINITE.get(key)
    if known is None or known[0]() is not weight:
        known = (weakref.ref(weight, functools.partial(_forget, key)), _finite(weight.view(np.int16)))
        _FINITE[key] = known
    return known[1]


def scaled_fp32(bits: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` (int32, the shape of ``bits``) holding the fp32 bits of each finite fp16 value
    (int16 ``bits``) times ``2**-112``; returned as its fp32 view."""
    np.copyto(out, bits, casting="unsafe")
    np.left_shift(out, 13, out=out)
    np.bitwise_and(out, _CLEAR_28_TO_30, out=out)
    return out.view(np.float32)


def matmul_fp16_t(x: np.ndarray, weight: np.ndarray) -> np.ndarray | None:
    """``np.matmul(x, weight.astype(np.float32).T)``, its bits, for fp32 ``x`` ``[..., K]`` (each
    ``|x| < 2**16``) and a C-contiguous fp16 ``weight`` ``[N, K]`` of finite values; ``None`` where
    this path does not apply. Up to :data:`MAX_ROWS` rows of ``x``, the weight is widened a block
    of rows at a time; beyond, whole."""
    if (
        x.dtype != np.float32
        or weight.dtype != np.float16
        or weight.ndim != 2
        or x.ndim < 1
        or x.shape[-1] != weight.shape[1]
        or not weight.flags.c_contiguous
        or weight.size == 0
    ):
        return None
    rows = x.size // x.shape[-1] if x.shape[-1] else 0
    if rows == 0 or (np.abs(x) >= _X_LIMIT).any():
        return None
    n, k = weight.shape
    scaled_x = x.reshape(rows, k) * _SCALE
    finite = known_finite(weight)
    if finite is False:
        return None
    bits = weight.view(np.int16)
    block_rows = max(BLOCK_ALIGN, BLOCK_ELEMENTS // k // BLOCK_ALIGN * BLOCK_ALIGN) if rows <= MAX_ROWS else n
    buffer = np.empty((min(block_rows, n), k), np.int32)
    out = np.empty((rows, n), np.float32)
    for start in range(0, n, block_rows):
        block = bits[start : start + block_rows]
        if finite is None and not _finite(block):
            return None
        wide = scaled_fp32(block, buffer[: len(block)])
        np.matmul(scaled_x, wide.T, out=out[:, start : start + len(block)])
    return out.reshape(*x.shape[:-1], n)

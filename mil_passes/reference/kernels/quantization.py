"""Quantization kernels: ``quantize``/``dequantize`` (iOS17+) and the constexpr decompression ops.

Affine arithmetic is done in float64 on the exact stored values and rounded once to the declared
dtype, so ``dequantize`` is the correctly rounded ``scale * (q - zero_point)`` and ``quantize``
rounds the exact quotient ``x / scale`` half to even. coremltools' ``quantize``
``value_inference`` divides in the input dtype, so fp16 inputs round the quotient twice (18 of
1,536 values off by one in a measured sample); ``dequantize`` and the ``constexpr_*`` ops have
no ``value_inference`` (only ``materialized_val_inference``, which needs const inputs).

Pure data movement (unpacking bits, LUT lookups, scattering sparse values) reuses
``coremltools.optimize._utils`` helpers, which are exact.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import types
from coremltools.optimize import _utils as optimize_utils

from . import kernel, out_dtype


def _wide(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _along_axis(param, rank: int, axis) -> np.ndarray:
    """A scalar or ``[D]`` quantization parameter broadcast against a rank-``rank`` tensor."""
    param = _wide(param)
    if param.ndim == 0 or param.ndim == rank:
        return param
    axis = int(np.asarray(axis))
    axis = axis + rank if axis < 0 else axis
    return param.reshape(tuple(-1 if i == axis else 1 for i in range(rank)))


def _affine_dequantize(data, scale, zero_point, axis) -> np.ndarray:
    """``scale * (data - zero_point)`` with per-tensor or per-``axis`` parameters."""
    rank = np.ndim(data)
    shifted = _wide(data)
    if zero_point is not None:
        shifted = shifted - _along_axis(zero_point, rank, axis)
    return _along_axis(scale, rank, axis) * shifted


@kernel("quantize")
def quantize(op, args):
    """``clip(round_half_even(input / scale) + zero_point)`` to the range of ``output_dtype``.

    A NaN input quantizes to the zero point (as 0.0 does). MIL does not say what it gives, and
    numpy's float-to-int conversion of NaN is the C cast's undefined behaviour (0 on one CPU,
    the low byte of ``INT_MIN`` on another). The zero point keeps ``dequantize(quantize(NaN))``
    at 0 under every scale, zero point and storage type, so a pass that re-expresses the same
    quantization (``int8`` with zero point -128 as ``uint8`` with 0) gives the same values."""
    x = _wide(args["input"])
    axis = args.get("axis")
    with np.errstate(invalid="ignore"):
        quotient = x / _along_axis(args["scale"], x.ndim, axis)
    quantized = np.rint(np.where(np.isnan(quotient), 0.0, quotient))
    if args.get("zero_point") is not None:
        quantized = quantized + _along_axis(args["zero_point"], x.ndim, axis)
    bounds = types.type_mapping.builtin_to_range(types.string_to_builtin(args["output_dtype"]))
    return np.clip(quantized, bounds.low, bounds.high).astype(out_dtype(op))


@kernel("dequantize")
def dequantize(op, args):
    return _affine_dequantize(args["input"], args["scale"], args.get("zero_point"), args.get("axis"))


@kernel("constexpr_affine_dequantize")
def constexpr_affine_dequantize(op, args):
    return _affine_dequantize(args["quantized_data"], args["scale"], args["zero_point"], args["axis"])


@kernel("constexpr_cast")
def constexpr_cast(op, args):
    return np.asarray(args["source_val"]).astype(out_dtype(op))


def _repeat_blocks(param: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Repeat each block parameter over its block so it has ``shape`` (block sizes divide)."""
    return optimize_utils.repeat_data_as(param, shape)


def _blockwise_shift_scale(data, scale, offset) -> np.ndarray:
    shape = np.shape(data)
    shifted = _wide(data)
    if offset is not None:
        shifted = shifted - _repeat_blocks(_wide(offset), shape)
    return _repeat_blocks(_wide(scale), shape) * shifted


DECODE_ELEMENTS = 1 << 20
"""Elements of a large weight decoded (in float64) at a time, each block rounded once into the
result: float64 temporaries of a whole 1B-model embedding would take about 6 GB."""


@kernel("constexpr_blockwise_shift_scale")
def constexpr_blockwise_shift_scale(op, args):
    """``scale * (data - offset)`` where each scale/offset covers one block of ``data``; a large
    weight a block of rows at a time (each element's value is the same)."""
    data, scale, offset = np.asarray(args["data"]), np.asarray(args["scale"]), args.get("offset")
    if data.ndim == 0 or data.size <= DECODE_ELEMENTS:
        return _blockwise_shift_scale(data, scale, offset)
    offset = None if offset is None else np.asarray(offset)
    rows_per_block = data.shape[0] // scale.shape[0]  # rows of data one scale row covers
    step = max(1, DECODE_ELEMENTS // (data[0].size * rows_per_block)) * rows_per_block
    out = np.empty(data.shape, out_dtype(op))
    for start in range(0, data.shape[0], step):
        blocks = slice(start // rows_per_block, (start + step) // rows_per_block)
        out[start : start + step] = _blockwise_shift_scale(
            data[start : start + step], scale[blocks], None if offset is None else offset[blocks]
        )
    return out


def _lut_to_dense_ios18(indices, lut, vector_axis) -> np.ndarray:
    """``optimize_utils.lut_to_dense``, a block of rows at a time for a large weight.

    The helper repeats the LUT once per element (``palette`` values each: 16 fp16 values, 32 bytes
    an element at 4 bits), with an int64 index per element beside it: for a 1B model's
    128,256x2048 embedding about 11 GB at once. Each row's values depend only on its own indices
    and its LUT block, so rows are decoded :data:`DECODE_ELEMENTS` elements at a time, in whole
    LUT blocks along axis 0, into the result (the same values: a lookup, nothing computed)."""
    indices, lut = np.asarray(indices), np.asarray(lut)
    vector_axis = None if vector_axis is None else int(np.asarray(vector_axis))
    vector_size = lut.shape[-1] if lut.ndim >= 2 else 1
    along_rows = vector_size > 1 and vector_axis is not None and vector_axis % max(indices.ndim, 1) == 0
    if indices.ndim == 0 or indices.size <= DECODE_ELEMENTS or along_rows:
        return optimize_utils.lut_to_dense(indices, lut, vector_axis)
    rows_per_block = 1 if lut.shape[0] == 1 else indices.shape[0] // lut.shape[0]
    step = max(1, DECODE_ELEMENTS // (indices[0].size * rows_per_block)) * rows_per_block
    out: np.ndarray | None = None
    for start in range(0, indices.shape[0], step):
        block_lut = lut if lut.shape[0] == 1 else lut[start // rows_per_block : (start + step) // rows_per_block]
        rows = optimize_utils.lut_to_dense(indices[start : start + step], block_lut, vector_axis)
        if out is None:
            out = np.empty((indices.shape[0], *rows.shape[1:]), rows.dtype)
        out[start : start + step] = rows
    assert out is not None
    return out


@kernel("constexpr_lut_to_dense")
def constexpr_lut_to_dense(op, args):
    """iOS16: ``lut[unpack(indices)]`` reshaped to ``shape``; iOS18: blockwise/vector LUTs."""
    lut = np.asarray(args["lut"])
    if "shape" in args:  # iOS16: indices packed LSB-first into bytes, one flat LUT
        shape = tuple(int(d) for d in np.asarray(args["shape"]))
        nbits = int(np.log2(lut.size))
        count = int(np.prod(shape, dtype=np.int64))
        flat = optimize_utils.restore_elements_from_packed_bits(np.asarray(args["indices"]), nbits, count)
        return lut[flat.astype(np.int64)].reshape(shape)
    return _lut_to_dense_ios18(args["indices"], lut, args.get("vector_axis"))


def _sparse_to_dense(nonzero_data, mask) -> np.ndarray:
    """Scatter ``nonzero_data`` in row-major order to where ``mask`` is set; zeros elsewhere."""
    return optimize_utils.sparse_to_dense(np.asarray(nonzero_data), np.asarray(mask))


@kernel("constexpr_sparse_to_dense")
def constexpr_sparse_to_dense(op, args):
    """iOS16: ``mask`` is a packed LSB-first bitmask plus ``shape``; iOS18: a uint1 tensor."""
    if "shape" in args:
        shape = tuple(int(d) for d in np.asarray(args["shape"]))
        count = int(np.prod(shape, dtype=np.int64))
        bits = np.unpackbits(np.asarray(args["mask"], dtype=np.uint8), bitorder="little", count=count)
        return _sparse_to_dense(args["nonzero_data"], bits.reshape(shape))
    return _sparse_to_dense(args["nonzero_data"], args["mask"])


@kernel("constexpr_lut_to_sparse")
def constexpr_lut_to_sparse(op, args):
    """Look up the LUT for the set entries only; returns ``(mask, nonzero_data)``.

    With vector palettization the mask is repeated ``VECTOR_SIZE`` times along ``vector_axis``.
    """
    mask = np.asarray(args["indices_mask"])
    lut = np.asarray(args["lut"])
    vector_axis = args.get("vector_axis")
    indices = _sparse_to_dense(args["indices_nonzero_data"], mask)
    dense = _lut_to_dense_ios18(indices, lut, vector_axis)
    if vector_axis is not None:
        mask = np.repeat(mask, lut.shape[-1], axis=int(np.asarray(vector_axis)))
    return mask, dense[mask != 0]


@kernel("constexpr_sparse_blockwise_shift_scale")
def constexpr_sparse_blockwise_shift_scale(op, args):
    """Dequantize the set entries blockwise; returns ``(data_mask, nonzero_data)``."""
    mask = np.asarray(args["data_mask"])
    dense = _sparse_to_dense(args["nonzero_data"], mask)
    dequantized = _blockwise_shift_scale(dense, args["scale"], args.get("offset"))
    return mask, dequantized[mask != 0]

"""Convolution and pooling kernels: conv, conv_transpose, max_pool, avg_pool, l2_pool.

The spatial semantics are coremltools' op definitions (``ops/defs/iOS15/conv.py`` and
``pool.py``; iOS17 only widens conv's weight/bias dtypes, iOS16 and iOS18 change nothing):

- ``same`` pads a total of ``max(0, (ceil(d / s) - 1) * s + k_eff - d)`` per spatial dim, the odd
  element after (bottom/right heavy); ``same_lower`` puts it before (top/left heavy), as the
  NeuralNetwork backend maps them. ``pad`` is read only when ``pad_type`` is ``custom``.
- ``conv_transpose`` is the adjoint of ``conv`` with the same parameters: output position ``o``
  is position ``o + pad_before`` of the uncropped result (zero, plus bias, beyond it).
  ``same`` pads are computed on the output size, as TensorFlow does.
- ``ceil_mode`` follows coremltools' output-size rule, and avg_pool divides like PyTorch: by
  the window clipped to the padded input, or to ``x`` alone when
  ``exclude_padding_from_average``. A pooling window that holds no element of ``x`` (padding
  of ``k`` or more, or a ``ceil_mode`` window starting past ``x``) raises: Core ML's value for
  it is unspecified, and PyTorch drops or forbids such windows.

Precision: products (exact, of fp16 or fp32 values) and sums are computed in float64 and
rounded once to the declared dtype (fp16 or fp32); BLAS's summation order moves a float64 sum by
its last bits only, which the rounding hides (observed, not guaranteed: docs/numerics.md). Winograd's
transforms are exact sums for ordinary values, its products rounded in float64: its results are
the correctly rounded ones as often as im2col's (measured: docs/numerics.md).

Vectorized: conv is im2col (one float64 copy of a strided view of every tap) and one batched
matmul per call, a block of output rows at a time where the columns would not stay in cache; a 3x3
stride-1 conv of 16 or more channels, at most 128x128 filters and enough outputs Winograd's
F(2x2, 3x3), four matmuls a block of tile rows at a time; a depthwise conv a multiply-add per
kernel offset; conv_transpose is one matmul plus a strided add per kernel offset; pooling reduces
one strided view per window offset (max_pool in ``x``'s dtype: a maximum is exact). No loop visits
output pixels.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import UnsupportedOpError
from . import kernel, out_dtype
from ..widened import const_as, kept

Pads = list[tuple[int, int]]


def _int_list(value, rank: int, default: int) -> list[int]:
    if value is None:
        return [default] * rank
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _pad_type(op, args) -> str:
    pad_type = args.get("pad_type")
    pad_type = "valid" if pad_type is None else str(pad_type).lower()
    if pad_type not in ("valid", "custom", "same", "same_lower"):
        raise UnsupportedOpError(op.op_type, op.name, f"unknown pad_type '{pad_type}'")
    return pad_type


def spatial_pads(op, pad_type: str, pad, sizes: list[int], kernel_sizes: list[int], strides: list[int]) -> Pads:
    """(before, after) padding per spatial dim of an input of ``sizes`` (dilated kernel sizes)."""
    rank = len(sizes)
    if pad_type == "valid":
        return [(0, 0)] * rank
    if pad_type == "custom":
        values = _int_list(pad, 2 * rank, 0)
        if len(values) != 2 * rank or min(values) < 0:
            raise UnsupportedOpError(op.op_type, op.name, f"pad {values} is not {2 * rank} non-negative sizes")
        return [(values[2 * i], values[2 * i + 1]) for i in range(rank)]
    pads = []
    for size, k, s in zip(sizes, kernel_sizes, strides):
        total = max(0, (math.ceil(size / s) - 1) * s + k - size)
        small, large = total // 2, total - total // 2
        pads.append((small, large) if pad_type == "same" else (large, small))
    return pads


def _as_float64(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _spatial_axes(rank: int) -> tuple[int, ...]:
    return tuple(range(2, 2 + rank))


# -- conv ----------------------------------------------------------------------------------------


@kernel("conv")
def conv(op, args) -> np.ndarray:
    """``conv``: grouped N-d cross-correlation (1-D to 3-D), im2col then a batched matmul
    (depthwise: the taps accumulated one by one; 3x3 stride 1: :func:`_winograd`)."""
    x, weight = np.asarray(args["x"]), const_as(op, "weight", args["weight"], np.float64)
    if x.dtype == np.float16:
        x = x.astype(np.float32)  # exact; numpy widens fp32 to float64 faster than fp16
    rank = x.ndim - 2
    batch, c_in = x.shape[:2]
    c_out, c_group = weight.shape[:2]
    kernel_sizes = list(weight.shape[2:])
    strides = _int_list(args.get("strides"), rank, 1)
    dilations = _int_list(args.get("dilations"), rank, 1)
    groups = int(args["groups"]) if args.get("groups") is not None else 1
    if c_in != c_group * groups or c_out % groups:
        raise UnsupportedOpError(
            op.op_type,
            op.name,
            f"x has {c_in} channels, weight {list(weight.shape)}, groups {groups}",
        )
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_sizes, dilations)]
    sizes = list(x.shape[2:])
    pads = spatial_pads(op, _pad_type(op, args), args.get("pad"), sizes, dilated, strides)
    out_sizes = [(n + b + a - k) // s + 1 for n, (b, a), k, s in zip(sizes, pads, dilated, strides)]
    if min(out_sizes) <= 0:
        raise UnsupportedOpError(op.op_type, op.name, f"output spatial size {out_sizes} is empty")
    depthwise = c_group == 1 and c_out == groups  # one filter per channel
    dtype = out_dtype(op)
    dtype = dtype if dtype in (np.float16, np.float32) else np.dtype(np.float64)
    if depthwise and rank > 1 and c_in > 1 and out_sizes[-1] < LONG_ROWS and einsum_sums_in_tap_order():
        return _depthwise(x, weight, pads, (dilations, out_sizes, strides), args.get("bias"), dtype)
    if _winograd_applies(x, weight, groups, strides, dilations, out_sizes):
        filters = kept(op, "weight", args["weight"], "winograd", 16 * weight[:, :, 0, 0].nbytes, _winograd_filters)
        filters = _winograd_filters(weight) if filters is None else filters
        return _winograd(x, filters, pads, args.get("bias"), dtype)
    out_count, kernel_count = math.prod(out_sizes), math.prod(kernel_sizes)
    if kernel_count == 1 and out_sizes == sizes and not depthwise:  # 1x1, stride 1, no padding
        # the columns of the general case below, without its copies: x itself in float64
        columns = np.asarray(x, dtype=np.float64, order="C").reshape(batch, groups, c_group, out_count)
        result = np.matmul(weight.reshape(groups, c_out // groups, c_group), columns)
        return _finished(result.reshape(batch, c_out, *out_sizes), args.get("bias"), dtype)
    padded = _zero_padded(x, pads)

    # taps: what each output position sees at each kernel offset, [N, C_in, *K, *out] (one view of padded).
    steps = padded.strides
    taps = as_strided(
        padded,
        (batch, c_in, *kernel_sizes, *out_sizes),
        (*steps[:2], *(d * t for d, t in zip(dilations, steps[2:])), *(s * t for s, t in zip(strides, steps[2:]))),
        writeable=False,
    )
    if depthwise:  # long rows: the taps accumulated one by one in place
        taps_weight = weight.reshape(c_out, kernel_count)
        result = np.zeros((batch, c_out, *out_sizes))
        for index, offset in enumerate(itertools.product(*(range(k) for k in kernel_sizes))):
            result += taps_weight[:, index].reshape((-1,) + (1,) * rank) * taps[(slice(None), slice(None)) + offset]
        return _finished(result, args.get("bias"), dtype)
    # columns: [N, C_in, *K, *out] in float64 (one copy of the taps), as [N, groups, C_in/groups * K, out]
    # a block of output rows at a time where all of them would not stay in cache.
    filters = weight.reshape(groups, c_out // groups, c_group * kernel_count)
    result = np.empty((batch, groups, c_out // groups, out_count))
    row_size = out_count // out_sizes[0]
    rows = _column_rows(batch * c_in * kernel_count * row_size * 8, out_sizes[0])
    buffer = np.empty(batch * c_in * kernel_count * rows * row_size)
    kernel_axes = (slice(None),) * (2 + rank)
    for top in range(0, out_sizes[0], rows):
        block = slice(top, min(top + rows, out_sizes[0]))
        count = block.stop - block.start
        part = buffer[: batch * c_in * kernel_count * count * row_size].reshape(
            batch, c_in, *kernel_sizes, count, *out_sizes[1:]
        )
        np.copyto(part, taps[kernel_axes + (block,)])
        np.matmul(
            filters,
            part.reshape(batch, groups, c_group * kernel_count, count * row_size),
            out=result[..., top * row_size : block.stop * row_size],
        )
    return _finished(result.reshape(batch, c_out, *out_sizes), args.get("bias"), dtype)


COLUMN_BYTES = 8 << 20
"""im2col columns larger than this (float64) are built and multiplied a block of output rows at a
time, each block about ``COLUMN_BLOCK_BYTES``: the block's columns stay in cache between the copy
and the matmul (a 32-channel 80x80 3x3 conv, 14.7 MB of columns: 4.88 → 3.72 ms; at 64 channels
and 40x40, 7.4 MB, blocks were slower: 3.96 against 3.79 ms)."""

COLUMN_BLOCK_BYTES = 768 << 10
"""Columns per block where im2col goes a block of output rows at a time."""


def _column_rows(row_bytes: int, rows: int) -> int:
    """Output rows per im2col block, for columns of ``row_bytes`` per output row."""
    if row_bytes * rows <= COLUMN_BYTES:
        return rows
    return max(1, min(rows, COLUMN_BLOCK_BYTES // row_bytes))


# -- conv, 3x3 stride 1: Winograd's F(2x2, 3x3) ------------------------------------------------------

WINOGRAD_CHANNELS = 16
"""A 3x3 stride-1 conv with at least this many input and output channels may run :func:`_winograd`
(fewer: its transforms cost more than the multiplies it saves)."""

WINOGRAD_FILTERS = 128 * 128
"""...and at most this many filters (input times output channels): their transforms, 16 float64
values each (2 MiB at 128x128), are read once per block of tiles (at 256 channels and 14x14,
7.3 ms by im2col against 9.7; at 512 and 7x7, 15 against 55)."""

WINOGRAD_WORK = 4096
"""...and at least this many tiles (2x2 outputs, in every image of the batch) times the fewer of
its channels in and out: the transforms' fixed costs need that many (at 32 channels, 16x16 outputs
were a tie and 80x80 went from 3.4 to 2.6 ms; at 64, 12x12 were a tie and 40x40 went from 3.1 to
2.2 ms)."""

WINOGRAD_BLOCK_BYTES = 3 << 18
"""Float64 bytes of the two buffers a :func:`_winograd` block's matrices take turns in: a block of
tile rows at a time, so each stays in cache between its matmuls (in the benchmark's net, 768 KiB
beat 384 KiB, 512 KiB, 1 MiB, 1.5 MiB and 3 MiB: bigger blocks leave the cache, smaller ones make
BLAS pack the filters for fewer tiles)."""

# Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2016): a 4x4 tile d of x and
# a 3x3 filter g give a 2x2 tile of outputs, Aᵀ[(G g Gᵀ) ⊙ (Bᵀ d B)]A. As Kronecker products they
# act on a flattened tile: V = (Bᵀ ⊗ Bᵀ) vec(d), U = (G ⊗ G) vec(g), Y = (Aᵀ ⊗ Aᵀ)(U ⊙ V).
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
_TILE_IN, _FILTER, _TILE_OUT = np.kron(_BT, _BT), np.kron(_G, _G), np.kron(_AT, _AT)  # [16, 16], [16, 9], [4, 16]
_TILE_OUT_BIAS = np.hstack([_TILE_OUT, np.ones((4, 1))])  # [4, 17]: and the bias, times 1


def _winograd_applies(x: np.ndarray, weight: np.ndarray, groups: int, strides, dilations, out_sizes) -> bool:
    """Whether ``conv`` runs :func:`_winograd`: a 2-D 3x3 conv, stride and dilation 1, one group,
    channels and tiles within :data:`WINOGRAD_CHANNELS`, :data:`WINOGRAD_FILTERS` and
    :data:`WINOGRAD_WORK`, every value of ``x`` and ``weight`` finite (a transform adds a tile's
    values: an infinity would meet another where the plain sum has one)."""
    if weight.shape[2:] != (3, 3) or groups != 1 or list(strides) != [1, 1] or list(dilations) != [1, 1]:
        return False
    if x.dtype != np.float32:  # fp32 values (fp16 widened): the exactness above rests on their 24 bits
        return False
    fewer, filters = min(weight.shape[:2]), weight.shape[0] * weight.shape[1]
    tiles = x.shape[0] * math.prod((size + 1) // 2 for size in out_sizes)
    if fewer < WINOGRAD_CHANNELS or filters > WINOGRAD_FILTERS or tiles * fewer < WINOGRAD_WORK:
        return False
    return bool(np.isfinite(x).all() and np.isfinite(weight).all())


def _winograd_filters(weight: np.ndarray) -> np.ndarray:
    """``U``: each 3x3 filter of ``weight`` ``[C_out, C, 3, 3]`` times ``G ⊗ G``, ``[16, 1, C_out, C]``
    float64 (exact for filters whose values lie within 2²⁵ of each other)."""
    c_out, channels = weight.shape[:2]
    flat = np.asarray(weight, np.float64).reshape(c_out * channels, 9)
    return np.matmul(_FILTER, flat.T).reshape(16, 1, c_out, channels)


def _winograd(x: np.ndarray, filters: np.ndarray, pads: Pads, bias, dtype) -> np.ndarray:
    """A 3x3 stride-1 conv (``x`` ``[N, C, H, W]`` fp32, ``filters`` from :func:`_winograd_filters`)
    plus ``bias``, rounded once to ``dtype``, by Winograd's F(2x2, 3x3): 16 multiplies per 2x2
    outputs and channel where im2col has 36.

    Everything is float64 and goes through BLAS as four matmuls a block of tile rows at a time:
    each 4x4 tile of the padded input (one strided copy) times ``Bᵀ ⊗ Bᵀ``; each of its 16
    values times ``U`` (the filters times ``G ⊗ G``) summed over channels; the 16 sums and the
    bias times ``[Aᵀ ⊗ Aᵀ | 1]``, rounded once as the 2x2 outputs are written. The transforms'
    coefficients are 0, ±1/4, ±1/2 and ±1, so their products are exact and the transformed tiles
    and filters are exact sums wherever a tile's values lie within 2²⁷ of each other; the
    channel sums round as im2col's do. The result is the correctly rounded fp32 of the exact sum
    as often as im2col's (docs/numerics.md); it is not the same function of each output's own
    window (a tile's rounding involves its neighbours' values)."""
    batch, channels, height, width = x.shape
    c_out = filters.shape[2]
    (top, bottom), (left, right) = pads
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = (out_h + 1) // 2, (out_w + 1) // 2
    # the padded input split by the parity of row and column, in float64: planes[p, q, ..., i, j]
    # is padded[..., 2i + p, 2j + q], so a tile's values are four contiguous runs of tiles_w values.
    planes = np.zeros((2, 2, batch, channels, tiles_h + 1, tiles_w + 1))
    for p, q in itertools.product(range(2), range(2)):
        first_row, first_col = (top - p + 1) // 2, (left - q + 1) // 2  # the first i, j inside x
        inside = x[:, :, 2 * first_row + p - top :: 2, 2 * first_col + q - left :: 2]
        inside = inside[:, :, : tiles_h + 1 - first_row, : tiles_w + 1 - first_col]
        planes[p, q, :, :, first_row : first_row + inside.shape[2], first_col : first_col + inside.shape[3]] = inside
    steps = planes.strides
    # tiles[u, p, v, q, N, C, i, j]: value (2u + p, 2v + q) of tile (i, j), one view of the planes
    tiles = as_strided(
        planes,
        (2, 2, 2, 2, batch, channels, tiles_h, tiles_w),
        (steps[4], steps[0], steps[5], steps[1], steps[2], steps[3], steps[4], steps[5]),
        writeable=False,
    )
    shift = None if bias is None else _as_float64(bias).reshape(-1, 1)
    out = np.empty((batch, c_out, 2 * tiles_h, 2 * tiles_w), dtype)
    pairs = out.reshape(batch, c_out, tiles_h, 2, tiles_w, 2)
    # each block's matrices take turns in two buffers, [16, N * max(C, C_out) * tiles] each: the tiles
    # gathered (in the first), transformed (second), their products summed over channels (first, with
    # the bias in a 17th row) and the outputs (second, [4, N*C_out*tiles])
    per_tile = batch * max(channels, c_out)
    rows = max(1, min(tiles_h, WINOGRAD_BLOCK_BYTES // (2 * 16 * 8 * per_tile * tiles_w)))
    first_buffer, second_buffer = np.empty(17 * per_tile * rows * tiles_w), np.empty(16 * per_tile * rows * tiles_w)
    for first in range(0, tiles_h, rows):
        block = slice(first, min(first + rows, tiles_h))
        count = (block.stop - block.start) * tiles_w
        gathered = first_buffer[: 16 * batch * channels * count].reshape(16, -1)
        transformed = second_buffer[: 16 * batch * channels * count].reshape(16, -1)
        products = first_buffer[: 17 * batch * c_out * count].reshape(17, batch, c_out, count)
        outputs = second_buffer[: 4 * batch * c_out * count].reshape(4, -1)
        np.copyto(gathered.reshape(tiles[..., block, :].shape), tiles[..., block, :])
        np.matmul(_TILE_IN, gathered, out=transformed)
        np.matmul(filters, transformed.reshape(16, batch, channels, count), out=products[:16])
        if shift is None:
            np.matmul(_TILE_OUT, products[:16].reshape(16, -1), out=outputs)
        else:  # the bias as a 17th row: BLAS's sum adds it last, as `+ bias` would (its order, observed)
            np.copyto(products[16], shift)
            np.matmul(_TILE_OUT_BIAS, products.reshape(17, -1), out=outputs)
        tile_outputs = outputs.reshape(2, 2, batch, c_out, -1, tiles_w)
        for r, s in itertools.product(range(2), range(2)):  # tiles_w values a call, not two
            np.copyto(pairs[:, :, block, r, :, s], tile_outputs[r, s], casting="same_kind")
    return out if (out_h, out_w) == out.shape[2:] else np.ascontiguousarray(out[:, :, :out_h, :out_w])


def _finished(result: np.ndarray, bias, dtype) -> np.ndarray:
    """``result`` (float64, ``[N, C, *spatial]``, the caller's own array) plus ``bias`` in place,
    then rounded once to ``dtype`` (faster than adding into a ``dtype`` array, and the same bits)."""
    if bias is not None:
        np.add(result, _as_float64(bias).reshape((-1,) + (1,) * (result.ndim - 2)), out=result)
    return result if result.dtype == dtype else result.astype(dtype)


def _zero_padded(x: np.ndarray, pads: Pads) -> np.ndarray:
    """``x`` with zeros around its spatial dims (``x`` itself when there is no padding)."""
    if not any(before or after for before, after in pads):
        return x
    padded = np.zeros(x.shape[:2] + tuple(n + b + a for n, (b, a) in zip(x.shape[2:], pads)), x.dtype)
    padded[(slice(None), slice(None)) + tuple(slice(b, b + n) for n, (b, _) in zip(x.shape[2:], pads))] = x
    return padded


LONG_ROWS = 64
"""Output rows this long or longer make a depthwise conv's taps long enough in ``[N, C, *out]``
(the plain loop); shorter ones run channels-last (:func:`_depthwise`)."""

DEPTHWISE_BLOCK = 1 << 16
"""Output elements per block of :func:`_depthwise` (its float64 sums stay in cache)."""


def _depthwise(x: np.ndarray, weight: np.ndarray, pads: Pads, geometry, bias=None, dtype=np.float64) -> np.ndarray:
    """A depthwise conv (``weight`` ``[C, 1, *K]``) plus ``bias``, rounded once to ``dtype``: per
    channel, the products of each tap added in tap order to a zero start, in float64, as the plain
    loop adds them. It runs channels-last: one float64 copy of ``x``, padded, channels innermost;
    every tap of it is one strided view ``[*K, N, *out, C]``, and ``np.einsum`` multiplies and adds
    them in one pass per tap, a block of output rows at a time, each block then biased, rounded
    and written back channels-first. Returns ``[N, C, *out]``. ``geometry``: dilations, out sizes,
    strides.

    Why einsum sums in tap order: it iterates its operands with numpy's nditer, which keeps the
    channel axis (stride 8 in every operand) innermost and never puts a later kernel axis outside
    an earlier one (their strides decrease in the view and in the filters); its inner loop is then
    ``out[c] = a[c] * b[c] + out[c]`` per element (a product of widened fp32 values is exact in
    float64, so a fused multiply-add rounds the same). :func:`einsum_sums_in_tap_order` checks
    this once per process; where it does not hold, the plain loop runs instead. Only which NaN a
    sum keeps where two meet can differ: a block with a NaN is summed again one multiply and one
    add at a time (:func:`_summed_in_tap_order`)."""
    dilations, out_sizes, strides = geometry
    batch, channels = x.shape[:2]
    kernel_sizes = weight.shape[2:]
    rank = len(kernel_sizes)
    padded = np.empty((batch, *(n + b + a for n, (b, a) in zip(x.shape[2:], pads)), channels))
    inside = tuple(slice(b, b + n) for n, (b, _) in zip(x.shape[2:], pads))
    padded[(slice(None),) + inside + (slice(None),)] = np.moveaxis(x, 1, -1)
    for axis, (n, (before, after)) in enumerate(zip(x.shape[2:], pads), 1):  # zeros only where padding
        lead = (slice(None),) * axis
        padded[lead + (slice(0, before),)] = 0.0
        padded[lead + (slice(before + n, before + n + after),)] = 0.0
    steps = padded.strides
    taps = as_strided(
        padded,
        (*kernel_sizes, batch, *out_sizes, channels),
        (
            *(d * s for d, s in zip(dilations, steps[1:-1])),
            steps[0],
            *(t * s for t, s in zip(strides, steps[1:-1])),
            steps[-1],
        ),
        writeable=False,
    )
    filters = np.ascontiguousarray(weight.reshape(channels, -1).T).reshape(*kernel_sizes, channels)
    spec = _depthwise_subscripts(rank)
    # + 0.0: a -0 bias entry made +0, as the plain loop's zero start plus the bias gives.
    shift = _as_float64(bias).reshape(-1) + 0.0 if bias is not None else None
    result = np.empty((batch, channels, *out_sizes), dtype)
    rows = max(1, DEPTHWISE_BLOCK // max(1, batch * math.prod(out_sizes[1:]) * channels))
    every = (slice(None),) * (rank + 1)
    for top in range(0, out_sizes[0], rows):
        block = slice(top, min(top + rows, out_sizes[0]))
        total = np.einsum(spec, taps[every + (block,)], filters)  # [N, rows, *out[1:], C]
        if np.isnan(total).any():  # which NaN a sum keeps may differ in a fused multiply-add
            total = _summed_in_tap_order(taps[every + (block,)], filters)
        if shift is not None:
            np.add(total, shift, out=total)
        result[:, :, block] = np.moveaxis(total, -1, 1)
    return result


def _summed_in_tap_order(taps: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """What :func:`_depthwise`'s einsum computes (``taps`` ``[*K, ...]``, ``filters`` ``[*K, C]``),
    from a zero start, one multiply and one add per tap: where a NaN meets another NaN, the NaN kept is the one the
    plain loop keeps (einsum's fused multiply-add can keep the other: a sign or payload differs)."""
    rank = filters.ndim - 1
    total = np.zeros(taps.shape[rank:])
    for offset in itertools.product(*(range(k) for k in filters.shape[:rank])):
        np.add(total, np.multiply(taps[offset], filters[offset]), out=total)
    return total


def _depthwise_subscripts(rank: int) -> str:
    """``np.einsum`` subscripts of :func:`_depthwise`: taps ``[*K, N, *out, C]`` times filters
    ``[*K, C]``, summed over the kernel axes."""
    kernel_axes, out_axes = "abc"[:rank], "xyz"[:rank]
    return f"{kernel_axes}n{out_axes}q,{kernel_axes}q->n{out_axes}q"


@functools.lru_cache(maxsize=None)
def einsum_sums_in_tap_order() -> bool:
    """Whether this numpy's ``einsum`` adds :func:`_depthwise`'s taps one after the other in tap
    order from a zero start: on products where any other order gives other bits (1e16, 1, -1e16
    along each kernel axis, and a random case), against the plain loop."""
    rng = np.random.default_rng(0)
    cases = []
    for kernel_shape in ((1, 3), (3, 1), (2, 3)):
        x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
        weight = np.ones((3, 1, *kernel_shape))
        weight[:, 0, 0, 0], x[:, :, 0, 0] = 1e16, 1.0  # the first tap of the first output: 1e16
        weight[:, 0, -1, -1], x[:, :, kernel_shape[0] - 1, kernel_shape[1] - 1] = -1e16, 1.0  # its last: -1e16
        cases.append(
            (x, weight, [(0, 0), (0, 0)], ([1, 1], [4 - kernel_shape[0] + 1, 5 - kernel_shape[1] + 1], [1, 1]))
        )
    x = rng.standard_normal((2, 5, 9, 8)).astype(np.float32)
    weight = rng.standard_normal((5, 1, 3, 3)).astype(np.float32).astype(np.float64)
    cases.append((x, weight, [(1, 1), (0, 2)], ([1, 2], [5, 3], [2, 2])))
    for x, weight, pads, geometry in cases:
        got = _depthwise(x, weight, pads, geometry)
        if got.tobytes() != _plain_depthwise(x, weight, pads, geometry).tobytes():
            return False
    return True


def _plain_depthwise(x: np.ndarray, weight: np.ndarray, pads: Pads, geometry) -> np.ndarray:
    """A depthwise conv channels-first, tap by tap in place from a zero start, in float64 (no bias)."""
    dilations, out_sizes, strides = geometry
    rank = len(out_sizes)
    padded = _zero_padded(np.asarray(x, np.float64), pads)
    taps_weight = weight.reshape(weight.shape[0], -1)
    result = np.zeros((x.shape[0], x.shape[1], *out_sizes))
    for index, offset in enumerate(itertools.product(*(range(k) for k in weight.shape[2:]))):
        window = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offset, dilations, out_sizes, strides)
        )
        result += taps_weight[:, index].reshape((-1,) + (1,) * rank) * padded[(Ellipsis,) + window]
    return result


def _add_bias(result: np.ndarray, bias) -> np.ndarray:
    if bias is None:
        return result
    result += _as_float64(bias).reshape((-1,) + (1,) * (result.ndim - 2))
    return result


# -- conv_transpose ------------------------------------------------------------------------------


@kernel("conv_transpose")
def conv_transpose(op, args) -> np.ndarray:
    """``conv_transpose``: the adjoint of ``conv``; weight is ``[C_in, C_out/groups, *K]``."""
    x, weight = _as_float64(args["x"]), _as_float64(args["weight"])
    rank = x.ndim - 2
    batch, c_in = x.shape[:2]
    in_sizes = list(x.shape[2:])
    c_group_out = weight.shape[1]
    kernel_sizes = list(weight.shape[2:])
    strides = _int_list(args.get("strides"), rank, 1)
    dilations = _int_list(args.get("dilations"), rank, 1)
    groups = int(args["groups"]) if args.get("groups") is not None else 1
    if weight.shape[0] != c_in or c_in % groups:
        raise UnsupportedOpError(
            op.op_type,
            op.name,
            f"x has {c_in} channels, weight {list(weight.shape)}, groups {groups}",
        )
    c_group_in, c_out = c_in // groups, c_group_out * groups
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_sizes, dilations)]
    full_sizes = [(n - 1) * s + k for n, s, k in zip(in_sizes, strides, dilated)]
    out_sizes, before = _transpose_geometry(op, args, in_sizes, full_sizes, dilated, strides)

    # contributions: [N, groups, C_out/groups, *in, *K] from one matmul over input channels.
    in_count, kernel_count = math.prod(in_sizes), math.prod(kernel_sizes)
    rows = x.reshape(batch, groups, c_group_in, in_count).transpose(1, 0, 3, 2)
    taps = weight.reshape(groups, c_group_in, c_group_out * kernel_count)
    contributions = np.matmul(rows, taps[:, None])  # [groups, N, in, C_out/groups * K]
    contributions = contributions.reshape(groups, batch, *in_sizes, c_group_out, *kernel_sizes)
    contributions = contributions.transpose(  # [N, groups, C_out/groups, *in, *K]
        1, 0, 2 + rank, *range(2, 2 + rank), *range(3 + rank, 3 + 2 * rank)
    )

    full = np.zeros((batch, groups, c_group_out, *full_sizes))
    for offset in itertools.product(*(range(k) for k in kernel_sizes)):
        target = tuple(
            slice(k * d, k * d + (n - 1) * s + 1, s) for k, d, n, s in zip(offset, dilations, in_sizes, strides)
        )
        full[(Ellipsis,) + target] += contributions[(Ellipsis,) + offset]

    result = np.zeros((batch, groups, c_group_out, *out_sizes))
    read: list[slice] = []
    written: list[slice] = []
    for b, n, o in zip(before, full_sizes, out_sizes):
        stop = min(n, b + o)
        read.append(slice(b, max(b, stop)))
        written.append(slice(0, max(0, stop - b)))
    result[(Ellipsis,) + tuple(written)] = full[(Ellipsis,) + tuple(read)]
    return _add_bias(result.reshape(batch, c_out, *out_sizes), args.get("bias"))


def _transpose_geometry(op, args, in_sizes, full_sizes, dilated, strides) -> tuple[list[int], list[int]]:
    """Output spatial sizes and the crop before each dim of the uncropped result."""
    rank = len(in_sizes)
    pad_type = _pad_type(op, args)
    output_shape = args.get("output_shape")
    if output_shape is not None:
        out_sizes = _int_list(output_shape, rank + 2, 0)[2:]
    elif pad_type in ("same", "same_lower"):
        out_sizes = [n * s for n, s in zip(in_sizes, strides)]
    else:
        pads = spatial_pads(op, pad_type, args.get("pad"), in_sizes, dilated, strides)
        out_sizes = [n - b - a for n, (b, a) in zip(full_sizes, pads)]
    if len(out_sizes) != rank or min(out_sizes) <= 0:
        raise UnsupportedOpError(op.op_type, op.name, f"output spatial size {out_sizes} is empty")
    pads = spatial_pads(op, pad_type, args.get("pad"), out_sizes, dilated, strides)
    return out_sizes, [b for b, _ in pads]


# -- pooling -------------------------------------------------------------------------------------


def _pool_out_size(size: int, total_pad: int, k: int, s: int, ceil_mode: bool) -> int:
    """coremltools' ``spatial_dimensions_out_shape`` for one dim."""
    if not ceil_mode:
        return (size + total_pad - k) // s + 1
    out = (size + total_pad - k + s - 1) // s + 1
    if total_pad > 0 and 2 * (out - 1) * s >= 2 * size + total_pad:
        out -= 1
    return out


def _pool_taps(op, args, fill: float, dtype) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per window offset, the element of ``x`` (padded with ``fill``, in ``dtype``) each output
    position sees there (``[N, C, *out]`` views), plus per-dim window counts.

    The counts are, per spatial dim and output position, how many window elements lie in ``x``
    and how many lie in ``x`` plus its padding (what an average divides by).
    """
    x = np.asarray(args["x"])
    rank = x.ndim - 2
    kernel_sizes = _int_list(args["kernel_sizes"], rank, 1)
    strides = _int_list(args.get("strides"), rank, 1)
    ceil_mode = bool(args.get("ceil_mode") or False)
    sizes = list(x.shape[2:])
    pads = spatial_pads(op, _pad_type(op, args), args.get("pad"), sizes, kernel_sizes, strides)
    out_sizes = [
        _pool_out_size(n, b + a, k, s, ceil_mode) for n, (b, a), k, s in zip(sizes, pads, kernel_sizes, strides)
    ]
    if min(out_sizes) <= 0:
        raise UnsupportedOpError(op.op_type, op.name, f"output spatial size {out_sizes} is empty")
    # Pad before as declared; after, as far as the last window reaches (ceil_mode may reach past).
    reach = [(o - 1) * s + k for o, s, k in zip(out_sizes, strides, kernel_sizes)]
    widths = [(b, max(0, r - b - n)) for (b, _), r, n in zip(pads, reach, sizes)]
    padded = np.full(x.shape[:2] + tuple(n + b + a for n, (b, a) in zip(sizes, widths)), fill, dtype)
    padded[(slice(None), slice(None)) + tuple(slice(b, b + n) for n, (b, _) in zip(sizes, widths))] = x
    taps = [
        padded[(Ellipsis,) + tuple(slice(o, o + (n - 1) * s + 1, s) for o, n, s in zip(offset, out_sizes, strides))]
        for offset in itertools.product(*(range(k) for k in kernel_sizes))
    ]
    in_x, in_padded = [], []
    for n, (b, a), k, s, o in zip(sizes, pads, kernel_sizes, strides, out_sizes):
        start = np.arange(o) * s - b
        stop = start + k
        in_x.append(np.maximum(0, np.minimum(stop, n) - np.maximum(start, 0)))
        in_padded.append(np.minimum(stop, n + a) - start)
    for axis, counts in enumerate(in_x):
        if not counts.all():
            empty = int(np.flatnonzero(counts == 0)[0])
            raise UnsupportedOpError(
                op.op_type,
                op.name,
                f"window {empty} of spatial dim {axis} covers no element of x "
                "(padding or ceil_mode reach past it); Core ML's value there is unspecified",
            )
    return taps, in_x, in_padded


def _outer(counts: list[np.ndarray]) -> np.ndarray:
    product = np.ones(())
    for c in counts:
        product = np.multiply.outer(product, c.astype(np.float64))
    return product


@kernel("max_pool")
def max_pool(op, args) -> np.ndarray:
    """``max_pool``: the maximum of each window; padding never wins (it is -inf). Computed in
    ``x``'s float dtype: a maximum is one of its elements, exact in any dtype."""
    x = np.asarray(args["x"])
    taps, _, _ = _pool_taps(op, args, -np.inf, x.dtype if x.dtype.kind == "f" else np.float64)
    result = taps[0].copy()
    for tap in taps[1:]:
        np.maximum(result, tap, out=result)
    return result


@kernel("avg_pool")
def avg_pool(op, args) -> np.ndarray:
    """``avg_pool``: zero padding; divides by the window's size within ``x`` and its padding
    (within ``x`` alone when ``exclude_padding_from_average``)."""
    taps, in_x, in_padded = _pool_taps(op, args, 0.0, np.float64)
    exclude = bool(args.get("exclude_padding_from_average") or False)
    counts = in_x if exclude else in_padded
    return _tap_sum(taps) / _outer(counts)


@kernel("l2_pool")
def l2_pool(op, args) -> np.ndarray:
    """``l2_pool``: ``sqrt(sum(x ** 2))`` over each window, zero padding."""
    taps, _, _ = _pool_taps(op, args, 0.0, np.float64)
    total = np.square(taps[0])
    for tap in taps[1:]:
        total += np.square(tap)
    return np.sqrt(total)


def _tap_sum(taps: list[np.ndarray]) -> np.ndarray:
    """The sum of the taps, one after the other, in float64."""
    total = taps[0].copy()
    for tap in taps[1:]:
        total += tap
    return total

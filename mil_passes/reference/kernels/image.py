"""Image kernels: depth/space shuffles, resizing, crops and resampling.

Channel layouts (NCHW), as Core ML computes them:

- ``depth_to_space`` / ``space_to_depth`` are TF's (DCR): channel ``(i * block + j) * C + c``
  holds pixel ``(i, j)`` of each block (coremltools converts TF's ops to these).
- ``pixel_shuffle`` / ``pixel_unshuffle`` are PyTorch's (CRD): channel ``c * f * f + i * f + j``.

Sampling grids (1-D; ``n``: input size, ``m``: output size, clamped to ``[0, n - 1]``):

- ``STRICT_ALIGN_CORNERS``: ``i * (n - 1) / (m - 1)`` (``0`` when ``m == 1``);
  ``ALIGN_CORNERS``: the same but ``(n - 1) / 2`` when ``m == 1``;
  ``DEFAULT``: ``i * n / m``; ``OFFSET_CORNERS``: ``(i + 0.5) * max(1, n - 1) / m``;
  ``UNALIGN_CORNERS``: ``(i + 0.5) * n / m - 0.5``.
- ``upsample_bilinear``: ``align_corners`` is ``STRICT_ALIGN_CORNERS``; otherwise
  ``half_pixel_centers`` (iOS16; default ``not align_corners``) picks ``UNALIGN_CORNERS``,
  and without it ``DEFAULT``. The scale is recomputed as ``n / m`` (PyTorch's
  ``recompute_scale_factor=True``).
- Nearest neighbour: ``upsample_nearest_neighbor`` takes ``floor(i * n / m)``;
  ``resize_nearest_neighbor`` and ``resize(NEAREST_NEIGHBOR, DEFAULT)`` take
  ``floor((i + 0.5) * n / m)`` (TF's ``half_pixel_centers``, the mapping coremltools uses).

Interpolation is computed in float64 and rounded once to the output dtype.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from ..errors import UnsupportedOpError
from . import kernel

SAMPLING_MODES = ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS")


def _int(value) -> int:
    return int(np.asarray(value))


def _flag(args: dict, name: str, default: bool) -> bool:
    value = args.get(name)
    return default if value is None else bool(np.asarray(value))


# -- depth / space shuffles -------------------------------------------------------------------


def _channels_to_space(x: np.ndarray, block: int, layout: Literal["DCR", "CRD"]) -> np.ndarray:
    """Move each group of ``block * block`` channels of NCHW ``x`` into a ``block x block`` patch."""
    n, c, h, w = x.shape
    depth = c // (block * block)
    if layout == "DCR":
        blocks = x.reshape(n, block, block, depth, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, depth, block, block, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(n, depth, h * block, w * block)


def _space_to_channels(x: np.ndarray, block: int, layout: Literal["DCR", "CRD"]) -> np.ndarray:
    """Gather each ``block x block`` patch of NCHW ``x`` into channels: undoes ``_channels_to_space``."""
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // block, block, w // block, block)
    order = (0, 3, 5, 1, 2, 4) if layout == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.transpose(order).reshape(n, c * block * block, h // block, w // block)


#: Each op's rearrangement, the input that holds its block size, and its channel order.
_REARRANGEMENTS = {
    "depth_to_space": (_channels_to_space, "block_size", "DCR"),
    "space_to_depth": (_space_to_channels, "block_size", "DCR"),
    "pixel_shuffle": (_channels_to_space, "upscale_factor", "CRD"),
    "pixel_unshuffle": (_space_to_channels, "downscale_factor", "CRD"),
}


@kernel(*_REARRANGEMENTS)
def rearrange(op, args):
    move, block_size, layout = _REARRANGEMENTS[op.op_type]
    return move(np.asarray(args["x"]), _int(args[block_size]), layout)


# -- sampling grids and 1-D interpolation -----------------------------------------------------


def linear_grid(in_size: float, out_size: int, sampling_mode: str) -> np.ndarray:
    """Input positions sampled by each of ``out_size`` outputs, clamped to ``[0, in_size - 1]``."""
    i = np.arange(out_size, dtype=np.float64)
    if sampling_mode == "ALIGN_CORNERS" and out_size == 1:
        positions = np.full(1, (in_size - 1) / 2)
    elif sampling_mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
        positions = i * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros(out_size)
    elif sampling_mode == "DEFAULT":
        positions = i * in_size / out_size
    elif sampling_mode == "OFFSET_CORNERS":
        positions = (i + 0.5) * max(1, in_size - 1) / out_size
    elif sampling_mode == "UNALIGN_CORNERS":
        positions = (i + 0.5) * in_size / out_size - 0.5
    else:
        raise ValueError(f"unknown sampling_mode '{sampling_mode}' (MIL modes: {', '.join(SAMPLING_MODES)})")
    return np.clip(positions, 0, in_size - 1)


def _lerp_axis(x: np.ndarray, axis: int, positions: np.ndarray) -> np.ndarray:
    size = x.shape[axis]
    low = np.floor(positions).astype(np.int64)
    high = np.minimum(low + 1, size - 1)
    frac = (positions - low).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    return np.take(x, low, axis=axis) * (1 - frac) + np.take(x, high, axis=axis) * frac


def _resize_linear(x: np.ndarray, sizes: dict[int, int], sampling_mode: str) -> np.ndarray:
    out = x.astype(np.float64)
    for axis, size in sizes.items():
        out = _lerp_axis(out, axis, linear_grid(out.shape[axis], size, sampling_mode))
    return out


def nearest_floor(in_size: int, out_size: int) -> np.ndarray:
    """``floor(i * in / out)``, exact in integers."""
    return np.minimum(np.arange(out_size) * in_size // out_size, in_size - 1)


def nearest_half_pixel(in_size: int, out_size: int) -> np.ndarray:
    """``floor((i + 0.5) * in / out)``, exact in integers."""
    return np.minimum((2 * np.arange(out_size) + 1) * in_size // (2 * out_size), in_size - 1)


def _resize_nearest(x: np.ndarray, sizes: dict[int, int], pick) -> np.ndarray:
    for axis, size in sizes.items():
        x = np.take(x, pick(x.shape[axis], size), axis=axis)
    return x


def _scaled_sizes(x: np.ndarray, args: dict) -> dict[int, int]:
    """Output H and W of the upsample ops: ``floor(scale * size)``, as their type inference."""
    height = np.floor(np.asarray(args["scale_factor_height"]) * x.shape[-2])
    width = np.floor(np.asarray(args["scale_factor_width"]) * x.shape[-1])
    return {x.ndim - 2: int(height), x.ndim - 1: int(width)}


def _target_sizes(x: np.ndarray, height, width) -> dict[int, int]:
    return {x.ndim - 2: _int(height), x.ndim - 1: _int(width)}


# -- upsample / resize ------------------------------------------------------------------------


@kernel("upsample_nearest_neighbor")
def upsample_nearest_neighbor(op, args):
    x = np.asarray(args["x"])
    return _resize_nearest(x, _scaled_sizes(x, args), nearest_floor)


@kernel("resize_nearest_neighbor")
def resize_nearest_neighbor(op, args):
    x = np.asarray(args["x"])
    sizes = _target_sizes(x, args["target_size_height"], args["target_size_width"])
    return _resize_nearest(x, sizes, nearest_half_pixel)


@kernel("upsample_bilinear")
def upsample_bilinear(op, args):
    x = np.asarray(args["x"])
    align_corners = _flag(args, "align_corners", True)
    half_pixel_centers = _flag(args, "half_pixel_centers", not align_corners)
    if align_corners and half_pixel_centers:
        raise ValueError(
            f"op '{op.name}' (upsample_bilinear): align_corners and half_pixel_centers cannot both be True"
        )
    if align_corners:
        mode = "STRICT_ALIGN_CORNERS"
    else:
        mode = "UNALIGN_CORNERS" if half_pixel_centers else "DEFAULT"
    return _resize_linear(x, _scaled_sizes(x, args), mode)


@kernel("resize_bilinear")
def resize_bilinear(op, args):
    x = np.asarray(args["x"])
    sizes = _target_sizes(x, args["target_size_height"], args["target_size_width"])
    return _resize_linear(x, sizes, str(args["sampling_mode"]))


@kernel("resize")
def resize(op, args):
    """iOS17 ``resize``: the last ``resized_dims`` axes take the last entries of ``shape``."""
    x = np.asarray(args["x"])
    shape = np.asarray(args["shape"]).reshape(-1).astype(np.int64)
    resized = _int(args["resized_dims"])
    sizes = {}
    for i in range(resized):
        axis = x.ndim - resized + i
        target = int(shape[shape.size - resized + i])
        sizes[axis] = x.shape[axis] if target == 0 else target
    mode = str(args["sampling_mode"])
    if str(args["interpolation_mode"]) == "NEAREST_NEIGHBOR":
        if mode != "DEFAULT":
            detail = f"nearest-neighbour sampling for sampling_mode '{mode}' is not documented"
            raise UnsupportedOpError(op.op_type, op.name, detail)
        return _resize_nearest(x, sizes, nearest_half_pixel)
    if np.issubdtype(x.dtype, np.integer):
        detail = "LINEAR on integers has no documented rounding"
        raise UnsupportedOpError(op.op_type, op.name, detail)
    return _resize_linear(x, sizes, mode)


# -- crop_resize ------------------------------------------------------------------------------


def _box_corners(boxes: np.ndarray, mode: str) -> tuple[np.ndarray, ...]:
    """``(h_start, w_start, h_end, w_end)`` from boxes ``[N, 4]`` in ``box_coordinate_mode``."""
    a, b, c, d = (boxes[:, k].astype(np.float64) for k in range(4))
    if mode == "CORNERS_HEIGHT_FIRST":
        return a, b, c, d
    if mode == "CORNERS_WIDTH_FIRST":
        return b, a, d, c
    if mode == "CENTER_SIZE_HEIGHT_FIRST":
        return a - c / 2, b - d / 2, a + c / 2, b + d / 2
    if mode == "CENTER_SIZE_WIDTH_FIRST":
        return b - d / 2, a - c / 2, b + d / 2, a + c / 2
    raise ValueError(f"unknown box_coordinate_mode '{mode}'")


def _box_grid(start: float, end: float, out_size: int, mode: str) -> np.ndarray:
    """Positions sampled in a box whose first and last pixel centres are ``start`` and ``end``.

    The align-corners modes step from ``start`` to ``end`` (a box may be inverted). The others are
    ``resize_bilinear``'s grid over the box's ``end - start + 1`` pixels, shifted to ``start`` and
    kept inside the box: a box over the whole image samples what ``resize_bilinear`` samples.
    """
    if mode in ("ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"):
        if out_size == 1:
            return np.array([(start + end) / 2 if mode == "ALIGN_CORNERS" else start])
        return start + np.arange(out_size) * (end - start) / (out_size - 1)
    return start + linear_grid(end - start + 1, out_size, mode)


def _crop_bilinear(image: np.ndarray, rows: np.ndarray, cols: np.ndarray, pad: float) -> np.ndarray:
    """Sample ``image [C, H, W]`` at ``rows x cols``; positions outside the image get ``pad``."""
    _, height, width = image.shape
    out = np.full((image.shape[0], rows.size, cols.size), pad, dtype=np.float64)
    row_ok = (rows >= 0) & (rows <= height - 1)
    col_ok = (cols >= 0) & (cols <= width - 1)
    if row_ok.any() and col_ok.any():
        inside = _lerp_axis(image.astype(np.float64), 1, rows[row_ok])
        inside = _lerp_axis(inside, 2, cols[col_ok])
        out[:, np.flatnonzero(row_ok)[:, None], np.flatnonzero(col_ok)[None, :]] = inside
    return out


def _require_boxes_inside_the_image(op, rows: tuple, cols: tuple, shape: tuple) -> None:
    """Before iOS16, ``crop_resize`` has no ``pad_value``: its spec requires box corners inside the
    image (normalized: in ``[0, 1]``), and Core ML's result for a box outside is not specified.
    coremltools' own TF test avoids such boxes (``crop_bias = 0.0``, rdar://98749492: "crop_resize is
    unstable for cropping out of bound"). Refuse rather than guess."""
    height, width = shape[2], shape[3]
    for axis, corners, size in (("height", rows, height), ("width", cols, width)):
        values = np.concatenate([np.asarray(c, np.float64).reshape(-1) for c in corners])
        slack = 1e-6 * max(size, 1)
        if values.size and (values.min() < -slack or values.max() > size - 1 + slack):
            detail = (
                f"a box reaches {axis} {values.min():g}..{values.max():g}, outside the image's [0, {size - 1}]; "
                "before iOS16 (no pad_value) Core ML's result for such a box is not specified"
            )
            raise UnsupportedOpError(op.op_type, op.name, detail)


@kernel("crop_resize")
def crop_resize(op, args):
    """TF's ``crop_and_resize`` for ``ALIGN_CORNERS`` (and ``STRICT_ALIGN_CORNERS``); the other
    sampling modes sample a box as ``resize_bilinear`` samples an image (see ``_box_grid``).

    Boxes are scaled by ``spatial_scale`` and, when normalized, by ``(H - 1, W - 1)``; samples
    outside ``[0, H - 1] x [0, W - 1]`` take ``pad_value`` (iOS16+). Before iOS16 a box outside
    the image is refused (see ``_require_boxes_inside_the_image``).
    """
    x = np.asarray(args["x"])
    mode = str(args["sampling_mode"])
    if mode not in SAMPLING_MODES:
        raise ValueError(f"crop_resize '{op.name}': input 'sampling_mode' is '{mode}', not one of {SAMPLING_MODES}")
    batch, _, height, width = x.shape
    if "boxes" in op.inputs:  # iOS17: boxes [N, 4], box_indices [N] -> [N, C, h, w]
        boxes = np.asarray(args["boxes"])
        indices = np.asarray(args["box_indices"]).astype(np.int64).reshape(-1)
        pairs = [(n, int(indices[n])) for n in range(boxes.shape[0])]
    else:  # iOS15/16: roi [N, 1, 4 or 5, 1, 1] -> [N, B, C, h, w]
        roi = np.asarray(args["roi"]).reshape(np.asarray(args["roi"]).shape[0], -1)
        if roi.shape[1] == 5:
            if batch != 1:
                detail = "roi with batch indices and B > 1 has no consistent output shape"
                raise UnsupportedOpError(op.op_type, op.name, detail)
            indices, boxes = roi[:, 0].astype(np.int64), roi[:, 1:]
            pairs = [(n, int(indices[n])) for n in range(roi.shape[0])]
        else:
            boxes = roi
            pairs = [(n, b) for n in range(roi.shape[0]) for b in range(batch)]
    for _, image in pairs:
        if not 0 <= image < batch:
            raise ValueError(f"op '{op.name}' (crop_resize): box index {image} is out of range [0, {batch})")
    h0, w0, h1, w1 = _box_corners(boxes, str(args["box_coordinate_mode"]))
    scale = float(np.asarray(args["spatial_scale"]))
    normalized = _flag(args, "normalized_coordinates", False)
    h_scale = scale * ((height - 1) if normalized else 1)
    w_scale = scale * ((width - 1) if normalized else 1)
    if "pad_value" not in op.input_spec.input_types:
        _require_boxes_inside_the_image(op, (h0 * h_scale, h1 * h_scale), (w0 * w_scale, w1 * w_scale), x.shape)
    out_h, out_w = _int(args["target_height"]), _int(args["target_width"])
    pad = float(np.asarray(args["pad_value"])) if args.get("pad_value") is not None else 0.0
    crops = []
    for n, image in pairs:
        rows = _box_grid(h0[n] * h_scale, h1[n] * h_scale, out_h, mode)
        cols = _box_grid(w0[n] * w_scale, w1[n] * w_scale, out_w, mode)
        crops.append(_crop_bilinear(x[image], rows, cols, pad))
    result = np.stack(crops) if crops else np.zeros((0, x.shape[1], out_h, out_w))
    if "boxes" in op.inputs:
        return result
    return result.reshape((len(boxes), -1) + result.shape[1:])


# -- resample / affine ------------------------------------------------------------------------


def _padded_index(index: np.ndarray, size: int, padding_mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Map integer positions into ``[0, size)`` by ``padding_mode``; also return validity."""
    valid = (index >= 0) & (index < size)
    if padding_mode == "constant":
        return np.clip(index, 0, size - 1), valid
    if padding_mode == "border":
        mapped = np.clip(index, 0, size - 1)
    elif padding_mode == "reflection":  # |1 2 3| -> 2 3 2 1 2 3 2 1 2
        period = max(2 * (size - 1), 1)
        folded = np.mod(index, period)
        mapped = np.where(folded < size, folded, period - folded)
    elif padding_mode == "symmetric":  # |1 2 3| -> 3 2 1 1 2 3 3 2 1
        folded = np.mod(index, 2 * size)
        mapped = np.where(folded < size, folded, 2 * size - 1 - folded)
    else:
        raise ValueError(f"unknown padding_mode '{padding_mode}'")
    return mapped, np.ones_like(valid)


def _pixel_coordinates(coords: np.ndarray, size: int, mode: str, align_corners: bool) -> np.ndarray:
    if mode == "unnormalized":
        return coords
    if mode == "normalized_minus_one_to_one":
        coords = (coords + 1) / 2
    elif mode != "normalized_zero_to_one":
        raise ValueError(f"unknown coordinates_mode '{mode}'")
    return coords * (size - 1) if align_corners else coords * size - 0.5


def sample_image(
    image: np.ndarray,
    xs: np.ndarray,
    ys: np.ndarray,
    sampling_mode: str,
    padding_mode: str,
    padding_value: float,
) -> np.ndarray:
    """Sample ``image [C, H, W]`` at pixel coordinates ``(xs, ys)`` (each ``[h, w]``)."""
    _, height, width = image.shape

    def fetch(rows, cols):
        r, r_ok = _padded_index(rows, height, padding_mode)
        c, c_ok = _padded_index(cols, width, padding_mode)
        return np.where(r_ok & c_ok, image[:, r, c], padding_value)

    if sampling_mode == "nearest":  # rounds half up
        return fetch(np.floor(ys + 0.5).astype(np.int64), np.floor(xs + 0.5).astype(np.int64))
    if sampling_mode != "bilinear":
        raise ValueError(f"unknown sampling_mode '{sampling_mode}'")
    top, left = np.floor(ys), np.floor(xs)
    dy, dx = ys - top, xs - left
    top, left = top.astype(np.int64), left.astype(np.int64)
    return (
        fetch(top, left) * (1 - dy) * (1 - dx)
        + fetch(top, left + 1) * (1 - dy) * dx
        + fetch(top + 1, left) * dy * (1 - dx)
        + fetch(top + 1, left + 1) * dy * dx
    )


@kernel("resample")
def resample(op, args):
    """Sample ``x [B, C, H, W]`` at ``coordinates [B, h, w, (x, y)]`` (x along W).

    Padding maps each neighbour's integer position: ``constant`` gives ``padding_value``,
    ``border`` clamps, ``reflection`` mirrors without repeating the edge, ``symmetric`` with it.
    """
    x = np.asarray(args["x"]).astype(np.float64)
    coords = np.asarray(args["coordinates"]).astype(np.float64)
    mode = str(args["coordinates_mode"])
    align = bool(np.asarray(args["align_corners"]))
    sampling, padding = str(args["sampling_mode"]), str(args["padding_mode"])
    value = float(np.asarray(args["padding_value"]))
    outs = []
    for b in range(x.shape[0]):
        xs = _pixel_coordinates(coords[b, ..., 0], x.shape[3], mode, align)
        ys = _pixel_coordinates(coords[b, ..., 1], x.shape[2], mode, align)
        outs.append(sample_image(x[b], xs, ys, sampling, padding, value))
    return np.stack(outs)


@kernel("affine")
def affine(op, args):
    """Output pixel ``(x, y)`` in ``[-1, 1]`` (corners at pixel centres) samples the input at
    ``(a0 x + a1 y + a2, b0 x + b1 y + b2)``: bilinear, zero padding (PyTorch's ``affine_grid``
    + ``grid_sample`` with ``align_corners=True``)."""
    if not bool(np.asarray(args["align_corners"])):
        detail = "align_corners=False is not supported by MIL"
        raise UnsupportedOpError(op.op_type, op.name, detail)
    x = np.asarray(args["x"]).astype(np.float64)
    matrices = np.asarray(args["transform_matrix"]).astype(np.float64).reshape(-1, 6)
    out_h, out_w = _int(args["output_height"]), _int(args["output_width"])
    rows, cols = np.linspace(-1, 1, out_h), np.linspace(-1, 1, out_w)
    grid_y, grid_x = np.meshgrid(rows, cols, indexing="ij")
    value = float(np.asarray(args["padding_value"]))
    outs = []
    for b in range(x.shape[0]):
        a0, a1, a2, b0, b1, b2 = matrices[b if matrices.shape[0] > 1 else 0]
        source_x = a0 * grid_x + a1 * grid_y + a2
        source_y = b0 * grid_x + b1 * grid_y + b2
        xs = _pixel_coordinates(source_x, x.shape[3], "normalized_minus_one_to_one", True)
        ys = _pixel_coordinates(source_y, x.shape[2], "normalized_minus_one_to_one", True)
        outs.append(sample_image(x[b], xs, ys, "bilinear", "constant", value))
    return np.stack(outs)

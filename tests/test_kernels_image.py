"""Image kernels against PyTorch, independent numpy references and coremltools' recorded outputs.

The recorded outputs come from coremltools' own op tests (``mil/ops/tests``), which were run
on Core ML: they pin the conventions PyTorch has no counterpart for. Data movement compares
exactly; interpolation in fp32 with rtol 1e-5 (atol 1e-6 for results near zero).
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb

from kernel_helpers import assert_same, run
from mil_passes.reference import UnsupportedOpError

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")
F = torch.nn.functional

IOS15, IOS16, IOS17 = ct.target.iOS15, ct.target.iOS16, ct.target.iOS17
SAMPLING_MODES = ["STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"]
BOX_MODES = ["CORNERS_HEIGHT_FIRST", "CORNERS_WIDTH_FIRST", "CENTER_SIZE_HEIGHT_FIRST", "CENTER_SIZE_WIDTH_FIRST"]
RTOL, ATOL = 1e-5, 1e-6


def assert_close(got, want):
    assert got.dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def t(array):
    return torch.from_numpy(np.ascontiguousarray(array))


def normal(seed, shape, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def scale_pair(scale_h, scale_w):
    """MIL wants both scale factors of one dtype: ints, or else fp32."""
    if isinstance(scale_h, float) or isinstance(scale_w, float):
        return float(scale_h), float(scale_w)
    return scale_h, scale_w


def scaled_size(scale, size):
    """``floor(scale * size)`` in fp32, as the upsample ops' type inference computes it."""
    return int(np.floor(np.float32(scale) * size))


seeds = st.integers(0, 2**32 - 1)
images = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 6), st.integers(1, 6))
small_images = st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))


# -- depth / space shuffles -------------------------------------------------------------------


@given(seeds, st.integers(1, 3), small_images, st.sampled_from([np.float32, np.float16]))
def test_pixel_shuffle_and_unshuffle_match_torch(seed, factor, dims, dtype):
    n, c, h, w = dims
    x = normal(seed, (n, c * factor * factor, h, w), dtype)
    (shuffled,) = run(lambda x: mb.pixel_shuffle(x=x, upscale_factor=factor), {"x": x})
    assert_same(shuffled, F.pixel_shuffle(t(x), factor).numpy())
    unshuffle = lambda y: mb.pixel_unshuffle(x=y, downscale_factor=np.uint32(factor))
    (back,) = run(unshuffle, {"y": shuffled}, opset=IOS16)
    assert_same(back, F.pixel_unshuffle(t(shuffled), factor).numpy())
    assert_same(back, x)


def loop_depth_to_space(x, block):
    """TF's DCR order, one output channel and block offset at a time."""
    n, c, h, w = x.shape
    depth = c // (block * block)
    out = np.zeros((n, depth, h * block, w * block), x.dtype)
    for ch in range(depth):
        for i in range(block):
            for j in range(block):
                out[:, ch, i::block, j::block] = x[:, (i * block + j) * depth + ch]
    return out


@given(seeds, st.integers(2, 3), small_images)
def test_depth_to_space_and_space_to_depth_follow_tf_channel_order(seed, block, dims):
    n, c, h, w = dims
    x = normal(seed, (n, c * block * block, h, w))
    (spread,) = run(lambda x: mb.depth_to_space(x=x, block_size=block), {"x": x})
    assert_same(spread, loop_depth_to_space(x, block))
    (back,) = run(lambda y: mb.space_to_depth(x=y, block_size=block), {"y": spread})
    assert_same(back, x)


def test_depth_to_space_and_space_to_depth_match_coremltools_recorded_outputs():
    x = np.array([[[[9.0]], [[5.0]], [[1.0]], [[3.0]]]], np.float32)
    (got,) = run(lambda x: mb.depth_to_space(x=x, block_size=2), {"x": x})
    assert_same(got, np.array([[[[9.0, 5.0], [1.0, 3.0]]]], np.float32))
    y = np.array([[[[7.0, 9.0], [4.0, 6.0]]]], np.float32)
    (got,) = run(lambda y: mb.space_to_depth(x=y, block_size=2), {"y": y})
    assert_same(got, np.array([[[[7.0]], [[9.0]], [[4.0]], [[6.0]]]], np.float32))


# -- nearest neighbour ------------------------------------------------------------------------


def upsample_nearest(scale_h, scale_w):
    return lambda x: mb.upsample_nearest_neighbor(x=x, scale_factor_height=scale_h, scale_factor_width=scale_w)


def resize_nearest(x, s):
    return mb.resize(x=x, shape=s, resized_dims=np.uint32(2), interpolation_mode="NEAREST_NEIGHBOR")


@given(seeds, images, st.sampled_from([1, 2, 3, 1.5, 0.5, 2.7, 0.67, 1.12]), st.sampled_from([1, 2, 1.34, 0.75]))
def test_upsample_nearest_neighbor_matches_torch_nearest_at_the_output_size(seed, dims, sh, sw):
    scale_h, scale_w = scale_pair(sh, sw)
    x = normal(seed, dims)
    out_h, out_w = scaled_size(scale_h, dims[2]), scaled_size(scale_w, dims[3])
    if min(out_h, out_w) < 1:
        return
    (got,) = run(upsample_nearest(scale_h, scale_w), {"x": x})
    assert_same(got, F.interpolate(t(x), size=(out_h, out_w), mode="nearest").numpy())


@given(seeds, images, st.integers(1, 9), st.integers(1, 9))
def test_resize_nearest_neighbor_matches_torch_nearest_exact(seed, dims, out_h, out_w):
    x = normal(seed, dims)
    want = F.interpolate(t(x), size=(out_h, out_w), mode="nearest-exact").numpy()
    build = lambda x: mb.resize_nearest_neighbor(x=x, target_size_height=out_h, target_size_width=out_w)
    (got,) = run(build, {"x": x})
    assert_same(got, want)
    (got,) = run(resize_nearest, {"x": x, "s": np.array([out_h, out_w], np.int32)})
    assert_same(got, want)


def test_nearest_neighbor_matches_coremltools_recorded_outputs():
    x = np.array([1.5, -2.5, 3.5], np.float32).reshape(1, 1, 1, 3)
    recorded = {
        (3.17, 0.67): [[1.5, -2.5]] * 3,
        (2.0, 1.12): [[1.5, -2.5, 3.5]] * 2,
        (1, 2): [[1.5, 1.5, -2.5, -2.5, 3.5, 3.5]],
    }
    for (scale_h, scale_w), want in recorded.items():
        (got,) = run(upsample_nearest(scale_h, scale_w), {"x": x})
        assert_same(got, np.array(want, np.float32)[None, None])
    y = np.array([-6.174, 9.371], np.float32).reshape(1, 1, 1, 2, 1)
    (got,) = run(lambda y: resize_nearest(y, [1, 1, 3, 2]), {"y": y})
    want = np.array([[-6.174, -6.174], [9.371, 9.371], [9.371, 9.371]], np.float32)
    assert_same(got, want.reshape(1, 1, 1, 3, 2))


def test_resize_nearest_neighbor_refuses_undocumented_sampling_modes():
    build = lambda x: mb.resize(
        x=x,
        shape=[3, 3],
        resized_dims=np.uint32(2),
        interpolation_mode="NEAREST_NEIGHBOR",
        sampling_mode="OFFSET_CORNERS",
    )
    with pytest.raises(UnsupportedOpError, match="OFFSET_CORNERS"):
        run(build, {"x": np.zeros((1, 2, 2), np.float32)})


# -- bilinear ---------------------------------------------------------------------------------


def doc_grid(n, m, mode):
    """The grid formulas of coremltools' ``resize_bilinear`` docstring, term by term."""
    grid = []
    for i in range(m):
        if mode in ("STRICT_ALIGN_CORNERS", "ALIGN_CORNERS"):
            if m == 1:
                point = (n - 1) / 2 if mode == "ALIGN_CORNERS" else 0.0
            else:
                point = i * ((n - 1) / (m - 1))
        elif mode == "DEFAULT":
            point = i * ((n - n / m) / (m - 1)) if m > 1 else 0.0
        elif mode == "OFFSET_CORNERS":
            delta = max(1, n - 1) / m
            point = 0.5 * delta + i * delta
        else:
            spacing = n / m
            point = i * spacing + 0.5 * spacing - 0.5
        grid.append(min(n - 1, max(0, point)))
    return np.array(grid)


def interp_reference(x, sizes, mode):
    """Separable linear interpolation with ``np.interp`` along each resized axis."""
    out = x.astype(np.float64)
    for axis, size in sizes.items():
        grid = doc_grid(out.shape[axis], size, mode)
        out = np.apply_along_axis(lambda line: np.interp(grid, np.arange(line.size), line), axis, out)
    return out.astype(x.dtype)


def resize_bilinear(out_h, out_w, mode):
    return lambda x: mb.resize_bilinear(x=x, target_size_height=out_h, target_size_width=out_w, sampling_mode=mode)


def upsample_bilinear(scale_h, scale_w, **flags):
    return lambda x: mb.upsample_bilinear(x=x, scale_factor_height=scale_h, scale_factor_width=scale_w, **flags)


@given(seeds, images, st.integers(1, 9), st.integers(1, 9), st.sampled_from(SAMPLING_MODES))
def test_resize_bilinear_matches_the_documented_grids(seed, dims, out_h, out_w, mode):
    x = normal(seed, dims)
    want = interp_reference(x, {2: out_h, 3: out_w}, mode)
    (got,) = run(resize_bilinear(out_h, out_w, mode), {"x": x})
    assert_close(got, want)
    build = lambda x: mb.resize(x=x, shape=[out_h, out_w], resized_dims=np.uint32(2), sampling_mode=mode)
    (got,) = run(build, {"x": x})
    assert_close(got, want)
    align = mode == "STRICT_ALIGN_CORNERS"
    if mode == "UNALIGN_CORNERS" or (align and min(out_h, out_w) > 1):
        torch_out = F.interpolate(t(x), size=(out_h, out_w), mode="bilinear", align_corners=align)
        assert_close(got, torch_out.numpy())


@given(
    seeds,
    st.lists(st.integers(1, 4), min_size=3, max_size=3),
    st.lists(st.integers(1, 7), min_size=3, max_size=3),
    st.booleans(),
)
def test_resize_three_axes_matches_torch_trilinear(seed, spatial, size, align):
    if align and min(size) == 1:
        return
    x = normal(seed, [1, 2] + spatial)
    mode = "STRICT_ALIGN_CORNERS" if align else "UNALIGN_CORNERS"
    build = lambda x, s: mb.resize(x=x, shape=s, resized_dims=np.uint32(3), sampling_mode=mode)
    (got,) = run(build, {"x": x, "s": np.array(size, np.int32)})
    want = F.interpolate(t(x), size=tuple(size), mode="trilinear", align_corners=align)
    assert_close(got, want.numpy())


def test_resize_keeps_axes_whose_target_is_zero_and_refuses_linear_on_integers():
    x = normal(0, (1, 2, 3, 4))
    build = lambda x: mb.resize(x=x, shape=[5, 0], resized_dims=np.uint32(2), sampling_mode="DEFAULT")
    (got,) = run(build, {"x": x})
    assert_close(got, interp_reference(x, {2: 5, 3: 4}, "DEFAULT"))
    with pytest.raises(UnsupportedOpError, match="LINEAR on integers"):
        build = lambda x: mb.resize(x=x, shape=[5, 5], resized_dims=np.uint32(2))
        run(build, {"x": np.zeros((1, 2, 2), np.int32)})


@given(
    seeds,
    images,
    st.sampled_from([1, 2, 3, 0.5, 1.5, 2.5]),
    st.sampled_from([1, 2, 0.75, 1.7]),
    st.booleans(),
    st.sampled_from([IOS15, IOS17]),
)
def test_upsample_bilinear_matches_torch_with_recomputed_scale(seed, dims, sh, sw, align, opset):
    scale_h, scale_w = scale_pair(sh, sw)
    x = normal(seed, dims)
    out_h, out_w = scaled_size(scale_h, dims[2]), scaled_size(scale_w, dims[3])
    if min(out_h, out_w) < 1 or (align and min(out_h, out_w) == 1):
        return
    want = F.interpolate(t(x), size=(out_h, out_w), mode="bilinear", align_corners=align).numpy()
    (got,) = run(upsample_bilinear(scale_h, scale_w, align_corners=align), {"x": x}, opset=opset)
    assert_close(got, want)


@given(seeds, images, st.sampled_from([1, 2, 3, 1.5, 2.5]), st.sampled_from([1, 2, 1.7]))
def test_upsample_bilinear_without_half_pixel_centers_uses_the_default_grid(seed, dims, sh, sw):
    scale_h, scale_w = scale_pair(sh, sw)
    x = normal(seed, dims)
    out_h, out_w = scaled_size(scale_h, dims[2]), scaled_size(scale_w, dims[3])
    build = upsample_bilinear(scale_h, scale_w, align_corners=False, half_pixel_centers=False)
    (got,) = run(build, {"x": x}, opset=IOS16)
    assert_close(got, interp_reference(x, {2: out_h, 3: out_w}, "DEFAULT"))


def test_bilinear_matches_coremltools_recorded_outputs():
    line = np.array([0, 1], np.float32).reshape(1, 1, 2)
    recorded = {
        "STRICT_ALIGN_CORNERS": [0, 0.25, 0.5, 0.75, 1],
        "DEFAULT": [0, 0.4, 0.8, 1, 1],
        "OFFSET_CORNERS": [0.1, 0.3, 0.5, 0.7, 0.9],
        "UNALIGN_CORNERS": [0, 0.1, 0.5, 0.9, 1],
    }
    for mode, want in recorded.items():
        (got,) = run(resize_bilinear(1, 5, mode), {"x": line})
        assert_close(got, np.array(want, np.float32).reshape(1, 1, 5))
    (got,) = run(upsample_bilinear(1, 3, align_corners=True), {"x": line})
    assert_close(got, np.array([0, 0.2, 0.4, 0.6, 0.8, 1], np.float32).reshape(1, 1, 6))
    (got,) = run(upsample_bilinear(1.0, 2.6, align_corners=False), {"x": line})
    assert_close(got, np.array([0, 0.1, 0.5, 0.9, 1], np.float32).reshape(1, 1, 5))
    pair = np.array([1, 2], np.float32).reshape(1, 1, 1, 2)
    recorded_ios16 = {
        (True, False): [1.0, 1.2, 1.4, 1.6, 1.8, 2.0],
        (False, True): [1.0, 1.0, 4 / 3, 5 / 3, 2.0, 2.0],
        (False, False): [1.0, 4 / 3, 5 / 3, 2.0, 2.0, 2.0],
    }
    for (align, half), row in recorded_ios16.items():
        build = upsample_bilinear(2, 3, align_corners=align, half_pixel_centers=half)
        (got,) = run(build, {"x": pair}, opset=IOS16)
        assert_close(got, np.array([row, row], np.float32).reshape(1, 1, 2, 6))


def test_upsample_bilinear_refuses_align_corners_with_half_pixel_centers():
    build = upsample_bilinear(2, 1, align_corners=True, half_pixel_centers=True)
    with pytest.raises(ValueError, match="cannot both be True"):
        run(build, {"x": np.zeros((1, 2, 2), np.float32)}, opset=IOS16)


def test_fp16_interpolation_is_the_float64_value_rounded_once():
    x = normal(3, (1, 2, 3, 4), np.float16)
    (got,) = run(resize_bilinear(5, 7, "UNALIGN_CORNERS"), {"x": x})
    truth = F.interpolate(t(x.astype(np.float64)), size=(5, 7), mode="bilinear", align_corners=False)
    half_ulp = np.spacing(np.abs(got)).astype(np.float64) / 2
    assert got.dtype == np.float16
    assert np.all(np.abs(got.astype(np.float64) - truth.numpy()) <= half_ulp * (1 + 1e-9))


# -- crop_resize ------------------------------------------------------------------------------


def loop_crop_and_resize(image, box, out_h, out_w, pad, center_when_one=True):
    """TF's crop_and_resize for one [C, H, W] image and a pixel box (h0, w0, h1, w1)."""
    h0, w0, h1, w1 = box

    def position(start, end, i, size):
        if size > 1:
            return start + i * (end - start) / (size - 1)
        return (start + end) / 2 if center_when_one else start

    channels, height, width = image.shape
    out = np.full((channels, out_h, out_w), pad, np.float64)
    for i in range(out_h):
        y = position(h0, h1, i, out_h)
        for j in range(out_w):
            x = position(w0, w1, j, out_w)
            if not (0 <= y <= height - 1 and 0 <= x <= width - 1):
                continue
            top, left = int(np.floor(y)), int(np.floor(x))
            bottom, right = int(np.ceil(y)), int(np.ceil(x))
            dy, dx = y - top, x - left
            upper = image[:, top, left] + (image[:, top, right] - image[:, top, left]) * dx
            lower = image[:, bottom, left] + (image[:, bottom, right] - image[:, bottom, left]) * dx
            out[:, i, j] = upper + (lower - upper) * dy
    return out


def encode_boxes(h0, w0, h1, w1, box_mode):
    encoded = {
        "CORNERS_HEIGHT_FIRST": [h0, w0, h1, w1],
        "CORNERS_WIDTH_FIRST": [w0, h0, w1, h1],
        "CENTER_SIZE_HEIGHT_FIRST": [(h0 + h1) / 2, (w0 + w1) / 2, h1 - h0, w1 - w0],
        "CENTER_SIZE_WIDTH_FIRST": [(w0 + w1) / 2, (h0 + h1) / 2, w1 - w0, h1 - h0],
    }[box_mode]
    return np.stack(encoded, axis=-1).astype(np.float32)


@given(
    seeds,
    st.data(),
    st.sampled_from(["ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"]),
    st.booleans(),
    st.sampled_from(BOX_MODES),
)
def test_crop_resize_matches_a_tf_crop_and_resize_loop(seed, data, mode, normalized, box_mode):
    rng = np.random.default_rng(seed)
    batch, height, width, count, out_h, out_w = (data.draw(st.integers(1, n)) for n in (2, 5, 5, 3, 4, 4))
    x = normal(seed, (batch, 2, height, width))
    span = 1 if normalized else np.array([height - 1, width - 1] * 2)
    h0, w0, h1, w1 = (rng.uniform(-0.3, 1.3, size=(count, 4)) * span).T
    scale_h, scale_w = (height - 1, width - 1) if normalized else (1, 1)
    box_indices = rng.integers(0, batch, count).astype(np.int32)
    want = np.stack(
        [
            loop_crop_and_resize(
                x[box_indices[n]].astype(np.float64),
                (h0[n] * scale_h, w0[n] * scale_w, h1[n] * scale_h, w1[n] * scale_w),
                out_h,
                out_w,
                2.5,
                center_when_one=mode == "ALIGN_CORNERS",
            )
            for n in range(count)
        ]
    ).astype(np.float32)
    build = lambda x, b, i: mb.crop_resize(
        x=x,
        boxes=b,
        box_indices=i,
        target_height=out_h,
        target_width=out_w,
        normalized_coordinates=normalized,
        box_coordinate_mode=box_mode,
        sampling_mode=mode,
        pad_value=2.5,
    )
    (got,) = run(build, {"x": x, "b": encode_boxes(h0, w0, h1, w1, box_mode), "i": box_indices})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # boxes pass through fp32


def crop_resize_align(size, **kwargs):
    return lambda x: mb.crop_resize(x=x, target_height=size, target_width=size, sampling_mode="ALIGN_CORNERS", **kwargs)


def test_crop_resize_matches_coremltools_recorded_outputs():
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    roi = np.array([1, 1, 2, 2], np.float32).reshape(1, 1, 4, 1, 1)
    thirds = [6 + k / 3 for k in range(16)]
    for size, want in {2: [6, 7, 10, 11], 4: thirds, 1: [8.5]}.items():
        (got,) = run(crop_resize_align(size, roi=roi), {"x": x}, opset=IOS15)
        assert_close(got, np.array(want, np.float32).reshape(1, 1, 1, size, size))
    inverted = np.array([2, 2, 1, 1], np.float32).reshape(1, 1, 4, 1, 1)
    (got,) = run(crop_resize_align(2, roi=inverted), {"x": x}, opset=IOS15)
    assert_close(got, np.array([11, 10, 7, 6], np.float32).reshape(1, 1, 1, 2, 2))
    normalized = np.array([0, 0, 0, 1 / 3, 1 / 3], np.float32).reshape(1, 1, 5, 1, 1)
    build = crop_resize_align(2, roi=normalized, normalized_coordinates=True)
    (got,) = run(build, {"x": x}, opset=IOS15)
    assert_close(got, np.array([1, 2, 5, 6], np.float32).reshape(1, 1, 1, 2, 2))
    boxes = np.array([[0.1, 0.3, 1.3, 1.0], [0.5, 1.8, 1.0, 0.3], [0.0, 0.4, 0.6, 0.7]], np.float32)
    roi = np.concatenate([np.zeros((3, 1), np.float32), boxes], 1).reshape(3, 1, 5, 1, 1)
    want = np.array([3.1, 5.2, 10, 10, 10, 7.9, 10, 13.9, 2.2, 3.1, 9.4, 10.3], np.float32)
    for opset, kwargs in [(IOS16, {"roi": roi}), (IOS17, {"boxes": boxes, "box_indices": np.zeros(3, np.int32)})]:
        build = crop_resize_align(2, normalized_coordinates=True, pad_value=10.0, **kwargs)
        (got,) = run(build, {"x": x}, opset=opset)
        np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-5)


@pytest.mark.parametrize("mode", ["UNALIGN_CORNERS", "ALIGN_CORNERS"])
def test_crop_resize_before_ios16_refuses_a_box_outside_the_image(mode):
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    outside = np.array([2, 2, 1.5, 1.5], np.float32).reshape(1, 1, 4, 1, 1)  # normalized: rows 6..4.5
    build = lambda x: mb.crop_resize(
        x=x, roi=outside, target_height=2, target_width=2, normalized_coordinates=True, sampling_mode=mode
    )
    with pytest.raises(UnsupportedOpError, match=r"height 4\.5\.\.6, outside the image's \[0, 3\].*before iOS16"):
        run(build, {"x": x}, opset=IOS15)
    (padded,) = run(build, {"x": x}, opset=IOS16)  # iOS16 pads what lies outside
    assert np.all(padded == 0)


def test_crop_resize_with_four_coordinates_crops_every_image_of_the_batch():
    x = normal(1, (2, 1, 3, 3))
    roi = np.array([0, 0, 2, 2], np.float32).reshape(1, 1, 4, 1, 1)
    (got,) = run(crop_resize_align(3, roi=roi), {"x": x}, opset=IOS16)
    assert_close(got, x[None])


@pytest.mark.parametrize(
    "mode", ["DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS", "ALIGN_CORNERS", "STRICT_ALIGN_CORNERS"]
)
@pytest.mark.parametrize("out_size", [(3, 7), (1, 2), (6, 4)])
def test_crop_resize_of_the_whole_image_samples_what_resize_bilinear_samples(mode, out_size):
    x = np.random.default_rng(5).standard_normal((1, 2, 4, 5)).astype(np.float32)
    whole = np.array([[0, 0, 1, 1]], np.float32)
    crop = lambda x: mb.crop_resize(
        x=x,
        boxes=whole,
        target_height=out_size[0],
        target_width=out_size[1],
        normalized_coordinates=True,
        sampling_mode=mode,
    )
    resize = lambda x: mb.resize_bilinear(
        x=x, target_size_height=out_size[0], target_size_width=out_size[1], sampling_mode=mode
    )
    (cropped,) = run(crop, {"x": x})
    (resized,) = run(resize, {"x": x})
    np.testing.assert_allclose(cropped, resized, rtol=0, atol=1e-6)


def test_crop_resize_unaligned_samples_pixel_centres_of_a_box_inside_the_image():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    box = np.array([[1, 0, 2, 3]], np.float32)  # rows 1..2, columns 0..3 (pixel centres)
    build = lambda x: mb.crop_resize(x=x, boxes=box, target_height=1, target_width=2, sampling_mode="UNALIGN_CORNERS")
    (got,) = run(build, {"x": x})
    # 2 rows -> 1: row 1.5; 4 columns -> 2: columns 0.5 and 2.5
    np.testing.assert_allclose(got.reshape(-1), [1.5 * 4 + 0.5, 1.5 * 4 + 2.5])


# -- resample / affine ------------------------------------------------------------------------

TORCH_PADDINGS = [("constant", False), ("constant", True), ("border", False), ("border", True), ("reflection", True)]


def resample(sampling, padding, value, coordinates_mode, align):
    return lambda x, c: mb.resample(
        x=x,
        coordinates=c,
        sampling_mode=sampling,
        padding_mode=padding,
        padding_value=value,
        coordinates_mode=coordinates_mode,
        align_corners=align,
    )


def affine(out_h, out_w):
    return lambda x, m: mb.affine(
        x=x,
        transform_matrix=m,
        output_height=out_h,
        output_width=out_w,
        sampling_mode="bilinear",
        padding_mode="constant",
        padding_value=0.0,
        coordinates_mode="normalized_minus_one_to_one",
        align_corners=True,
    )


@given(
    seeds,
    images,
    st.integers(1, 5),
    st.integers(1, 5),
    st.sampled_from(["bilinear", "nearest"]),
    st.sampled_from(TORCH_PADDINGS),
)
def test_resample_matches_torch_grid_sample(seed, dims, out_h, out_w, sampling, padding):
    padding_mode, align = padding
    x = normal(seed, dims)
    rng = np.random.default_rng(seed + 1)
    coords = rng.uniform(-1.6, 1.6, size=(dims[0], out_h, out_w, 2)).astype(np.float32)
    torch_padding = {"constant": "zeros", "border": "border", "reflection": "reflection"}[padding_mode]
    want = F.grid_sample(t(x), t(coords), mode=sampling, padding_mode=torch_padding, align_corners=align)
    build = resample(sampling, padding_mode, 0.0, "normalized_minus_one_to_one", align)
    (got,) = run(build, {"x": x, "c": coords})
    assert_close(got, want.numpy())


def test_resample_matches_coremltools_recorded_outputs():
    x = np.array([11.0, 22.0, 33.0, 44.0], np.float32).reshape(1, 1, 2, 2)
    coords = np.array([-1.0, -2.0, -3.7, -1.0, 0.0, 0.0, 3.5, 1.2], np.float32).reshape(1, 2, 2, 2)
    cases = [
        (("bilinear", "constant", 6.17, "normalized_minus_one_to_one", True), [8.585, 6.17, 27.5, 6.17]),
        (("nearest", "border", -1.0, "unnormalized", False), [11.0, 11.0, 11.0, 44.0]),
        (("bilinear", "reflection", -1.0, "normalized_zero_to_one", True), [22.0, 36.3, 11.0, 34.1]),
        (("nearest", "symmetric", -1.0, "normalized_zero_to_one", False), [22.0, 33.0, 11.0, 33.0]),
    ]
    for params, want in cases:
        (got,) = run(resample(*params), {"x": x, "c": coords})
        assert_close(got, np.array(want, np.float32).reshape(1, 1, 2, 2))


@given(seeds, images, st.integers(2, 5), st.integers(2, 5), st.booleans())
def test_affine_matches_torch_affine_grid_and_grid_sample(seed, dims, out_h, out_w, shared):
    x = normal(seed, dims)
    rng = np.random.default_rng(seed + 1)
    matrices = rng.uniform(-1.5, 1.5, size=(1 if shared else dims[0], 6)).astype(np.float32)
    theta = t(np.broadcast_to(matrices.reshape(-1, 2, 3), (dims[0], 2, 3)).copy())
    grid = F.affine_grid(theta, [dims[0], dims[1], out_h, out_w], align_corners=True)
    want = F.grid_sample(t(x), grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    (got,) = run(affine(out_h, out_w), {"x": x, "m": matrices})
    assert_close(got, want.numpy())


def test_affine_matches_coremltools_recorded_outputs():
    x = np.array([11.0, 22.0, 33.0, 44.0], np.float32).reshape(1, 1, 2, 2)
    matrix = np.array([-1.0, -2.0, -3.7, -1.0, 3.5, 1.2], np.float32).reshape(1, 6)
    (got,) = run(affine(3, 3), {"x": x, "m": matrix})
    want = np.array([10.752501, 2.5025, 0.0, 1.9799997, 0, 0, 0, 0, 0], np.float32)
    assert_close(got, want.reshape(1, 1, 3, 3))

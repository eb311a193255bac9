"""Indexing kernels against PyTorch and independent numpy loops.

Float data for the accumulating scatter modes are small integers (and divisors powers of two),
so every result is exact whatever order the oracle accumulates in: all comparisons are exact.
"""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil.ops.defs._utils import (
    solve_slice_by_index_shape,
    solve_slice_by_index_slice,
)

from kernel_helpers import assert_same, run
from mil_passes.reference import UnsupportedOpError
from mil_passes.reference.errors import PredictionError

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")

IOS15, IOS16, IOS18 = ct.target.iOS15, ct.target.iOS16, ct.target.iOS18
FLOATS = (np.float32, np.float16)
NUMERIC = [np.float32, np.float16, np.int32]


def small_ints(rng, shape, dtype, low=-8, high=9):
    return rng.integers(low, high, size=shape).astype(dtype)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)
seeds = st.integers(0, 2**32 - 1)


def t(array):
    return torch.from_numpy(np.ascontiguousarray(array))


# -- gather_along_axis / gather_nd ------------------------------------------------------------


@given(shapes, seeds, st.data(), st.sampled_from(NUMERIC))
def test_gather_along_axis_matches_torch_gather(shape, seed, data, dtype):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    index_shape = list(shape)
    index_shape[axis] = data.draw(st.integers(1, 5))
    x = small_ints(rng, shape, dtype)
    size = shape[axis]
    positive = rng.integers(0, size, size=index_shape)
    negative = positive - size * rng.integers(0, 2, size=index_shape)  # iOS15/16 allow -size..-1
    want = torch.gather(t(x), axis, t(positive)).numpy()
    (got,) = run(lambda x, i: mb.gather_along_axis(x=x, indices=i, axis=axis), {"x": x, "i": positive.astype(np.int32)})
    assert_same(got, want)
    (got,) = run(
        lambda x, i: mb.gather_along_axis(x=x, indices=i, axis=axis),
        {"x": x, "i": negative.astype(np.int32)},
        opset=IOS16,
    )
    assert_same(got, want)


def test_gather_along_axis_refuses_negative_indices_from_ios17_on():
    x, i = np.zeros((1, 3), np.float32), np.array([[0, -1]], np.int32)
    with pytest.raises(ValueError, match=r"index -1 .* \[0, 3\) on axis 1 \(iOS17\+ takes no negative"):
        run(lambda x, i: mb.gather_along_axis(x=x, indices=i, axis=1), {"x": x, "i": i})


def test_gather_along_axis_refuses_out_of_range_indices():
    x, i = np.zeros((1, 3), np.float32), np.array([[0, 3]], np.int32)
    with pytest.raises(ValueError, match=r"gather_along_axis.*index 3 .* \[-3, 3\)"):
        run(lambda x, i: mb.gather_along_axis(x=x, indices=i, axis=1), {"x": x, "i": i}, opset=IOS16)


@given(seeds, st.data(), st.sampled_from(NUMERIC))
def test_gather_nd_with_batch_dims_matches_torch_indexing(seed, data, dtype):
    rng = np.random.default_rng(seed)
    batch_dims = data.draw(st.integers(0, 2))
    x_shape = data.draw(st.lists(st.integers(1, 4), min_size=batch_dims + 1, max_size=batch_dims + 3))
    depth = data.draw(st.integers(1, len(x_shape) - batch_dims))
    middle = data.draw(st.lists(st.integers(1, 3), max_size=2))
    x = small_ints(rng, x_shape, dtype)
    sizes = np.array(x_shape[batch_dims : batch_dims + depth])
    indices = (rng.random(x_shape[:batch_dims] + middle + [depth]) * sizes).astype(np.int32)
    x_t, i_t = t(x), t(indices.astype(np.int64))
    if batch_dims == 0:
        want = x_t[tuple(i_t.unbind(-1))].numpy()
    else:  # one gather_nd per batch entry
        flat_x = x_t.reshape((-1,) + tuple(x_shape[batch_dims:]))
        flat_i = i_t.reshape((-1,) + tuple(indices.shape[batch_dims:]))
        parts = [xb[tuple(ib.unbind(-1))] for xb, ib in zip(flat_x, flat_i)]
        want = torch.stack(parts).reshape(indices.shape[:-1] + tuple(x_shape[batch_dims + depth :])).numpy()
    (got,) = run(lambda x, i: mb.gather_nd(x=x, indices=i, batch_dims=batch_dims), {"x": x, "i": indices})
    assert_same(got, want)


def test_gather_nd_ios15_takes_negative_indices_and_ios17_refuses_them():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([[-1, -4], [0, 3]], np.int32)
    (got,) = run(lambda x, i: mb.gather_nd(x=x, indices=i), {"x": x, "i": indices}, opset=IOS15)
    assert_same(got, np.array([8.0, 3.0], np.float32))
    with pytest.raises(ValueError, match="gather_nd.*index -1"):
        run(lambda x, i: mb.gather_nd(x=x, indices=i), {"x": x, "i": indices})


# -- scatter family ---------------------------------------------------------------------------

MODES = ["update", "add", "sub", "mul", "div", "max", "min"]


def scatter_updates(rng, shape, dtype, mode):
    if mode == "div":  # exact quotients: signed powers of two
        return (rng.choice([-4.0, -2.0, -1.0, 0.5, 1.0, 2.0, 4.0], size=shape)).astype(dtype)
    return small_ints(rng, shape, dtype, -3, 4)


def loop_scatter(data, positions, updates, mode):
    """Reference: apply ``updates[k]`` at ``positions[k]`` (tuples) one at a time."""
    out = data.astype(np.float64 if data.dtype.kind == "f" else data.dtype).copy()
    combine = {
        "update": lambda a, b: b,
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "max": max,
        "min": min,
    }[mode]
    for position, value in zip(positions, updates):
        out[position] = combine(out[position], value)
    return out.astype(data.dtype)


@given(shapes, seeds, st.data(), st.sampled_from(MODES), st.sampled_from(NUMERIC))
def test_scatter_along_axis_matches_torch_scatter_reduce(shape, seed, data, mode, dtype):
    if mode == "div" and dtype == np.int32:
        return
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    index_shape = list(shape)
    if mode == "update":  # distinct targets along the axis, so the result is well defined
        index_shape[axis] = data.draw(st.integers(1, size))
        indices = np.argsort(rng.random(shape), axis=axis).take(range(index_shape[axis]), axis=axis)
    else:
        index_shape[axis] = data.draw(st.integers(1, 5))
        indices = rng.integers(0, size, size=index_shape)
    x = small_ints(rng, shape, dtype)
    updates = scatter_updates(rng, index_shape, dtype, mode)
    x_t, i_t, u_t = t(x), t(indices.astype(np.int64)), t(updates)
    if mode == "update":
        want = torch.scatter(x_t, axis, i_t, u_t).numpy()
    elif mode in ("add", "mul", "max", "min"):
        reduce = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[mode]
        want = torch.scatter_reduce(x_t, axis, i_t, u_t, reduce=reduce, include_self=True).numpy()
    elif mode == "sub":
        want = torch.scatter_reduce(x_t, axis, i_t, -u_t, reduce="sum", include_self=True).numpy()
    else:
        coords = list(np.indices(index_shape).reshape(len(shape), -1))
        coords[axis % len(shape)] = indices.reshape(-1)
        want = loop_scatter(x, list(zip(*coords)), updates.reshape(-1), mode)
    (got,) = run(
        lambda d, i, u: mb.scatter_along_axis(data=d, indices=i, updates=u, axis=axis, mode=mode),
        {"d": x, "i": indices.astype(np.int32), "u": updates},
    )
    assert_same(got, want)


@pytest.mark.filterwarnings("ignore:index_reduce\\(\\) is in beta")
@given(shapes, seeds, st.data(), st.sampled_from(MODES), st.sampled_from(NUMERIC))
def test_scatter_matches_torch_index_ops(shape, seed, data, mode, dtype):
    if mode == "div" and dtype == np.int32:
        return
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    count = data.draw(st.integers(1, size if mode == "update" else 5))
    indices = rng.permutation(size)[:count] if mode == "update" else rng.integers(0, size, count)
    index_shape = (count,) if data.draw(st.booleans()) or count % 2 else (2, count // 2)
    indices = indices.reshape(index_shape)
    pos = axis % len(shape)
    updates_shape = shape[:pos] + index_shape + shape[pos + 1 :]
    x = small_ints(rng, shape, dtype)
    updates = scatter_updates(rng, updates_shape, dtype, mode)
    flat_u = t(updates.reshape(shape[:pos] + (count,) + shape[pos + 1 :]))
    x_t, i_t = t(x), t(indices.reshape(-1).astype(np.int64))
    if mode == "update":
        want = x_t.clone().index_copy_(pos, i_t, flat_u).numpy()
    elif mode in ("add", "sub"):
        want = x_t.clone().index_add_(pos, i_t, flat_u, alpha=1 if mode == "add" else -1).numpy()
    elif mode in ("mul", "max", "min") and dtype != np.float16:
        reduce = {"mul": "prod", "max": "amax", "min": "amin"}[mode]
        want = x_t.clone().index_reduce_(pos, i_t, flat_u, reduce, include_self=True).numpy()
    else:
        grid = np.indices(flat_u.shape).reshape(len(shape), -1)
        positions = [tuple(g) for g in grid.T]
        targets = [p[:pos] + (int(indices.reshape(-1)[p[pos]]),) + p[pos + 1 :] for p in positions]
        want = loop_scatter(x, targets, flat_u.numpy().reshape(-1), mode)
    (got,) = run(
        lambda d, i, u: mb.scatter(data=d, indices=i, updates=u, axis=axis, mode=mode),
        {"d": x, "i": indices.astype(np.int32), "u": updates},
    )
    assert_same(got, want)


@given(seeds, st.data(), st.sampled_from(MODES), st.sampled_from(NUMERIC))
def test_scatter_nd_matches_torch_index_put_and_a_loop(seed, data, mode, dtype):
    if mode == "div" and dtype == np.int32:
        return
    rng = np.random.default_rng(seed)
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    depth = data.draw(st.integers(1, len(shape)))
    middle = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    lead = shape[:depth]
    count = int(np.prod(middle))
    if mode == "update":  # distinct targets
        count = min(count, int(np.prod(lead)))
        middle = (count,)
        flat = rng.permutation(int(np.prod(lead)))[:count]
    else:
        flat = rng.integers(0, int(np.prod(lead)), count)
    indices = np.stack(np.unravel_index(flat, lead), axis=-1).reshape(middle + (depth,))
    updates_shape = middle + shape[depth:]
    x = small_ints(rng, shape, dtype)
    updates = scatter_updates(rng, updates_shape, dtype, mode)
    index_t = tuple(t(indices.reshape(-1, depth).astype(np.int64)).unbind(-1))
    u_t = t(updates.reshape((count,) + shape[depth:]))
    if mode in ("update", "add"):
        want = t(x).clone().index_put_(index_t, u_t, accumulate=mode == "add").numpy()
    else:
        inner = list(np.ndindex(*shape[depth:]))
        positions = [tuple(i) + rest for i in indices.reshape(-1, depth) for rest in inner]
        want = loop_scatter(x, positions, updates.reshape(-1), mode)
    (got,) = run(
        lambda d, i, u: mb.scatter_nd(data=d, indices=i, updates=u, mode=mode),
        {"d": x, "i": indices.astype(np.int32), "u": updates},
    )
    assert_same(got, want)


def scatter_program(mode=None, op="scatter", validate_indices=None):
    extra = {} if mode is None else {"mode": mode}
    if validate_indices is not None:
        extra["validate_indices"] = validate_indices
    return lambda d, i, u: getattr(mb, op)(data=d, indices=i, updates=u, **extra)


def test_scatter_default_mode_is_add_and_ios15_takes_negative_indices():
    feeds = {"d": np.zeros((3, 2), np.float32), "i": np.array([-1, 2], np.int32), "u": np.ones((2, 2), np.float32)}
    (got,) = run(scatter_program(), feeds, opset=IOS15)
    assert_same(got, np.array([[0, 0], [0, 0], [2, 2]], np.float32))


def test_scatter_update_with_duplicate_indices_keeps_the_last_write():
    feeds = {"d": np.zeros((3,), np.float32), "i": np.array([1, 1, 1], np.int32), "u": np.array([1, 2, 3], np.float32)}
    (got,) = run(scatter_program("update"), feeds)
    assert_same(got, np.array([0, 3, 0], np.float32))


def test_scatter_refuses_integer_div_unknown_modes_and_out_of_range_indices():
    feeds = {"d": np.ones((3,), np.int32), "i": np.array([0], np.int32), "u": np.ones((1,), np.int32)}
    with pytest.raises(UnsupportedOpError, match="mode 'div' on int32"):
        run(scatter_program("div"), feeds)
    with pytest.raises(ValueError, match="unknown mode 'xor'"):
        run(scatter_program("xor"), feeds)
    with pytest.raises(PredictionError, match=r"scatter_nd.*index 3 .* \[0, 3\)"):
        run(scatter_program(op="scatter_nd", validate_indices=True), {**feeds, "i": np.array([[3]], np.int32)})


@pytest.mark.parametrize(
    "op, indices",
    [
        ("scatter", [[-1, 0], [10, 0]]),
        ("scatter_nd", [[[-1], [0]], [[10], [0]]]),
    ],
)
def test_unvalidated_scatter_drops_out_of_range_updates_and_validated_fails_the_prediction(op, indices):
    data = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    updates = np.array([[5, 6, 7], [8, 9, 10]], np.float32)
    for index in indices:
        feeds = {"d": data, "i": np.array(index, np.int32), "u": updates}
        (got,) = run(scatter_program(op=op), feeds)  # iOS17: validate_indices defaults to False
        assert_same(got, np.array([[9, 11, 13], [4, 5, 6]], np.float32))  # row 0 += [8, 9, 10]; the other dropped
        with pytest.raises(PredictionError, match="out of range"):
            run(scatter_program(op=op, validate_indices=True), feeds)


def test_unvalidated_scatter_along_axis_drops_out_of_range_updates():
    feeds = {
        "d": np.zeros((2, 2), np.float32),
        "i": np.array([[0, 5], [-1, 1]], np.int32),
        "u": np.array([[1, 2], [3, 4]], np.float32),
    }
    (got,) = run(scatter_program(op="scatter_along_axis"), feeds)
    assert_same(got, np.array([[1, 0], [0, 4]], np.float32))


def test_scatter_along_axis_mode_is_applied_where_value_inference_ignores_it():
    data = np.ones((2, 3), np.float32)
    indices = np.array([[0, 0], [2, 1]], np.int32)
    updates = np.full((2, 2), 5.0, np.float32)
    build = lambda d, i, u: mb.scatter_along_axis(data=d, indices=i, updates=u, axis=1, mode="add")
    (got,) = run(build, {"d": data, "i": indices, "u": updates})
    assert_same(got, np.array([[11, 1, 1], [1, 6, 6]], np.float32))


# -- one_hot ----------------------------------------------------------------------------------


@given(shapes, seeds, st.data(), st.sampled_from(NUMERIC + [np.bool_]))
def test_one_hot_matches_torch_one_hot(shape, seed, data, dtype):
    rng = np.random.default_rng(seed)
    depth = data.draw(st.integers(1, 5))
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    on, off = (True, False) if dtype == np.bool_ else (dtype(3), dtype(-1))
    indices = rng.integers(0, depth, size=shape).astype(np.int32)
    hot = torch.nn.functional.one_hot(t(indices.astype(np.int64)), depth).movedim(-1, axis).numpy()
    want = np.where(hot == 1, on, off).astype(dtype)
    build = lambda i: mb.one_hot(indices=i, one_hot_vector_size=depth, axis=axis, on_value=on, off_value=off)
    (got,) = run(build, {"i": indices})
    assert_same(got, want)


def test_one_hot_gives_off_values_for_indices_out_of_range_and_takes_a_dynamic_size():
    indices = np.array([-1, 0, 3, 2], np.int32)
    build = lambda i, n: mb.one_hot(indices=i, one_hot_vector_size=n)
    (got,) = run(build, {"i": indices, "n": np.array(3, np.int32)})
    assert_same(got, np.array([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]], np.int32))


# -- slice_update, crop, reshape_like, sliding_windows ----------------------------------------


@st.composite
def slice_windows(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    params = dict(begin=[], end=[], stride=[], begin_mask=[], end_mask=[], squeeze_mask=[])
    for dim in shape:
        squeeze = draw(st.integers(0, 3)) == 0
        params["begin"].append(draw(st.integers(-dim, dim - 1)))
        params["end"].append(draw(st.integers(-dim - 1, dim)))
        params["stride"].append(1 if squeeze else draw(st.sampled_from([1, 2, 3, -1, -2])))
        params["begin_mask"].append(draw(st.booleans()))
        params["end_mask"].append(draw(st.booleans()))
        params["squeeze_mask"].append(squeeze)
    if all(params["squeeze_mask"]):
        params["squeeze_mask"][0] = False
    return shape, params


@given(slice_windows(), seeds, st.sampled_from(NUMERIC + [np.bool_]))
def test_slice_update_writes_the_slice_by_index_window(window, seed, dtype):
    shape, params = window
    rng = np.random.default_rng(seed)
    x = small_ints(rng, shape, dtype, 0, 2) if dtype == np.bool_ else small_ints(rng, shape, dtype)
    slices = solve_slice_by_index_slice(
        shape,
        list(params["begin"]),
        list(params["end"]),
        list(params["stride"]),
        list(params["begin_mask"]),
        list(params["end_mask"]),
        list(params["squeeze_mask"]),
    )
    want = x.copy()
    region_shape = want[slices].shape  # squeezed axes are kept here, with size 1
    update_shape = tuple(n for n, squeezed in zip(region_shape, params["squeeze_mask"]) if not squeezed)
    if 0 in region_shape:
        return  # coremltools refuses empty windows at build time
    declared = solve_slice_by_index_shape(
        shape,
        params["begin"],
        params["end"],
        params["stride"],
        params["begin_mask"],
        params["end_mask"],
        params["squeeze_mask"],
    )
    if tuple(declared) != update_shape:
        return  # coremltools' shape solver disagrees with its own slices (end < -size)
    low, high = (0, 2) if dtype == np.bool_ else (20, 30)
    update = small_ints(rng, update_shape, dtype, low, high)
    want[slices] = update.reshape(region_shape)
    (got,) = run(lambda x, u: mb.slice_update(x=x, update=u, **params), {"x": x, "u": update}, opset=IOS18)
    assert_same(got, want)


@given(seeds, st.data())
def test_crop_matches_slicing(seed, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=3, max_size=4)))
    top = data.draw(st.integers(0, shape[-2] - 1))
    bottom = data.draw(st.integers(0, shape[-2] - 1 - top))
    left = data.draw(st.integers(0, shape[-1] - 1))
    right = data.draw(st.integers(0, shape[-1] - 1 - left))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    want = t(x).narrow(-2, top, shape[-2] - top - bottom).narrow(-1, left, shape[-1] - left - right).numpy()
    (got,) = run(lambda x: mb.crop(x=x, crop_height=[top, bottom], crop_width=[left, right]), {"x": x})
    assert_same(got, want)


def test_reshape_like_takes_shape_pieces_from_reference_tensors():
    x = np.arange(30, dtype=np.float32).reshape(2, 15)
    refs = {"a": np.zeros((2, 3, 4), np.int32), "b": np.zeros((1, 5, 1), np.bool_)}
    build = lambda x, a, b: mb.reshape_like(
        x=x, ref_tensors=(a, b), begins=(0, 1), ends=(2, 0), end_masks=(False, True)
    )
    (got,) = run(build, {"x": x, **refs})
    assert_same(got, x.reshape(2, 3, 5, 1))


@given(shapes, seeds, st.data(), st.sampled_from([np.float32, np.int32, np.bool_, np.uint8]))
def test_sliding_windows_match_torch_unfold(shape, seed, data, dtype):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = data.draw(st.integers(1, shape[axis]))
    stride = data.draw(st.integers(1, 3))
    x = small_ints(np.random.default_rng(seed), shape, dtype, 0, 2 if dtype == np.bool_ else 9)
    pos = axis % len(shape)
    want = t(x).unfold(pos, size, stride).movedim(-1, pos + 1).numpy()
    (got,) = run(lambda x: mb.sliding_windows(x=x, axis=axis, size=size, stride=stride), {"x": x})
    assert_same(got, want)


# -- space_to_batch / batch_to_space ----------------------------------------------------------


def loop_space_to_batch(x, block, pads):
    padded = np.pad(x, ((0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])))
    n, c, h, w = padded.shape
    out = np.zeros((n * block[0] * block[1], c, h // block[0], w // block[1]), x.dtype)
    for b_out in range(out.shape[0]):
        offset, b = divmod(b_out, n)
        i, j = divmod(offset, block[1])
        out[b_out] = padded[b, :, i :: block[0], j :: block[1]]
    return out


@given(seeds, st.data(), st.sampled_from(FLOATS))
def test_space_to_batch_and_back_match_a_loop(seed, data, dtype):
    block = [data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))]
    pads, spatial = [], []
    for k in range(2):
        before, after = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
        blocks = data.draw(st.integers(1, 3))
        spatial.append(blocks * block[k] - before - after)
        pads.append([before, after])
    if min(spatial) < 1:
        return
    x = np.random.default_rng(seed).standard_normal([data.draw(st.integers(1, 2)), 2] + spatial).astype(dtype)
    (batched,) = run(lambda x: mb.space_to_batch(x=x, block_shape=block, paddings=pads), {"x": x})
    assert_same(batched, loop_space_to_batch(x, block, pads))
    (back,) = run(lambda y: mb.batch_to_space(x=y, block_shape=block, crops=pads), {"y": batched})
    assert_same(back, x)


def test_space_to_batch_and_batch_to_space_match_coremltools_recorded_outputs():
    x = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]], [[[9, 10, 11, 12], [13, 14, 15, 16]]]], np.float32)
    batched = np.array(
        [
            [[[0, 1, 3]]],
            [[[0, 9, 11]]],
            [[[0, 2, 4]]],
            [[[0, 10, 12]]],
            [[[0, 5, 7]]],
            [[[0, 13, 15]]],
            [[[0, 6, 8]]],
            [[[0, 14, 16]]],
        ],
        np.float32,
    )
    (got,) = run(lambda x: mb.space_to_batch(x=x, block_shape=[2, 2], paddings=[[0, 0], [2, 0]]), {"x": x})
    assert_same(got, batched)
    (got,) = run(lambda x: mb.batch_to_space(x=x, block_shape=[2, 2], crops=[[0, 0], [2, 0]]), {"x": batched})
    assert_same(got, x)


# -- band_part, cumsum ------------------------------------------------------------------------


@given(seeds, st.data(), st.sampled_from(NUMERIC + [np.bool_]))
def test_band_part_matches_torch_triu_tril_and_zeroes_nan_outside(seed, data, dtype):
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=2, max_size=4)))
    lower, upper = data.draw(st.integers(-1, 4)), data.draw(st.integers(-1, 4))
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        x = rng.integers(0, 2, shape).astype(np.bool_)
    elif dtype == np.int32:
        x = small_ints(rng, shape, dtype)
    else:
        x = rng.choice(np.array([np.nan, np.inf, -np.inf, -1.5, 2.0], dtype), size=shape)
    want = t(x)
    if lower >= 0:
        want = torch.triu(want, -lower)
    if upper >= 0:
        want = torch.tril(want, upper)
    (got,) = run(lambda x: mb.band_part(x=x, lower=lower, upper=upper), {"x": x})
    assert_same(got, want.numpy())


@given(shapes, seeds, st.data(), st.sampled_from(NUMERIC))
def test_cumsum_matches_torch_with_exclusive_and_reverse(shape, seed, data, dtype):
    axis = data.draw(st.integers(-1, len(shape) - 1))
    exclusive, reverse = data.draw(st.booleans()), data.draw(st.booleans())
    x = small_ints(np.random.default_rng(seed), shape, dtype)
    x_t = t(x).flip(axis) if reverse else t(x)
    total = torch.cumsum(x_t, axis, dtype=x_t.dtype)
    if exclusive:
        total = total - x_t  # exact: small integers
    want = (total.flip(axis) if reverse else total).numpy()
    (got,) = run(lambda x: mb.cumsum(x=x, axis=axis, exclusive=exclusive, reverse=reverse), {"x": x})
    assert_same(got, want)


# -- argsort, topk, non_zero ------------------------------------------------------------------


@given(shapes, seeds, st.data(), st.sampled_from(NUMERIC), st.booleans())
def test_argsort_matches_stable_torch_sort_with_ties(shape, seed, data, dtype, ascending):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = small_ints(np.random.default_rng(seed), shape, dtype, -2, 3)  # many ties
    want = torch.sort(t(x), dim=axis, descending=not ascending, stable=True).indices.numpy().astype(np.int32)
    (got,) = run(lambda x: mb.argsort(x=x, axis=axis, ascending=ascending), {"x": x})
    assert_same(got, want)


@given(shapes, seeds, st.data(), st.sampled_from(NUMERIC + [np.uint8, np.int8, np.uint16]), st.booleans())
def test_topk_matches_stable_torch_sort(shape, seed, data, dtype, ascending):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(1, shape[axis]))
    low = 0 if np.dtype(dtype).kind == "u" else -3
    x = small_ints(np.random.default_rng(seed), shape, dtype, low, low + 250 if dtype == np.uint8 else 4)
    x_t = t(x.astype(np.int32)) if dtype == np.uint16 else t(x)  # torch sorts no uint16
    result = torch.sort(x_t, dim=axis, descending=not ascending, stable=True)
    values = result.values.narrow(axis, 0, k).numpy().astype(dtype)
    indices = result.indices.narrow(axis, 0, k).numpy().astype(np.int32)
    got_values, got_indices = run(lambda x: mb.topk(x=x, k=k, axis=axis, ascending=ascending), {"x": x})
    assert_same(got_values, values)
    assert_same(got_indices, indices)


def test_topk_without_indices_and_with_uint16_indices():
    x = np.array([[3, 1, 2, 3]], np.float32)
    (values,) = run(lambda x: mb.topk(x=x, k=2, return_indices=False), {"x": x})
    assert_same(values, np.array([[3, 3]], np.float32))
    _, indices = run(lambda x: mb.topk(x=x, k=3, ascending=True, output_indices_dtype="uint16"), {"x": x})
    assert_same(indices, np.array([[1, 2, 0]], np.uint16))


@given(shapes, seeds, st.sampled_from(NUMERIC + [np.bool_]))
def test_non_zero_matches_torch_nonzero(shape, seed, dtype):
    x = small_ints(np.random.default_rng(seed), shape, dtype, 0, 2)
    (got,) = run(lambda x: mb.non_zero(x=x), {"x": x})
    assert_same(got, torch.nonzero(t(x)).numpy().astype(np.int32))

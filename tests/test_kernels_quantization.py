"""quantize, dequantize and the constexpr decompression ops through the reference interpreter.

``quantize``/``dequantize`` are compared with PyTorch's quantized tensors, bit-exact: torch
multiplies by ``1 / scale`` in fp32, so the inputs are drawn either with power-of-two scales,
where that is exact, ties included, or at least 0.2 away from a rounding tie; and torch adds the
zero point before rounding where MIL adds it after, so torch rounds ``x / scale`` alone. The constexpr ops
are compared with element-by-element numpy loops written from the MIL definitions, and with
the worked examples of coremltools' docstrings.
"""

from __future__ import annotations

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from hypothesis import given
from hypothesis import strategies as st

from kernel_helpers import run, run_one_op
from mil_passes.reference import evaluate
from mil_passes.reference.kernels import KERNELS

torch = pytest.importorskip("torch", reason="torch is the oracle of these tests")

pytestmark = pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*:UserWarning")

QUANTIZED = {"int8": (np.int8, torch.qint8, -128, 127), "uint8": (np.uint8, torch.quint8, 0, 255)}
SUB_BYTE = {
    "uint1": types.np_uint1_dtype,
    "uint2": types.np_uint2_dtype,
    "uint3": types.np_uint3_dtype,
    "uint4": types.np_uint4_dtype,
    "uint6": types.np_uint6_dtype,
    "uint8": np.dtype(np.uint8),
}


def run_constexpr(build, opset) -> list[np.ndarray]:
    """Evaluate a program without inputs whose outputs are ``build()``'s constexpr values."""
    return run(build, {}, opset)


def per_axis(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A ``[D]`` vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return values.reshape([-1 if i == axis % rank else 1 for i in range(rank)])


# -- quantize / dequantize ---------------------------------------------------------------------


def draw_shape_and_axis(draw) -> tuple[tuple[int, ...], int | None]:
    """A shape of rank 1 to 4 and the axis of its quantization parameters (None: per tensor)."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    return shape, draw(st.none() | st.integers(-rank, rank - 1))


def per_tensor_params(
    scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Without an axis, ``scale`` and ``zero_point`` (drawn as ``[1]``) become scalars."""
    if axis is not None:
        return scale, zero_point
    return scale.reshape(()), None if zero_point is None else zero_point.reshape(())


def quantization_kwargs(scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None) -> dict:
    """``scale``, with ``zero_point`` and ``axis`` where there are."""
    kwargs = {"scale": scale}
    if zero_point is not None:
        kwargs["zero_point"] = zero_point
    if axis is not None:
        kwargs["axis"] = axis
    return kwargs


@st.composite
def quantize_cases(draw):
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    output_dtype = draw(st.sampled_from(sorted(QUANTIZED)))
    np_dtype, _, low, high = QUANTIZED[output_dtype]
    shape, axis = draw_shape_and_axis(draw)
    count = 1 if axis is None else shape[axis]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):  # power-of-two scales: x / scale is exact, ties included
        scale = np.exp2(rng.integers(-6, 3, size=count)).astype(dtype)
        fraction = rng.choice([-0.5, -0.25, 0.0, 0.25, 0.5], size=shape)
    else:  # any scale, x at least 0.2 from a tie (fp16 rounding of x moves it < 0.15)
        scale = rng.uniform(0.01, 2.0, size=count).astype(dtype)
        fraction = rng.uniform(-0.3, 0.3, size=shape)
    zero_point = rng.integers(low, high + 1, size=count).astype(np_dtype) if draw(st.booleans()) else None
    broadcast_scale = scale.astype(np.float64) if axis is None else per_axis(scale, len(shape), axis)
    steps = rng.integers(-300, 301, size=shape)
    x = ((steps + fraction) * broadcast_scale).astype(dtype)
    scale, zero_point = per_tensor_params(scale, zero_point, axis)
    return x, scale, zero_point, axis, output_dtype


@given(case=quantize_cases(), opset=st.sampled_from([ct.target.iOS17, ct.target.iOS18]))
def test_quantize_matches_torch(case, opset):
    x, scale, zero_point, axis, output_dtype = case
    np_dtype, _, low, high = QUANTIZED[output_dtype]
    kwargs = {"output_dtype": output_dtype, **quantization_kwargs(scale, zero_point, axis)}
    out = run_one_op(lambda v: mb.quantize(input=v, **kwargs), x, opset)

    # MIL rounds first and adds the zero point after; torch adds it before rounding (ties move by
    # one when it is odd), so torch rounds x / scale alone (to int32) and the zero point is added here
    source = torch.from_numpy(x.astype(np.float32))
    if axis is None:
        rounded = torch.quantize_per_tensor(source, float(scale), 0, torch.qint32)
        zp = 0 if zero_point is None else int(zero_point)
    else:
        zeros = torch.zeros(scale.shape, dtype=torch.int64)
        rounded = torch.quantize_per_channel(
            source, torch.from_numpy(scale.astype(np.float64)), zeros, axis % x.ndim, torch.qint32
        )
        zp = 0 if zero_point is None else per_axis(zero_point, x.ndim, axis)
    expected = np.clip(rounded.int_repr().numpy().astype(np.int64) + zp, low, high)
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, expected)


def test_quantize_fp16_rounds_the_exact_quotient():
    """6.1484375 / fp16(0.1) = 61.4994: coremltools' value_inference divides in fp16 (61.5) and
    rounds to 62."""
    x = np.array([6.1484375, 6.25, -6.1484375], np.float16)
    out = run_one_op(lambda v: mb.quantize(input=v, scale=np.float16(0.1), output_dtype="int8"), x, ct.target.iOS17)
    np.testing.assert_array_equal(out, np.array([61, 63, -61], np.int8))


def test_quantize_adds_the_zero_point_after_rounding():
    """-0.328125 / 0.03125 = -10.5 rounds to -10 (half to even), then + 67 = 57; rounding
    -10.5 + 67 = 56.5 instead (torch's order) would give 56."""
    x = np.array([-0.328125, 0.328125], np.float32)
    out = run_one_op(
        lambda v: mb.quantize(input=v, scale=np.float32(0.03125), zero_point=np.int8(67), output_dtype="int8"),
        x,
        ct.target.iOS17,
    )
    np.testing.assert_array_equal(out, np.array([57, 77], np.int8))


@pytest.mark.parametrize(("output_dtype", "zero_point"), [("int8", None), ("int8", -128), ("uint8", 0), ("uint8", 200)])
def test_quantize_gives_nan_the_zero_point_so_dequantize_gives_0(output_dtype, zero_point):
    x = np.array([np.nan, -np.nan, 1.0, np.inf], np.float32)
    point = {} if zero_point is None else {"zero_point": np.dtype(output_dtype).type(zero_point)}
    out = run_one_op(
        lambda v: mb.dequantize(
            input=mb.quantize(input=v, scale=np.float32(0.5), output_dtype=output_dtype, **point),
            scale=np.float32(0.5),
            **point,
        ),
        x,
        ct.target.iOS17,
    )
    top = 0.5 * (np.iinfo(output_dtype).max - (zero_point or 0))  # inf clips to the largest value
    np.testing.assert_array_equal(out, np.array([0.0, 0.0, 1.0, top], np.float32))


@st.composite
def dequantize_cases(draw):
    input_dtype = draw(st.sampled_from(sorted(QUANTIZED)))
    np_dtype, torch_dtype, low, high = QUANTIZED[input_dtype]
    out_dtype = draw(st.sampled_from([np.float32, np.float16]))
    shape, axis = draw_shape_and_axis(draw)
    count = 1 if axis is None else shape[axis]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.integers(low, high + 1, size=shape).astype(np_dtype)
    scale = rng.uniform(1e-3, 3.0, size=count).astype(out_dtype)
    zero_point = rng.integers(low, high + 1, size=count).astype(np_dtype) if draw(st.booleans()) else None
    scale, zero_point = per_tensor_params(scale, zero_point, axis)
    return q, scale, zero_point, axis, torch_dtype


@given(case=dequantize_cases(), opset=st.sampled_from([ct.target.iOS17, ct.target.iOS18]))
def test_dequantize_matches_torch(case, opset):
    q, scale, zero_point, axis, torch_dtype = case
    kwargs = quantization_kwargs(scale, zero_point, axis)
    out = run_one_op(lambda v: mb.dequantize(input=v, **kwargs), q, opset)

    zp = np.zeros(scale.shape, np.int64) if zero_point is None else zero_point.astype(np.int64)
    raw = torch.from_numpy(q)
    if axis is None:
        quantized = torch._make_per_tensor_quantized_tensor(raw, float(scale), int(zp))
    else:
        quantized = torch._make_per_channel_quantized_tensor(
            raw, torch.from_numpy(scale.astype(np.float64)), torch.from_numpy(zp), axis % q.ndim
        )
    assert quantized.dtype == torch_dtype
    # (q - zp) * scale is exact in fp32 (9 x 24 bits), so torch's fp32 result rounds once to fp16
    expected = quantized.dequantize().numpy().astype(scale.dtype)
    assert out.dtype == scale.dtype
    np.testing.assert_array_equal(out, expected)


# -- constexpr_affine_dequantize, constexpr_cast -----------------------------------------------


@given(
    data=st.data(),
    opset=st.sampled_from([ct.target.iOS16, ct.target.iOS17, ct.target.iOS18]),
    seed=st.integers(0, 2**32 - 1),
)
def test_constexpr_affine_dequantize(data, opset, seed):
    rng = np.random.default_rng(seed)
    data_dtype = data.draw(st.sampled_from([np.int8, np.uint8]))
    zp_dtype = data.draw(st.sampled_from([data_dtype, np.float32]))
    out_dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    vector = data.draw(st.booleans())
    count = shape[axis] if vector else 1
    info = np.iinfo(data_dtype)
    q = rng.integers(info.min, info.max + 1, size=shape).astype(data_dtype)
    if zp_dtype == np.float32:
        zero_point = rng.uniform(-3, 3, size=count).astype(np.float32)
    else:
        zero_point = rng.integers(info.min, info.max + 1, size=count).astype(data_dtype)
    scale = rng.uniform(1e-3, 3.0, size=count).astype(out_dtype)
    if not vector:
        zero_point, scale = zero_point.reshape(()), scale.reshape(())

    def build():
        return mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zero_point, scale=scale, axis=axis)

    (out,) = run_constexpr(build, opset)
    expected = np.empty(shape, np.float64)
    for index in np.ndindex(*shape):
        channel = index[axis] if vector else ()
        expected[index] = float(scale[channel]) * (float(q[index]) - float(zero_point[channel]))
    assert out.dtype == out_dtype
    np.testing.assert_array_equal(out, expected.astype(out_dtype))


@pytest.mark.parametrize("opset", [ct.target.iOS16, ct.target.iOS18])
def test_constexpr_cast(opset):
    source = np.array([[0.1, -65504.0, 6.1e-8], [np.inf, -0.0, 1.0]], np.float16)
    (out,) = run_constexpr(lambda: mb.constexpr_cast(source_val=source, output_dtype="fp32"), opset)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, torch.from_numpy(source).float().numpy())


# -- LUT and sparse decompression --------------------------------------------------------------


def pack_lsb_first(values, nbits: int) -> np.ndarray:
    """Pack ``nbits``-wide unsigned values into bytes, least significant bit first."""
    bits = [(int(v) >> b) & 1 for v in values for b in range(nbits)]
    packed = bytearray((len(bits) + 7) // 8)
    for position, bit in enumerate(bits):
        packed[position // 8] |= bit << (position % 8)
    return np.frombuffer(bytes(packed), np.uint8).copy()


LUT_DTYPES = [np.int8, np.uint8, np.float16, np.float32]


def random_values(rng, dtype, size) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, size=size).astype(dtype)
    return rng.standard_normal(size).astype(dtype)


@given(
    nbits=st.sampled_from([1, 2, 4, 6, 8]),
    lut_dtype=st.sampled_from(LUT_DTYPES),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_constexpr_lut_to_dense_ios16_packed(nbits, lut_dtype, shape, seed):
    rng = np.random.default_rng(seed)
    lut = random_values(rng, lut_dtype, 2**nbits)
    indices = rng.integers(0, 2**nbits, size=int(np.prod(shape)))
    packed = pack_lsb_first(indices, nbits)
    (out,) = run_constexpr(
        lambda: mb.constexpr_lut_to_dense(indices=packed, lut=lut, shape=np.array(shape, np.uint32)),
        ct.target.iOS16,
    )
    expected = np.array([lut[i] for i in indices], lut_dtype).reshape(shape)
    assert out.dtype == lut_dtype
    np.testing.assert_array_equal(out, expected)


@st.composite
def blocks_of(draw, shape):
    """A number of blocks per axis that divides the axis."""
    return tuple(draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])) for n in shape)


@given(
    data=st.data(),
    index_type=st.sampled_from(sorted(SUB_BYTE)),
    lut_dtype=st.sampled_from(LUT_DTYPES),
    seed=st.integers(0, 2**32 - 1),
)
def test_constexpr_lut_to_dense_ios18(data, index_type, lut_dtype, seed):
    rng = np.random.default_rng(seed)
    nbits = int(index_type[4:])
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    blocks = data.draw(blocks_of(shape))
    vector_size = data.draw(st.sampled_from([1, 1, 2, 3]))
    vector_axis = data.draw(st.integers(-len(shape), len(shape) - 1)) if vector_size > 1 else None
    indices = rng.integers(0, 2**nbits, size=shape).astype(SUB_BYTE[index_type])
    lut = random_values(rng, lut_dtype, blocks + (2**nbits, vector_size))
    kwargs = {} if vector_axis is None else {"vector_axis": vector_axis}
    (out,) = run_constexpr(lambda: mb.constexpr_lut_to_dense(indices=indices, lut=lut, **kwargs), ct.target.iOS18)

    out_shape = list(shape)
    if vector_axis is not None:
        out_shape[vector_axis] *= vector_size
    expected = np.zeros(out_shape, lut_dtype)
    for index in np.ndindex(*shape):
        block = tuple(i // (n // b) for i, n, b in zip(index, shape, blocks))
        vector = lut[block + (int(indices[index]),)]
        for v in range(vector_size):
            target = list(index)
            if vector_axis is not None:
                target[vector_axis] = index[vector_axis] * vector_size + v
            expected[tuple(target)] = vector[v]
    assert out.dtype == lut_dtype
    np.testing.assert_array_equal(out, expected)


@given(
    lut_dtype=st.sampled_from(LUT_DTYPES),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_constexpr_sparse_to_dense_both_forms(lut_dtype, shape, density, seed):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    nonzero = random_values(rng, lut_dtype, int(mask.sum()))
    expected = np.zeros(shape, lut_dtype)
    for position, index in enumerate(zip(*np.nonzero(mask))):  # row-major order
        expected[index] = nonzero[position]

    packed = pack_lsb_first(mask.ravel().astype(int), 1)
    (ios16,) = run_constexpr(
        lambda: mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=packed, shape=np.array(shape, np.uint32)),
        ct.target.iOS16,
    )
    if nonzero.size:  # iOS18 refuses an empty nonzero_data
        (ios18,) = run_constexpr(
            lambda: mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=mask.astype(types.np_uint1_dtype)),
            ct.target.iOS18,
        )
        np.testing.assert_array_equal(ios18, expected)
    assert ios16.dtype == lut_dtype
    np.testing.assert_array_equal(ios16, expected)


# -- blockwise shift-scale ---------------------------------------------------------------------

DATA_DTYPES = {
    "int4": (types.np_int4_dtype, -8, 7),
    "uint4": (types.np_uint4_dtype, 0, 15),
    "int8": (np.dtype(np.int8), -128, 127),
    "uint8": (np.dtype(np.uint8), 0, 255),
    "fp16": (np.dtype(np.float16), None, None),
    "fp32": (np.dtype(np.float32), None, None),
}


def draw_data(rng, name: str, shape) -> np.ndarray:
    dtype, low, high = DATA_DTYPES[name]
    if low is None:
        return (rng.standard_normal(shape) * 8).astype(dtype)
    return rng.integers(low, high + 1, size=shape).astype(dtype)


@given(
    data=st.data(),
    data_type=st.sampled_from(sorted(DATA_DTYPES)),
    scale_dtype=st.sampled_from([np.float16, np.float32]),
    seed=st.integers(0, 2**32 - 1),
)
def test_constexpr_blockwise_shift_scale(data, data_type, scale_dtype, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    blocks = data.draw(blocks_of(shape))
    values = draw_data(rng, data_type, shape)
    scale = rng.uniform(1e-3, 2.0, size=blocks).astype(scale_dtype)
    offset_type = data.draw(st.sampled_from([None, data_type, "fp16", "fp32"]))
    offset = None if offset_type is None else draw_data(rng, offset_type, blocks)
    kwargs = {} if offset is None else {"offset": offset}
    (out,) = run_constexpr(
        lambda: mb.constexpr_blockwise_shift_scale(data=values, scale=scale, **kwargs), ct.target.iOS18
    )

    expected = np.empty(shape, np.float64)
    for index in np.ndindex(*shape):
        block = tuple(i // (n // b) for i, n, b in zip(index, shape, blocks))
        shift = 0.0 if offset is None else float(offset[block])
        expected[index] = float(scale[block]) * (float(values[index]) - shift)
    assert out.dtype == scale_dtype
    np.testing.assert_array_equal(out, expected.astype(scale_dtype))


# -- sparse-to-sparse ops, chained into constexpr_sparse_to_dense (coremltools' docstring examples)

INDICES_MASK = np.array(
    [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 1], [0, 1, 1, 0, 1, 0], [0, 0, 0, 1, 0, 0]], types.np_uint1_dtype
)
INDICES_NONZERO = np.array([0, 1, 1, 0, 1, 1, 0, 0, 1], types.np_uint1_dtype)


def test_constexpr_lut_to_sparse_scalar_palettization():
    lut = np.array([2.0, 3.0], np.float16).reshape(1, 1, 2, 1)

    def build():
        mask, nonzero = mb.constexpr_lut_to_sparse(
            indices_mask=INDICES_MASK, indices_nonzero_data=INDICES_NONZERO, lut=lut
        )
        return mask, nonzero, mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=mask)

    mask, nonzero, dense = run_constexpr(build, ct.target.iOS18)
    np.testing.assert_array_equal(mask, INDICES_MASK)
    np.testing.assert_array_equal(nonzero, np.array([2, 3, 3, 2, 3, 3, 2, 2, 3], np.float16))
    expected = np.zeros((4, 6), np.float16)
    expected[INDICES_MASK != 0] = [2, 3, 3, 2, 3, 3, 2, 2, 3]
    np.testing.assert_array_equal(dense, expected)


def test_constexpr_lut_to_sparse_vector_palettization():
    lut = np.array([[2.0, 2.0], [3.0, 3.0]], np.float16).reshape(1, 1, 2, 2)

    def build():
        mask, nonzero = mb.constexpr_lut_to_sparse(
            indices_mask=INDICES_MASK, indices_nonzero_data=INDICES_NONZERO, lut=lut, vector_axis=0
        )
        return mask, mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=mask)

    mask, dense = run_constexpr(build, ct.target.iOS18)
    expanded = np.repeat(np.asarray(INDICES_MASK), 2, axis=0)
    np.testing.assert_array_equal(mask, expanded)
    expected = np.zeros((8, 6), np.float16)
    rows = [[2, 3, 0, 0, 0, 0], [3, 2, 0, 0, 0, 3], [0, 3, 2, 0, 2, 0], [0, 0, 0, 3, 0, 0]]
    expected[:] = np.repeat(np.array(rows, np.float16), 2, axis=0)
    np.testing.assert_array_equal(dense, expected)


def test_constexpr_sparse_blockwise_shift_scale_per_column():
    data_mask = np.array([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]], types.np_uint1_dtype)
    nonzero = np.array([10, 11, 3, 4, 5, 6, 7, 8, 9], np.uint8)
    scale = np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)
    offset = np.array([[1, 2, 3, 4]], np.uint8)

    def build():
        mask, values = mb.constexpr_sparse_blockwise_shift_scale(
            data_mask=data_mask, nonzero_data=nonzero, scale=scale, offset=offset
        )
        return mask, values, mb.constexpr_sparse_to_dense(nonzero_data=values, mask=mask)

    mask, values, dense = run_constexpr(build, ct.target.iOS18)
    columns = [0, 1, 0, 1, 2, 2, 3, 0, 1]  # column of each nonzero entry, row-major
    expected = [float(scale[0, c]) * (int(v) - int(offset[0, c])) for v, c in zip(nonzero, columns)]
    np.testing.assert_array_equal(mask, data_mask)
    np.testing.assert_array_equal(values, np.array(expected, np.float32))
    np.testing.assert_allclose(values, [0.9, 1.8, 0.2, 0.4, 0.6, 0.9, 1.2, 0.7, 1.4], rtol=1e-6)
    dense_expected = np.zeros((4, 4), np.float32)
    dense_expected[np.asarray(data_mask) != 0] = expected
    np.testing.assert_array_equal(dense, dense_expected)


@given(
    lut_dtype=st.sampled_from(LUT_DTYPES),
    nbits=st.sampled_from([1, 2, 4]),
    vector_size=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**32 - 1),
)
def test_sparse_chain_equals_dense_lut_where_masked(lut_dtype, nbits, vector_size, seed):
    rng = np.random.default_rng(seed)
    shape = (4, 6)
    mask = rng.random(shape) < 0.5
    mask[0, 0] = True
    indices = rng.integers(0, 2**nbits, size=shape)
    lut = random_values(rng, lut_dtype, (2, 1, 2**nbits, vector_size))
    index_dtype = SUB_BYTE[f"uint{nbits}"]
    kwargs = {"vector_axis": 1} if vector_size > 1 else {}

    def build():
        sparse_mask, nonzero = mb.constexpr_lut_to_sparse(
            indices_mask=mask.astype(types.np_uint1_dtype),
            indices_nonzero_data=indices[mask].astype(index_dtype),
            lut=lut,
            **kwargs,
        )
        sparse = mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=sparse_mask)
        dense = mb.constexpr_lut_to_dense(indices=indices.astype(index_dtype), lut=lut, **kwargs)
        return sparse, dense

    sparse, dense = run_constexpr(build, ct.target.iOS18)
    keep = np.repeat(mask, vector_size, axis=1)
    np.testing.assert_array_equal(sparse, np.where(keep, dense, np.zeros_like(dense)))
    assert keep.any() and np.array_equal(sparse[keep], dense[keep])


def test_quantized_ops_feed_a_computation():
    """A dequantized constexpr weight used by a regular op (the common pattern in models)."""
    q = np.array([[-128, 0, 127], [5, -5, 1]], np.int8)
    scale = np.array([0.5, 0.25], np.float32)
    x = np.ones((1, 3), np.float32)

    @mb.program(input_specs=[mb.TensorSpec(x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        weight = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=np.int8(0), scale=scale, axis=0)
        return mb.linear(x=x, weight=weight)

    (out,) = evaluate(prog, {"x": x}).values()
    np.testing.assert_array_equal(out, [[-0.5, 0.25]])


ALL_OPS = [
    "quantize",
    "dequantize",
    "constexpr_affine_dequantize",
    "constexpr_cast",
    "constexpr_lut_to_dense",
    "constexpr_sparse_to_dense",
    "constexpr_blockwise_shift_scale",
    "constexpr_lut_to_sparse",
    "constexpr_sparse_blockwise_shift_scale",
]


def test_every_quantization_op_has_a_kernel():
    assert [op for op in ALL_OPS if op not in KERNELS] == []

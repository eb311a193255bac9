"""The reference kernels' fast paths give the bits of the plain computation they replace: the
fp16 hard-swish product by table, the widened fp16 const weights kept between evaluations, a
short-row depthwise conv by einsum, the fp32 sigmoid_hard and a thresholded_relu without branches."""

from __future__ import annotations

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import program_of, run, run_one_op
from mil_passes.reference import evaluate
from mil_passes.reference import widened
from mil_passes.reference.kernels import activation, conv_pool

ALL_FP16 = np.arange(2**16, dtype=np.uint16).view(np.float16).reshape(256, 256)


@pytest.mark.parametrize("gate_first", [False, True])
def test_hard_swish_product_by_table_has_numpys_bits_on_every_fp16(gate_first):
    """mul(v, sigmoid_hard(v)) in either order, on all 65,536 fp16 values (NaNs and infinities
    too): numpy's fp16 multiply of the interpreter's own sigmoid_hard output, bit for bit."""

    def build(x):
        gate = mb.sigmoid_hard(x=x, alpha=1.0 / 6.0, beta=0.5)
        return [gate, mb.mul(x=gate, y=x) if gate_first else mb.mul(x=x, y=gate)]

    gate, product = run(build, {"x": ALL_FP16})
    with np.errstate(all="ignore"):
        expected = np.multiply(gate, ALL_FP16) if gate_first else np.multiply(ALL_FP16, gate)
    assert product.dtype == np.float16
    assert product.tobytes() == expected.tobytes()


def test_hard_swish_table_only_where_the_gate_is_sigmoid_hard_of_the_other_operand():
    x, y = ALL_FP16, ALL_FP16[::-1].copy()

    def build(x, y):
        gate = mb.sigmoid_hard(x=x, alpha=0.2, beta=0.5)
        return [gate, mb.mul(x=x, y=gate), mb.mul(x=y, y=gate)]

    prog = program_of(build, {"x": x, "y": y})
    gate, fused, other = evaluate(prog, {"x": x, "y": y}).values()
    muls = [op for op in prog.functions["main"].operations if op.op_type == "mul"]
    assert activation.fp16_gated_product(muls[0], x, gate) is not None
    assert activation.fp16_gated_product(muls[1], y, gate) is None  # the gate of another var
    assert activation.fp16_gated_product(muls[0], x.astype(np.float32), gate.astype(np.float32)) is None
    with np.errstate(all="ignore"):
        assert fused.tobytes() == np.multiply(x, gate).tobytes()
        assert other.tobytes() == np.multiply(y, gate).tobytes()


class _Var:
    def __init__(self, op_type: str):
        self.op = type("Producer", (), {"op_type": op_type})()


class _Op:
    def __init__(self, op_type: str):
        self.weight = _Var(op_type)


def test_const_widening_is_kept_while_its_bytes_are_unchanged():
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 128)).astype(np.float16)
    op = _Op("const")
    first = widened.const_as(op, "weight", weight, np.float64)
    assert first.dtype == np.float64 and first.tobytes() == weight.astype(np.float64).tobytes()
    assert not first.flags.writeable
    assert widened.const_as(op, "weight", weight, np.float64) is first
    as_fp32 = widened.const_as(op, "weight", weight, np.float32)
    assert as_fp32.dtype == np.float32 and as_fp32.tobytes() == weight.astype(np.float32).tobytes()
    weight[3, 5] = -weight[3, 5] + 1  # a pass changing the const's array in place
    again = widened.const_as(op, "weight", weight, np.float64)
    assert again is not first and again.tobytes() == weight.astype(np.float64).tobytes()


def test_const_widening_skips_runtime_values_small_arrays_and_fp32():
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((64, 128)).astype(np.float16)
    computed = widened.const_as(_Op("relu"), "weight", weight, np.float64)
    assert computed.flags.writeable and widened.const_as(_Op("relu"), "weight", weight, np.float64) is not computed
    small = weight[:2, :2].copy()
    assert widened.const_as(_Op("const"), "weight", small, np.float64).flags.writeable
    fp32 = weight.astype(np.float32)
    assert widened.const_as(_Op("const"), "weight", fp32, np.float64).flags.writeable


def test_const_widening_entry_goes_with_its_array():
    weight = np.ones((64, 128), np.float16)
    widened.const_as(_Op("const"), "weight", weight, np.float64)
    key = (id(weight), np.dtype(np.float64).str)
    assert key in widened._ENTRIES
    del weight
    assert key not in widened._ENTRIES


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("bias", [None, "negative_zero"])
def test_short_row_depthwise_keeps_the_sign_of_zero(monkeypatch, dtype, bias):
    """Zero inputs against all-negative weights make every product -0: the short-row path (einsum
    channels-last, its -0 bias entries made +0) gives +0 as the plain loop's zero start does, with
    no bias and with a -0 bias."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 9, 9)).astype(dtype)
    x[:, :, 2:7, 2:7] = 0
    x[:, 1] = -0.0
    weight = -np.abs(rng.standard_normal((6, 1, 3, 3))).astype(dtype)
    bias_values = np.array([-0.0, 0.0, -0.0, 1.5, -0.0, -2.0], dtype) if bias else None

    def build(v):
        return mb.conv(x=v, weight=weight, bias=bias_values, groups=6, pad_type="same")

    blocked = run_one_op(build, x)
    monkeypatch.setattr(conv_pool, "LONG_ROWS", 1)  # the plain loop from a zero start
    plain = run_one_op(build, x)
    assert blocked.dtype == plain.dtype == dtype
    assert blocked.tobytes() == plain.tobytes()
    assert not np.signbit(blocked[:, :, 3:6, 3:6][blocked[:, :, 3:6, 3:6] == 0]).any()


def test_depthwise_einsum_order_check_tells_a_different_order():
    """The once-per-process check that einsum adds the taps in tap order: true on this numpy, and
    false for a sum in another order (all products, then numpy's pairwise sum)."""
    assert conv_pool.einsum_sums_in_tap_order()

    def pairwise(x, weight, pads, geometry, bias=None, dtype=np.float64):
        padded = conv_pool._zero_padded(np.asarray(x, np.float64), pads)
        (dh, dw), (oh, ow), (sh, sw) = geometry
        products = [
            weight[:, 0, i, j].reshape(-1, 1, 1) * padded[..., i * dh :: sh, j * dw :: sw][..., :oh, :ow]
            for i in range(weight.shape[2])
            for j in range(weight.shape[3])
        ]
        return np.sum(np.stack(products, -1), -1)

    original = conv_pool._depthwise
    try:
        conv_pool._depthwise = pairwise
        assert not conv_pool.einsum_sums_in_tap_order.__wrapped__()
    finally:
        conv_pool._depthwise = original


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_depthwise_without_the_einsum_order_runs_the_plain_loop(monkeypatch, dtype):
    """Where the check fails, a short-row depthwise conv runs the plain loop: the same bits."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 12, 14, 14)).astype(dtype)
    weight = rng.standard_normal((12, 1, 5, 5)).astype(dtype)
    bias = rng.standard_normal(12).astype(dtype)

    def build(v):
        return mb.conv(x=v, weight=weight, bias=bias, groups=12, strides=[2, 1], pad_type="same")

    fast = run_one_op(build, x)
    monkeypatch.setattr(conv_pool, "einsum_sums_in_tap_order", lambda: False)
    monkeypatch.setattr(conv_pool, "_depthwise", None)  # must not run
    plain = run_one_op(build, x)
    assert fast.dtype == plain.dtype == dtype and fast.tobytes() == plain.tobytes()


def test_fp32_sigmoid_hard_has_the_bits_of_the_float64_formula():
    """The fp32 fast path against rounded.exact of the same formula, on specials, -0, values near
    the clip points and across several blocks."""
    from mil_passes.reference import rounded

    rng = np.random.default_rng(5)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.0, -3.0, 2.9999998, -2.9999998, 1e-45, -1e-45])
    x = np.concatenate([special, rng.standard_normal(3 * rounded.CHUNK) * 4]).astype(np.float32)
    for alpha, beta in ((1.0 / 6.0, 0.5), (0.2, -0.0), (-0.3, 0.0)):
        params = (np.asarray(np.float32(alpha), np.float64), np.asarray(np.float32(beta), np.float64))
        for part in (x, x[:7], x[4]):  # several blocks, one short block, a 0-d array
            expected = rounded.exact(activation._sigmoid_hard, np.float32, part, *params)
            got = activation._fp32_sigmoid_hard(part, *params)
            assert got.shape == np.shape(part) and got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_thresholded_relu_without_branches_has_the_bits_of_where(dtype):
    """thresholded_relu of fp32 and float64 keeps x's bits where x >= alpha and writes +0
    elsewhere (NaN included), as np.where did: -0, infinities, NaN, subnormals, a strided x, a
    0-d x."""
    rng = np.random.default_rng(8)
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, tiny, -tiny, 1.0, -1.0], dtype)
    x = np.concatenate([special, rng.standard_normal(5000).astype(dtype)]).reshape(10, 501)
    for alpha in (0.0, -0.0, 0.5, -1.0, np.inf, -np.inf):
        for part in (x, x[:, ::3], x[3, 4]):
            got = activation.thresholded_relu(None, {"x": part, "alpha": np.asarray(alpha, dtype)})
            expected = np.where(part >= np.asarray(alpha, dtype), part, np.zeros((), dtype))
            assert got.dtype == dtype and got.shape == np.shape(part)
            assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_thresholded_relu_op_has_the_bits_of_where(dtype):
    """The op as the interpreter runs it, fp32 (no branch) and fp16 (by table), on every fp16 value
    (NaNs, infinities, -0 and subnormals among them)."""
    x = ALL_FP16.astype(dtype)
    for alpha in (0.0, -0.0, 0.25, -2.0):
        got = run_one_op(lambda v, a=alpha: mb.thresholded_relu(x=v, alpha=a), x)
        expected = np.where(x >= np.asarray(alpha, dtype), x, np.zeros((), dtype))
        assert got.dtype == dtype and got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("groups", [1, 2])
def test_pointwise_conv_is_the_float64_matmul_plus_bias_rounded_once(dtype, groups):
    """A 1x1 conv (no copies of x) gives the bits of the im2col path: the float64 matmul of the
    widened weight and x, plus the bias in float64, rounded once."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 8, 5, 7)).astype(dtype)
    weight = rng.standard_normal((6, 8 // groups, 1, 1)).astype(dtype)
    bias = rng.standard_normal(6).astype(dtype)
    out = run_one_op(lambda v: mb.conv(x=v, weight=weight, bias=bias, groups=groups), x)
    columns = x.astype(np.float32).astype(np.float64).reshape(2, groups, 8 // groups, 35)
    product = np.matmul(weight.astype(np.float64).reshape(groups, 6 // groups, 8 // groups), columns)
    expected = (product.reshape(2, 6, 5, 7) + bias.astype(np.float64).reshape(-1, 1, 1)).astype(dtype)
    assert out.dtype == dtype and out.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    "x_shape, weight_shape, options",
    [
        ((1, 40, 48, 48), (16, 40, 3, 3), dict(pad_type="same")),  # blocks large enough for BLAS's big-matrix path
        ((2, 6, 13, 9), (4, 3, 3, 2), dict(groups=2, strides=[2, 1], dilations=[1, 2], pad_type="valid")),
        ((1, 4, 7, 6, 5), (6, 4, 2, 3, 2), dict(strides=[1, 2, 1], pad_type="same")),
        ((2, 5, 30), (3, 5, 4), dict(dilations=[3], pad_type="custom", pad=[2, 1])),
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_im2col_a_block_of_rows_at_a_time_gives_the_bits_of_one_matmul(
    monkeypatch, x_shape, weight_shape, options, dtype
):
    """Columns built and multiplied a few output rows at a time (one row, then three per block)
    give the bits of the columns of every row in one matmul: each output sums the same products."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(x_shape).astype(dtype)
    weight = rng.standard_normal(weight_shape).astype(dtype)
    bias = rng.standard_normal(weight_shape[0]).astype(dtype)

    def conv():
        return run_one_op(lambda v: mb.conv(x=v, weight=weight, bias=bias, **options), x)

    whole = conv()
    row_bytes = 8 * x_shape[0] * x_shape[1] * int(np.prod(weight_shape[2:])) * whole[0, 0, 0].size
    monkeypatch.setattr(conv_pool, "COLUMN_BYTES", 0)
    for rows in (1, 3):
        monkeypatch.setattr(conv_pool, "COLUMN_BLOCK_BYTES", rows * row_bytes)
        assert conv_pool._column_rows(row_bytes, whole.shape[2]) == min(rows, whole.shape[2])
        blocked = conv()
        assert blocked.dtype == dtype and blocked.tobytes() == whole.tobytes()


def test_im2col_blocks_only_columns_that_would_not_stay_in_cache():
    row_bytes = 288 * 80 * 8  # a 32-channel 3x3 conv, 80 outputs a row
    assert conv_pool._column_rows(row_bytes, 80) == conv_pool.COLUMN_BLOCK_BYTES // row_bytes
    assert conv_pool._column_rows(row_bytes, 40) == 40  # 7.4 MB of columns: one matmul
    assert conv_pool._column_rows(conv_pool.COLUMN_BLOCK_BYTES * 4, 10) == 1  # a row larger than a block

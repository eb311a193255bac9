"""conv's Winograd path (F(2x2, 3x3), ``conv_pool._winograd``): the bits of im2col where every sum
is exact, the correctly rounded result on random values, the plain path wherever Winograd does not
apply, and its transformed filters kept while the weight's bytes are unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

from kernel_helpers import program_of, run_one_op
from mil_passes.reference import evaluate, widened
from mil_passes.reference.kernels import conv_pool


@pytest.fixture
def winograd_calls(monkeypatch):
    """The convs that ran ``_winograd``, one entry each; small convs run it too (not only where it
    is faster)."""
    monkeypatch.setattr(conv_pool, "WINOGRAD_WORK", 0)
    calls = []
    real = conv_pool._winograd

    def counted(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(conv_pool, "_winograd", counted)
    return calls


def _conv(x, weight, bias, options):
    return run_one_op(lambda v: mb.conv(x=v, weight=weight, bias=bias, **options), x)


def _im2col(monkeypatch, x, weight, bias, options):
    with monkeypatch.context() as patch:
        patch.setattr(conv_pool, "WINOGRAD_CHANNELS", 1 << 30)
        return _conv(x, weight, bias, options)


CASES = [
    ((1, 16, 12, 12), 16, dict(pad_type="same"), True),
    ((2, 20, 9, 7), 24, dict(pad_type="custom", pad=[0, 2, 1, 0]), True),  # a batch; odd outputs; uneven pads
    ((1, 32, 6, 5), 16, dict(pad_type="valid"), False),
    ((1, 16, 3, 3), 17, dict(pad_type="valid"), True),  # one output
    ((1, 17, 8, 10), 16, dict(pad_type="same_lower"), True),
    ((1, 16, 7, 8), 20, dict(pad_type="custom", pad=[2, 3, 3, 2]), True),  # pads past a tile's first row
]


@pytest.mark.parametrize("x_shape, c_out, options, bias", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("block_bytes", [1, None])  # one tile row a block, or the default
def test_winograd_has_the_bits_of_im2col_where_every_sum_is_exact(
    monkeypatch, winograd_calls, x_shape, c_out, options, bias, dtype, block_bytes
):
    """Small integers: every product and sum of either path is exact, so both give the exact sum
    rounded once; a wrong coefficient, tile or block gives other values."""
    rng = np.random.default_rng(11)
    x = rng.integers(-8, 8, x_shape).astype(dtype)
    weight = rng.integers(-8, 8, (c_out, x_shape[1], 3, 3)).astype(dtype)
    shift = rng.integers(-8, 8, c_out).astype(dtype) if bias else None
    if block_bytes is not None:
        monkeypatch.setattr(conv_pool, "WINOGRAD_BLOCK_BYTES", block_bytes)
    got = _conv(x, weight, shift, options)
    assert winograd_calls == [x_shape]
    want = _im2col(monkeypatch, x, weight, shift, options)
    assert got.dtype == dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def _exact(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A 'same' 3x3 conv of fp32 values, each output the correctly rounded float64 sum of its
    (exact) float64 products (``math.fsum``), then rounded to fp32."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # [N, C, H, W, 3, 3]
    n, c, h, w = x.shape
    taps = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * w, c * 9)
    filters = weight.astype(np.float64).reshape(weight.shape[0], c * 9)
    out = np.empty((weight.shape[0], n * h * w))
    for o, row in enumerate(filters):
        products = taps * row
        out[o] = [math.fsum([*terms, float(bias[o])]) for terms in products]
    return out.reshape(-1, n, h, w).transpose(1, 0, 2, 3).astype(np.float32)


@pytest.mark.parametrize("values", ["normal", "relu", "wide"])
def test_winograd_gives_the_correctly_rounded_sum_on_random_values(winograd_calls, values):
    """Each output is the fp32 rounding of its exact sum (observed, as for im2col: a float64 sum
    rounds; on 17.2 million outputs one differed from im2col's, where im2col missed)."""
    rng = np.random.default_rng({"normal": 1, "relu": 2, "wide": 3}[values])
    x = rng.standard_normal((2, 24, 14, 12))
    if values == "relu":
        x = np.maximum(x, 0)
    if values == "wide":
        x *= np.exp2(rng.integers(-12, 13, x.shape))
    x = x.astype(np.float32)
    weight = (rng.standard_normal((20, 24, 3, 3)) * 0.2).astype(np.float32)
    bias = rng.standard_normal(20).astype(np.float32)
    got = _conv(x, weight, bias, dict(pad_type="same"))
    assert winograd_calls == [x.shape]
    assert got.tobytes() == _exact(x, weight, bias).tobytes()


@pytest.mark.parametrize(
    "x_shape, weight_shape, options",
    [
        ((1, 16, 9, 9), (16, 16, 3, 3), dict(strides=[2, 2])),
        ((1, 16, 9, 9), (16, 16, 3, 3), dict(dilations=[2, 2])),
        ((1, 32, 9, 9), (32, 16, 3, 3), dict(groups=2)),
        ((1, 15, 9, 9), (16, 15, 3, 3), {}),  # too few channels in
        ((1, 16, 9, 9), (15, 16, 3, 3), {}),  # too few out
        ((1, 16, 9, 9), (16, 16, 3, 2), {}),
        ((1, 16, 9), (16, 16, 3), {}),
        ((1, 16, 5, 5, 5), (16, 16, 3, 3, 3), {}),
    ],
)
def test_winograd_only_for_2d_3x3_stride_1_single_group_convs(winograd_calls, x_shape, weight_shape, options):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(x_shape).astype(np.float32)
    weight = rng.standard_normal(weight_shape).astype(np.float32)
    _conv(x, weight, None, dict(pad_type="valid", **options))
    assert winograd_calls == []


@pytest.mark.parametrize(
    "c_in, c_out, size, runs",
    [
        (32, 32, 24, True),  # 144 tiles times 32 channels
        (32, 32, 16, False),  # 64 tiles times 32: too few outputs for the transforms' costs
        (16, 128, 32, True),  # 256 times 16, and 2,048 filters
        (256, 128, 24, False),  # 32,768 filters: their transforms would not stay in cache
        (256, 64, 24, True),  # 16,384
        (128, 128, 24, True),
    ],
)
def test_winograd_where_it_is_faster(monkeypatch, c_in, c_out, size, runs):
    calls = []
    real = conv_pool._winograd
    monkeypatch.setattr(conv_pool, "_winograd", lambda *args: calls.append(1) or real(*args))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, c_in, size, size)).astype(np.float32)
    weight = rng.standard_normal((c_out, c_in, 3, 3)).astype(np.float32)
    _conv(x, weight, None, dict(pad_type="same"))
    assert calls == ([1] if runs else [])


@pytest.mark.parametrize("where", ["x", "weight"])
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_winograd_leaves_non_finite_values_to_im2col(monkeypatch, winograd_calls, where, value):
    """A transform adds a tile's values, so an infinity would meet another where the plain sum has
    one: a conv with a non-finite value in x or the weight is im2col's, NaNs included."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    weight = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    (x if where == "x" else weight)[0, 3, 2, 1] = value
    with np.errstate(invalid="ignore"):  # inf times 0 in BLAS
        got = _conv(x, weight, None, dict(pad_type="same"))
        want = _im2col(monkeypatch, x, weight, None, dict(pad_type="same"))
    assert winograd_calls == []
    assert got.tobytes() == want.tobytes()


def test_winograd_filters_are_kept_while_the_weights_bytes_are_unchanged(monkeypatch):
    monkeypatch.setattr(widened, "DERIVED_BYTES", 1 << 40)  # room, whatever other tests keep
    monkeypatch.setattr(conv_pool, "WINOGRAD_WORK", 0)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
    weight = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)  # large enough to be kept
    prog = program_of(lambda x: mb.conv(x=x, weight=weight, pad_type="same"), {"x": x})
    made = []
    real = conv_pool._winograd_filters
    monkeypatch.setattr(conv_pool, "_winograd_filters", lambda w: made.append(1) or real(w))
    first = evaluate(prog, {"x": x})
    assert evaluate(prog, {"x": x})[next(iter(first))].tobytes() == next(iter(first.values())).tobytes()
    assert len(made) == 1
    (conv,) = [op for op in prog.functions["main"].operations if op.op_type == "conv"]
    kept_weight = conv.weight.val
    kept_weight[2, 5, 1, 1] += 1.0  # a pass changing the const's array in place
    changed = next(iter(evaluate(prog, {"x": x}).values()))
    assert len(made) == 2
    fresh = run_one_op(lambda v: mb.conv(x=v, weight=kept_weight.copy(), pad_type="same"), x)
    assert changed.tobytes() == fresh.tobytes() and changed.tobytes() != next(iter(first.values())).tobytes()


def test_winograd_filters_are_not_kept_beyond_their_budget(monkeypatch):
    """Filters that would not fit are made each time, with the same bits."""
    monkeypatch.setattr(widened, "DERIVED_BYTES", widened._used["derived"])
    monkeypatch.setattr(conv_pool, "WINOGRAD_WORK", 0)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
    weight = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    prog = program_of(lambda x: mb.conv(x=x, weight=weight, pad_type="same"), {"x": x})
    made = []
    real = conv_pool._winograd_filters
    monkeypatch.setattr(conv_pool, "_winograd_filters", lambda w: made.append(1) or real(w))
    first, again = (next(iter(evaluate(prog, {"x": x}).values())) for _ in range(2))
    assert len(made) == 2 and first.tobytes() == again.tobytes()


def test_kept_filters_are_made_again_for_a_weight_reshaped_in_place(monkeypatch):
    """A weight's array given another shape in place holds another value, though its bytes are the same."""
    monkeypatch.setattr(widened, "DERIVED_BYTES", 1 << 40)
    op = type("Op", (), {"weight": type("Var", (), {"op": type("Const", (), {"op_type": "const"})()})()})()
    weight = np.random.default_rng(12).standard_normal((32, 64, 3, 3)).astype(np.float32)
    first = widened.kept(op, "weight", weight, "winograd", 16 * 32 * 64 * 8, conv_pool._winograd_filters)
    assert widened.kept(op, "weight", weight, "winograd", 16 * 32 * 64 * 8, conv_pool._winograd_filters) is first
    weight.shape = (64, 32, 3, 3)
    again = widened.kept(op, "weight", weight, "winograd", 16 * 32 * 64 * 8, conv_pool._winograd_filters)
    assert again.shape == (16, 1, 64, 32) and again.tobytes() == conv_pool._winograd_filters(weight).tobytes()

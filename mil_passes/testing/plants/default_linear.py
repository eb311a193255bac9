"""DEFAULT plants of matmul, linear, convolution and normalization fusions
(``optimize_linear.py``, ``optimize_conv.py``, ``optimize_normalization.py``,
``fuse_elementwise_to_batchnorm``, ``expand_dynamic_linear``)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .default_activation import dtype_np
from .default_base import float_dtype, near, runtime, runtime_of_rank, scalar
from ..programs.grower import Grower
from ..programs.recipe import Ref


def _weights(g: Grower, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Small finite weights (drawn values may be huge or non-finite; fused weights would overflow)."""
    rng = np.random.default_rng(g.draw(st.integers(0, 2**16)))
    return (rng.standard_normal(shape) * 0.5).astype(dtype_np(dtype))


def plant_matmul_bias(g: Grower) -> list[Ref]:
    """``matmul(x, W) + b`` or ``b - matmul(W^T..)``, W and b const (``fuse_matmul_weight_bias``);
    or ``linear(x, W, b) + c`` (``fuse_linear_bias``); the look-alike: a run-time bias."""
    dtype = float_dtype(g)
    rows, inner, columns = (g.draw(st.integers(1, 4)) for _ in range(3))
    x = runtime(g, (rows, inner), dtype)
    if g.draw(st.booleans()):
        product = g.emit(
            "linear", {"x": x, "weight": _weights(g, dtype, (columns, inner)), "bias": _weights(g, dtype, (columns,))}
        )[0]
    else:
        transpose_y = g.draw(st.booleans())
        weight = _weights(g, dtype, (columns, inner) if transpose_y else (inner, columns))
        product = g.emit(
            "matmul", {"x": x, "y": weight, "transpose_x": np.bool_(False), "transpose_y": np.bool_(transpose_y)}
        )[0]
    bias: object = _weights(g, dtype, (columns,))
    if g.chance(5):
        bias = runtime(g, (columns,), dtype)
    op = g.choose(("add", "sub"))
    args = {"x": product, "y": bias} if g.draw(st.booleans()) else {"x": bias, "y": product}
    return g.emit(op, args)


def plant_dynamic_linear(g: Grower) -> list[Ref]:
    """``linear`` whose weight (or bias) is computed from consts, not a const op: the pass makes it
    a ``matmul`` (``expand_dynamic_linear``)."""
    dtype = float_dtype(g)
    rows, inner, columns = (g.draw(st.integers(1, 4)) for _ in range(3))
    x = runtime(g, (rows, inner), dtype)
    weight = g.emit("transpose", {"x": _weights(g, dtype, (inner, columns)), "perm": g.ints([1, 0])})[0]
    args: dict = {"x": x, "weight": weight}
    if g.draw(st.booleans()):
        args["bias"] = _weights(g, dtype, (columns,))
    return g.emit("linear", args)


def _conv(g: Grower, dtype: str, x: Ref, channels: int, rank: int, out_channels: int, bias: bool) -> Ref:
    weight = _weights(g, dtype, (out_channels, channels, *([g.draw(st.integers(1, 2))] * (rank - 2))))
    args: dict = {"x": x, "weight": weight, "pad_type": "same"}
    if bias:
        args["bias"] = _weights(g, dtype, (out_channels,))
    return g.emit("conv", args)[0]


def _conv_input(g: Grower, dtype: str, rank: int) -> tuple[Ref, int]:
    channels = g.draw(st.integers(1, 3))
    spatial = tuple(g.draw(st.integers(1, 4)) for _ in range(rank - 2))
    return runtime(g, (1, channels, *spatial), dtype), channels


CONV_EPILOGUES = ("add", "sub", "mul", "mul", "real_div", "batch_norm", "transposed_add")


def plant_conv_epilogue(g: Grower, kinds: tuple[str, ...] = CONV_EPILOGUES) -> list[Ref]:
    """``conv`` then a const ``add``/``sub`` (bias), ``mul``/``real_div`` (scale) or ``batch_norm``,
    now and then through a ``transpose`` (bias) or a ``conv_transpose`` (scale, bias); the
    look-alikes: a per-element const, a run-time scale. ``kinds``: the epilogues drawn from."""
    dtype = float_dtype(g)
    rank = g.choose((3, 4))
    x, channels = _conv_input(g, dtype, rank)
    out_channels = g.draw(st.integers(1, 3))
    bias = g.draw(st.booleans())
    if g.chance(5):
        weight = _weights(g, dtype, (channels, out_channels, *([2] * (rank - 2))))
        conv = g.emit("conv_transpose", {"x": x, "weight": weight})[0]
    else:
        conv = _conv(g, dtype, x, channels, rank, out_channels, bias)
    per_channel = (1, out_channels) + (1,) * (rank - 2)
    kind = g.choose(kinds)
    if kind == "batch_norm":
        stats = {name: _weights(g, dtype, (out_channels,)) for name in ("mean", "gamma", "beta")}
        variance = np.abs(_weights(g, dtype, (out_channels,))) + np.asarray(0.5, dtype_np(dtype))
        return g.emit("batch_norm", {"x": conv, "variance": variance, "epsilon": scalar(dtype, 1e-5), **stats})
    if kind == "transposed_add":
        perm = list(range(rank))[::-1]
        moved = g.emit("transpose", {"x": conv, "perm": g.ints(perm)})[0]
        return g.emit("add", {"x": moved, "y": _weights(g, dtype, (out_channels,))})
    shape = per_channel if g.draw(st.integers(0, 3)) else per_channel[1:]
    const = _weights(g, dtype, shape if not g.chance(6) else tuple(int(d) for d in g.var(conv).shape))
    if kind == "real_div":
        const = np.where(np.abs(const) < 0.1, np.asarray(0.5, const.dtype), const)
    args = {"x": conv, "y": const} if g.draw(st.booleans()) else {"x": const, "y": conv}
    return g.emit(kind, args)


def plant_pad_conv(g: Grower, kinds: tuple[str, ...] = ("pad", "conv")) -> list[Ref]:
    """``pad -> transpose -> conv`` (``fuse_pad_conv``) or ``pad -> pad`` (``merge_consecutive_paddings``),
    constant or reflect; the look-alike: two constant pads of different values on one axis.
    ``kinds``: what follows the first pad (``"pad"``, ``"conv"``), drawn from."""
    dtype = float_dtype(g)
    x, channels = _conv_input(g, dtype, 4)
    mode = g.choose(("constant", "constant", "reflect", "replicate"))
    shape = [int(d) for d in g.var(x).shape]

    def pads() -> list[int]:
        amounts = [0, 0, 0, 0, *(g.draw(st.integers(0, 1)) for _ in range(4))]
        if mode != "constant":
            amounts[4:6] = [min(a, shape[2] - 1) for a in amounts[4:6]]
            amounts[6:8] = [min(a, shape[3] - 1) for a in amounts[6:8]]
        return amounts

    first = g.emit("pad", {"x": x, "pad": g.ints(pads()), "mode": mode, "constant_val": scalar(dtype, 0.0)})[0]
    if g.choose(kinds) == "pad":
        value = 0.0 if not g.chance(4) else 1.0
        shape = [int(d) for d in g.var(first).shape]
        return g.emit("pad", {"x": first, "pad": g.ints(pads()), "mode": mode, "constant_val": scalar(dtype, value)})
    moved = g.emit("transpose", {"x": first, "perm": g.ints([0, 1, 3, 2])})[0]
    return [_conv(g, dtype, moved, channels, 4, g.draw(st.integers(1, 3)), g.draw(st.booleans()))]


def plant_conv1d_as_2d(g: Grower) -> list[Ref]:
    """``squeeze(conv(expand_dims(x, -2)), -2)``, a conv1d written as a conv2d (``compose_conv1d``)."""
    dtype = float_dtype(g)
    x, channels = _conv_input(g, dtype, 3)
    axis = g.choose((-2, 2))
    wide = g.emit("expand_dims", {"x": x, "axes": g.ints([axis])})[0]
    out_channels = g.draw(st.integers(1, 3))
    width = int(g.var(x).shape[2])
    weight = _weights(g, dtype, (out_channels, channels, 1, g.draw(st.integers(1, width))))
    conv = g.emit("conv", {"x": wide, "weight": weight, "pad_type": "valid"})[0]
    return g.emit("squeeze", {"x": conv, "axes": g.ints([g.choose((-2, 2))])})


def plant_layer_norm(g: Grower) -> list[Ref]:
    """``gamma * (x - mean) * rsqrt(var + eps) + beta`` written as the pass's pattern 1, over the
    last axes (layer_norm) or, on rank 4, axes [2, 3] (instance_norm); the look-alike: a
    non-scalar epsilon or a different axis for the variance."""
    dtype = "fp32" if g.draw(st.integers(0, 3)) else "fp16"
    rank = g.draw(st.integers(2, 4))
    sides = [g.draw(st.integers(1, 4)) for _ in range(rank - 1)] + [g.draw(st.integers(2, 4))]
    x = runtime(g, tuple(sides), dtype)  # at least 2 values normalized: a variance of 0 cancels in fp16
    shape = [int(d) for d in g.var(x).shape]
    count = g.draw(st.integers(1, min(2, rank - 1)))
    axes = list(range(-count, 0))
    wrong = g.chance(6)
    mean = g.emit("reduce_mean", {"x": x, "axes": g.ints(axes), "keep_dims": np.bool_(True)})[0]
    centred = g.emit("sub", {"x": x, "y": mean})[0]
    square = g.emit("square", {"x": centred})[0]
    var_axes = [-1] if wrong and count > 1 else axes
    variance = g.emit("reduce_mean", {"x": square, "axes": g.ints(var_axes), "keep_dims": np.bool_(True)})[0]
    shifted = g.emit("add", {"x": variance, "y": scalar(dtype, 1e-5)})[0]
    inverse = g.emit("rsqrt", {"x": shifted})[0]
    gamma = np.abs(_weights(g, dtype, tuple(shape[-count:]))) + np.asarray(0.5, dtype_np(dtype))
    beta = _weights(g, dtype, tuple(shape[-count:]))
    scale = g.emit("mul", {"x": inverse, "y": gamma})[0]
    mean_scaled = g.emit("mul", {"x": mean, "y": scale})[0]
    x_scaled = g.emit("mul", {"x": x, "y": scale})[0]
    shift = g.emit("sub", {"x": beta, "y": mean_scaled})[0]
    return g.emit("add", {"x": x_scaled, "y": shift})


def plant_affine_to_batchnorm(g: Grower) -> list[Ref]:
    """``x * c + d`` on a rank-4 ``x`` with ``c, d`` of shape ``(1, C, 1, 1)`` or ``(C, 1, 1)``
    (``fuse_elementwise_to_batchnorm``); the look-alike: a ``(1, 1, 1, W)`` const."""
    dtype = float_dtype(g)
    x, channels = _conv_input(g, dtype, 4)
    shape = (1, channels, 1, 1) if g.draw(st.booleans()) else (channels, 1, 1)
    if g.chance(5):
        shape = (1, 1, 1, int(g.var(x).shape[3]))
    scaled = g.emit("mul", {"x": x, "y": _weights(g, dtype, shape)})[0]
    return g.emit("add", {"x": scaled, "y": _weights(g, dtype, shape)})


def plant_transpose_matmul(g: Grower) -> list[Ref]:
    """``matmul(transpose(x), y)`` with the last two axes swapped (``fuse_transpose_matmul``); the
    look-alike swaps other axes."""
    dtype = float_dtype(g)
    rank = g.draw(st.integers(2, 3))
    x = runtime_of_rank(g, rank, dtype)
    shape = [int(d) for d in g.var(x).shape]
    perm = list(range(rank))
    if rank == 3 and g.chance(4):
        perm[0], perm[1] = perm[1], perm[0]
    else:
        perm[-1], perm[-2] = perm[-2], perm[-1]
    moved = g.emit("transpose", {"x": x, "perm": g.ints(perm)})[0]
    inner = shape[perm[-1]]
    y: object = _weights(g, dtype, (inner, g.draw(st.integers(1, 3))))
    if g.draw(st.booleans()):
        other = runtime(g, (g.draw(st.integers(1, 3)), inner), dtype)
        y = g.emit("transpose", {"x": other, "perm": g.ints([1, 0])})[0]
    return g.emit("matmul", {"x": moved, "y": y})


def plant_onehot_matmul(g: Grower) -> list[Ref]:
    """``matmul(one_hot(i, depth, axis=-1, 1, 0), W)`` (``fuse_onehot_matmul_to_gather``); the
    look-alike: on_value 2."""
    dtype = "fp32"
    depth = g.draw(st.integers(2, 5))
    indices = runtime(g, (g.draw(st.integers(1, 4)),), "int32")
    bounded = g.emit(
        "maximum", {"x": g.emit("minimum", {"x": indices, "y": scalar("int32", depth - 1)})[0], "y": scalar("int32", 0)}
    )[0]
    on_value = near(1.0, g, 1.0)
    hot = g.emit(
        "one_hot",
        {
            "indices": bounded,
            "one_hot_vector_size": scalar("int32", depth),
            "axis": scalar("int32", -1),
            "on_value": scalar(dtype, on_value),
            "off_value": scalar(dtype, 0.0),
        },
    )[0]
    return g.emit("matmul", {"x": hot, "y": _weights(g, dtype, (depth, g.draw(st.integers(1, 3))))})


def plant_dilated_conv(g: Grower) -> list[Ref]:
    """``batch_to_space(conv(space_to_batch(x, [d, d])), [d, d])``, TensorFlow's dilated conv
    (``fuse_dilated_conv``), without padding and crops; the look-alike: block shapes that differ."""
    dtype = float_dtype(g)
    d = g.draw(st.integers(2, 3))
    kernel = (g.draw(st.integers(1, 2)), g.draw(st.integers(1, 2)))
    sides = [d * g.draw(st.integers(max(kernel), 2)) for _ in range(2)]
    channels = g.draw(st.integers(1, 2))
    x = runtime(g, (1, channels, *sides), dtype)
    zeros = g.ints([[0, 0], [0, 0]])
    spread = g.emit("space_to_batch", {"x": x, "block_shape": g.ints([d, d]), "paddings": zeros})[0]
    weight = _weights(g, dtype, (g.draw(st.integers(1, 2)), channels, *kernel))
    conv = g.emit("conv", {"x": spread, "weight": weight, "pad_type": "valid"})[0]
    back = [d, d] if g.draw(st.integers(0, 4)) else [d, 1]
    out = [int(s) for s in g.var(conv).shape]
    if back == [d, 1] and out[0] % d:
        back = [d, d]
    return g.emit("batch_to_space", {"x": conv, "block_shape": g.ints(back), "crops": zeros})

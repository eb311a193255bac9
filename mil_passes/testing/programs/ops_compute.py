"""Op-table entries whose arguments take arithmetic to draw: ``conv`` and ``matmul``."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .grower import FLOAT, MAX_ELEMENTS, Grower, dtype_of, is_static, numel, shape_of
from .recipe import Ref

MAX_CHANNELS = 8


def conv_input(g: Grower, var) -> bool:
    """fp16/fp32 with static dims: rank 3 or 4 with at most 8 channels is taken as it is,
    anything else is first reshaped to ``[1, C, L]``."""
    shape = shape_of(var)
    return (
        dtype_of(var) in FLOAT
        and len(shape) >= 1
        and all(is_static(d) for d in shape[1:])
        and (len(shape) in (3, 4) and shape[1] <= MAX_CHANNELS or all(is_static(d) for d in shape))
    )


def _as_conv_input(g: Grower, x: Ref) -> Ref:
    shape = shape_of(g.var(x))
    if len(shape) in (3, 4) and shape[1] <= MAX_CHANNELS:
        return x
    size = int(np.prod(shape, dtype=np.int64))
    channels = g.choose([c for c in range(1, MAX_CHANNELS + 1) if size % c == 0])
    return g.emit("reshape", {"x": x, "shape": g.ints([1, channels, size // channels])})[0]


def _spatial(g: Grower, size: int, pad_type: str) -> tuple[int, int, int, list[int]] | None:
    """``(kernel, stride, dilation, pads)`` for one spatial dim, or None if none fits."""
    kernel = g.draw(st.integers(1, min(3, size + 2)))
    stride = g.draw(st.integers(1, 2))
    dilation = g.draw(st.integers(1, 2))
    pads = [g.draw(st.integers(0, 1)), g.draw(st.integers(0, 1))] if pad_type == "custom" else [0, 0]
    reach = (kernel - 1) * dilation + 1
    if pad_type != "same" and size + sum(pads) < reach:
        return None
    return kernel, stride, dilation, pads


def add_conv(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    x = _as_conv_input(g, x)
    xv = g.var(x)
    shape = shape_of(xv)
    channels, spatial = int(shape[1]), [int(d) for d in shape[2:]]
    groups = g.choose([k for k in range(1, channels + 1) if channels % k == 0])
    out_channels = groups * g.draw(st.integers(1, max(1, MAX_CHANNELS // groups)))
    pad_type = g.choose(("valid", "same", "custom"))
    drawn = [_spatial(g, size, pad_type) for size in spatial]
    dims = [d for d in drawn if d is not None]
    if len(dims) != len(drawn):
        return None
    out = [
        -(-size // s) if pad_type == "same" else (size + sum(p) - ((k - 1) * dil + 1)) // s + 1
        for size, (k, s, dil, p) in zip(spatial, dims)
    ]
    if numel((shape[0], out_channels, *out)) > MAX_ELEMENTS:
        return None
    dtype = dtype_of(xv)
    weight = g.const(dtype, (out_channels, channels // groups, *[d[0] for d in dims]))
    args = {
        "x": x,
        "weight": weight,
        "strides": g.ints([d[1] for d in dims]),
        "pad_type": pad_type,
        "dilations": g.ints([d[2] for d in dims]),
        "groups": g.ints(groups),
    }
    if pad_type == "custom":
        args["pad"] = g.ints([p for d in dims for p in d[3]])
    if g.draw(st.booleans()):
        args["bias"] = g.const(dtype, (out_channels,))
    return g.emit("conv", args)


def add_matmul(g: Grower, op_type: str, x: Ref) -> list[Ref] | None:
    """``x @ const`` (maybe transposed) or ``x @ x^T``."""
    xv = g.var(x)
    shape = shape_of(xv)
    if len(shape) >= 2 and g.chance(3):
        if numel((*shape[:-1], shape[-2])) > MAX_ELEMENTS:
            return None
        return g.emit("matmul", {"x": x, "y": x, "transpose_y": np.bool_(True)})
    inner = shape[-1]
    if not is_static(inner):
        return None
    columns = g.draw(st.integers(1, 4))
    if numel((*shape[:-1], columns)) > MAX_ELEMENTS:
        return None
    transpose_y = g.draw(st.booleans())
    y = g.const(dtype_of(xv), (columns, int(inner)) if transpose_y else (int(inner), columns))
    args = {"x": x, "y": y, "transpose_x": np.bool_(False), "transpose_y": np.bool_(transpose_y)}
    return g.emit("matmul", args)

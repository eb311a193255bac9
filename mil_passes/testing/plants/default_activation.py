"""DEFAULT plants of activations and elementwise fusions (``optimize_activation.py``,
``optimize_elementwise_binary.py``, ``fuse_reduce_mean``, ``optimize_repeat_ops.py``'s relus).

Each plant writes the subgraph the pass matches, and now and then a look-alike the pass must
leave alone (a constant a little off, a consumer of the wrong type); it returns the refs to keep.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from .default_base import float_dtype, float_runtime, near, runtime, runtime_of_rank, scalar
from ..programs.grower import Grower
from ..programs.recipe import Ref


def plant_gelu_exact(g: Grower) -> list[Ref]:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` in the pass's three orders."""
    dtype, x = float_runtime(g, (1, 3))
    if g.draw(st.booleans()):
        scaled = g.emit("real_div", {"x": x, "y": scalar(dtype, near(math.sqrt(2), g, 0.5))})[0]
    else:
        scaled = g.emit("mul", {"x": x, "y": scalar(dtype, 2**-0.5)})[0]
    erf = g.emit("erf", {"x": scaled})[0]
    one = g.emit("add", {"x": erf, "y": scalar(dtype, 1.0)})[0]
    half = scalar(dtype, near(0.5, g, 1.0))
    order = g.draw(st.integers(0, 2))
    if order == 0:
        halved = g.emit("mul", {"x": one, "y": half})[0]
        return g.emit("mul", {"x": halved, "y": x})
    if order == 1:
        product = g.emit("mul", {"x": x, "y": one})[0]
        return g.emit("mul", {"x": product, "y": half})
    halved_x = g.emit("mul", {"x": half, "y": x})[0]
    return g.emit("mul", {"x": one, "y": halved_x})


def plant_gelu_tanh(g: Grower) -> list[Ref]:
    """``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``, both of the pass's orders."""
    dtype, x = float_runtime(g, (1, 3))
    first_half = g.draw(st.booleans())
    half = scalar(dtype, 0.5)
    halved_x = g.emit("mul", {"x": x, "y": half})[0] if first_half else None
    cube = g.emit("pow", {"x": x, "y": scalar(dtype, near(3.0, g, -1.0))})[0]
    weighted = g.emit("mul", {"x": cube, "y": scalar(dtype, 0.044715)})[0]
    inner = g.emit("add", {"x": x, "y": weighted})[0]
    scaled = g.emit("mul", {"x": inner, "y": scalar(dtype, math.sqrt(2 / math.pi))})[0]
    tanh = g.emit("tanh", {"x": scaled})[0]
    one = g.emit("add", {"x": tanh, "y": scalar(dtype, 1.0)})[0]
    if halved_x is not None:
        return g.emit("mul", {"x": halved_x, "y": one})
    halved = g.emit("mul", {"x": one, "y": half})[0]
    return g.emit("mul", {"x": halved, "y": x})


def plant_leaky_relu(g: Grower) -> list[Ref]:
    """``maximum(mul(x, alpha), x)``; alpha in [0, 1] fuses, alpha 1.5 or -0.2 must stay."""
    dtype, x = float_runtime(g, (1, 4))
    alpha = g.choose((0.1, 0.2, 0.0, 1.0, 0.3, 1.5, -0.2))
    scaled = g.emit("mul", {"x": scalar(dtype, alpha), "y": x} if g.chance(3) else {"x": x, "y": scalar(dtype, alpha)})[
        0
    ]
    pair = (scaled, x) if g.draw(st.booleans()) else (x, scaled)
    return g.emit("maximum", {"x": pair[0], "y": pair[1]})


def plant_prelu(g: Grower) -> list[Ref]:
    """``relu(x) + a * relu(-x)`` on a rank-4 ``x`` with ``a`` per channel (the same for every
    channel half the time), now and then behind a channel-last transpose."""
    dtype = float_dtype(g)
    channels = g.draw(st.integers(1, 4))
    shape = (1, channels, g.draw(st.integers(1, 3)), g.draw(st.integers(1, 3)))
    x = runtime(g, shape, dtype)
    uniform = g.draw(st.booleans())
    alpha = np.full(channels, 0.25) if uniform else np.linspace(0.1, 0.9, channels)
    last = g.chance(3)
    if last:
        x = g.emit("transpose", {"x": x, "perm": g.ints([0, 2, 3, 1])})[0]
        a_shape: tuple[int, ...] = (1, 1, 1, channels)
    else:
        a_shape = (1, channels, 1, 1) if g.draw(st.booleans()) else (channels, 1, 1)
    positive = g.emit("relu", {"x": x})[0]
    negated = g.emit("mul", {"x": x, "y": scalar(dtype, near(-1.0, g, 2.0))})[0]
    negative = g.emit("relu", {"x": negated})[0]
    scaled = g.emit("mul", {"x": negative, "y": (-alpha).reshape(a_shape).astype(dtype_np(dtype))})[0]
    return g.emit("add", {"x": positive, "y": scaled})


def plant_prelu_op(g: Grower) -> list[Ref]:
    """``prelu`` itself, with one alpha for every channel three times in four (``prelu_to_lrelu``)."""
    dtype = float_dtype(g)
    channels = g.draw(st.integers(1, 4))
    x = runtime(g, (1, channels, g.draw(st.integers(1, 3)), g.draw(st.integers(1, 3))), dtype)
    alpha = np.linspace(0.1, 0.9, channels) if g.chance(4) else np.full(channels, g.choose((0.25, 0.0, 1.5)))
    return g.emit("prelu", {"x": x, "alpha": alpha.astype(dtype_np(dtype))})


def dtype_np(dtype: str) -> type:
    return np.float16 if dtype == "fp16" else np.float32


def plant_relu_chain(g: Grower) -> list[Ref]:
    """``relu(relu(x))`` (sometimes three); the look-alike has the first relu read elsewhere too."""
    dtype, x = float_runtime(g, (1, 3))
    first = g.emit("relu", {"x": x})[0]
    out = g.emit("relu", {"x": first})[0]
    if g.chance(3):
        out = g.emit("relu", {"x": out})[0]
    keep = [out]
    if g.chance(4):
        keep.append(first)
    return keep


def plant_reduce_mean(g: Grower) -> list[Ref]:
    """``reduce_sum(x, axes) * (1 / count)`` or ``/ count``; a wrong count must stay."""
    dtype = float_dtype(g)
    rank = g.draw(st.integers(1, 3))
    x = runtime_of_rank(g, rank, dtype)
    shape = [int(d) for d in g.var(x).shape]
    axes = g.subset(range(rank), 1, rank)
    count = int(np.prod([shape[a] for a in axes]))
    if g.chance(4):
        count += 1
    total = g.emit("reduce_sum", {"x": x, "axes": g.ints(axes), "keep_dims": np.bool_(g.draw(st.booleans()))})[0]
    if g.draw(st.booleans()):
        return g.emit("real_div", {"x": total, "y": scalar(dtype, count)})
    return g.emit("mul", {"x": total, "y": scalar(dtype, 1.0 / count)})


def plant_rank0_binary(g: Grower) -> list[Ref]:
    """A rank-0 ``sub``/``add``/``mul`` of a run-time scalar and a const, then ``expand_dims(axes=[0])``;
    sometimes the binary op has another reader too."""
    dtype = g.choose(("fp32", "int32"))
    s = runtime(g, (), dtype)
    op = g.choose(("sub", "add", "mul", "real_div" if dtype == "fp32" else "maximum"))
    value = scalar(dtype, g.draw(st.integers(1, 5)))
    args = {"x": s, "y": value} if g.draw(st.booleans()) else {"x": value, "y": s}
    result = g.emit(op, args)[0]
    keep = g.emit("expand_dims", {"x": result, "axes": g.ints([-1] if g.chance(4) else [0])})
    if g.chance(3):
        keep += g.emit("add", {"x": result, "y": scalar(dtype, 1)})
    return keep


def plant_divide(g: Grower) -> list[Ref]:
    """``real_div(x, const)``; the look-alikes: a const numerator, an int division."""
    dtype, x = float_runtime(g, (0, 2))
    divisor = g.choose((2.0, 3.0, -0.5, 0.1, 1e-3, 0.0))
    if g.chance(4):
        return g.emit("real_div", {"x": scalar(dtype, divisor), "y": x})
    return g.emit("real_div", {"x": x, "y": scalar(dtype, divisor)})


def plant_select(g: Grower) -> list[Ref]:
    """``select`` with a const condition: one value everywhere (picks a or b), or a mixed one with
    an infinite ``a`` (becomes ``add``); the look-alike: a finite mixed-case ``a``."""
    dtype = float_dtype(g)
    rank = g.draw(st.integers(1, 3))
    b = runtime_of_rank(g, rank, dtype)
    shape = tuple(int(d) for d in g.var(b).shape)
    kind = g.choose(("uniform", "scalar", "inf", "finite"))
    if kind in ("uniform", "scalar"):
        value = g.draw(st.booleans())
        cond = np.asarray(value) if kind == "scalar" else np.full(shape, value)
        a: object = runtime(g, shape, dtype)
    else:
        cond = np.arange(int(np.prod(shape))).reshape(shape) % 2 == 0
        a = np.full(shape, g.choose((np.inf, -np.inf)) if kind == "inf" else 2.5, dtype=dtype_np(dtype))
    args = {"cond": cond, "a": a, "b": b}
    if g.chance(3) and kind in ("inf", "finite"):
        args = {"cond": cond, "a": b, "b": a}
    return g.emit("select", args)

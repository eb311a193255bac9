"""DEFAULT plants of activation quantization (``optimize_quantization.py``): ``quantize`` and
``dequantize`` around float ops, as coremltools writes a quantized model (iOS17)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .default_base import runtime, runtime_of_rank, scalar
from ..programs.grower import Grower
from ..programs.recipe import Ref


def _params(g: Grower, zero_point_dtype: str | None = None) -> tuple[str, dict]:
    """An output dtype and ``scale``/``zero_point`` (a scalar, or None half the time)."""
    dtype = zero_point_dtype or g.choose(("int8", "uint8"))
    args: dict = {"scale": scalar("fp32", g.choose((0.5, 0.25, 0.1, 2.0)))}
    if g.draw(st.booleans()):
        zero_points = (0, -128, 3) if dtype == "int8" else (0, 128, 3)
        args["zero_point"] = np.asarray(g.choose(zero_points), dtype=np.int8 if dtype == "int8" else np.uint8)
    return dtype, args


def _quantized(g: Grower, rank: int | None = None) -> tuple[Ref, str, dict]:
    """``quantize`` of a run-time float var; its dtype and parameters."""
    x = runtime_of_rank(g, rank or g.draw(st.integers(1, 3)), "fp32")
    dtype, params = _params(g)
    return g.emit("quantize", {"input": x, "output_dtype": dtype, **params})[0], dtype, params


ROUND_TRIPS = ("dq", "qdq", "reshape", "reshape")


def plant_quantize_round_trip(g: Grower, kinds: tuple[str, ...] = ROUND_TRIPS) -> list[Ref]:
    """``dequantize(quantize(x))`` with zero point 0 or ±128 (``nullify_redundant_quantization_zero_point``),
    ``quantize(dequantize(q))`` with the same or other parameters
    (``dequantize_quantize_pair_elimination``), or ``quantize(reshape(dequantize(q)))``
    (``int_op_canonicalization``). ``kinds``: the round trips drawn from."""
    q, dtype, params = _quantized(g)
    kind = g.choose(kinds)
    if kind == "dq":
        return g.emit("dequantize", {"input": q, **params})
    real = g.emit("dequantize", {"input": q, **params})[0]
    if kind == "reshape":
        real = g.emit("reshape", {"x": real, "shape": g.ints([-1])})[0]
    again_dtype, again = (
        (dtype, params) if g.draw(st.booleans()) else _params(g, g.choose((dtype, dtype, "int8", "uint8")))
    )
    keep = g.emit("quantize", {"input": real, "output_dtype": again_dtype, **again})
    if g.chance(4):
        keep += g.emit("relu", {"x": real})  # the dequantize has another reader
    return keep


def plant_quantized_add(g: Grower) -> list[Ref]:
    """``quantize(add(dequantize(a), dequantize(b)))`` (``distributive_quantized_binary_op_scale_normalization``)."""
    a, dtype, params_a = _quantized(g, 2)
    shape = tuple(int(d) for d in g.var(a).shape)
    b_real = runtime(g, shape, "fp32")
    b_dtype, params_b = _params(g, dtype)
    b = g.emit("quantize", {"input": b_real, "output_dtype": b_dtype, **params_b})[0]
    x = g.emit("dequantize", {"input": a, **params_a})[0]
    y = g.emit("dequantize", {"input": b, **params_b})[0]
    total = g.emit(g.choose(("add", "sub")), {"x": x, "y": y})[0]
    return g.emit("quantize", {"input": total, "output_dtype": dtype, **_params(g, dtype)[1]})


def plant_const_dequantize(g: Grower) -> list[Ref]:
    """``dequantize`` of a const (``dequantize_to_constexpr``), or ``constexpr_affine_dequantize``
    followed by ``transpose``/``reshape``/``expand_dims`` (``merge_affine_dequantize_with_consecutive_ops``),
    read by a run-time op."""
    shape = (g.draw(st.integers(1, 3)), g.draw(st.integers(1, 4)))
    data = np.arange(int(np.prod(shape)), dtype=np.int8).reshape(shape) - 3
    scale, zero_point = np.float32(g.choose((0.5, 0.25))), np.int8(g.choose((0, 1)))
    if g.draw(st.booleans()):
        real = g.emit("dequantize", {"input": data, "scale": scale, "zero_point": zero_point})[0]
    else:
        real = g.emit(
            "constexpr_affine_dequantize",
            {"quantized_data": data, "scale": scale, "zero_point": zero_point, "axis": np.int32(0)},
        )[0]
        for _ in range(g.draw(st.integers(1, 2))):
            shape_now = [int(d) for d in g.var(real).shape]
            kind = g.choose(("transpose", "reshape", "expand_dims"))
            if kind == "transpose":
                real = g.emit("transpose", {"x": real, "perm": g.ints(list(range(len(shape_now)))[::-1])})[0]
            elif kind == "reshape":
                real = g.emit("reshape", {"x": real, "shape": g.ints([int(np.prod(shape_now))])})[0]
            else:
                real = g.emit("expand_dims", {"x": real, "axes": g.ints([0])})[0]
    final = tuple(int(d) for d in g.var(real).shape)
    return g.emit("add", {"x": real, "y": runtime(g, final, "fp32")})

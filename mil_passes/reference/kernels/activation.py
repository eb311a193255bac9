"""Activation kernels (``defs/iOS15/activation.py`` and the iOS17 variants), computed in float64.

Each kernel computes from the exact values of its inputs in float64 and the interpreter rounds
once to the declared dtype, so fp16 results are the nearest fp16 of the exact function (up to
float64 noise), not the product of a chain of fp16 roundings.

Kernels exist where coremltools' ``value_inference`` is missing or wrong (measured on fp32 and
fp16 inputs against float64 math; ulps of the output dtype):

- missing: ``silu``;
- tails flushed or overflowed in fp16: ``sigmoid`` (0 for x < -11), ``softplus`` (0 for
  x < -7.7, and 0 for x < -16.7 in fp32), ``softplus_parametric`` (inf once beta * x > 11),
  ``gelu`` TANH / SIGMOID_APPROXIMATION (up to 1,600 ulps; ``1 + tanh`` cancels);
- rounded in the input dtype at each step: ``elu`` (``exp(x) - 1``: 5e5 ulps near 0 in fp32),
  ``sigmoid_hard`` (1,000 ulps) and ``linear_activation`` (110 ulps) near 0 with fp16
  parameters, ``scaled_tanh`` and ``softsign`` (1.6 ulps);
- ``thresholded_relu`` writes its zeros into the input array itself, corrupting every other
  reader of ``x``;
- ``clamped_relu`` returns ``2 * beta`` for ``x >= 0`` when ``beta < 0`` (it adds two clipped
  halves that both clip to ``beta``).

``relu6``, ``leaky_relu`` and ``prelu`` keep coremltools' ``value_inference``: it is correctly
rounded for fp32 and fp16 (one multiplication at most). ``relu`` computes the same formula,
``np.maximum(x, 0)``, by table for fp16 (numpy's fp16 ``maximum`` converts each element).
``softmax`` is a core kernel.

The transcendental parts go through ``rounded.py``: an element whose float64 value is near an
fp16/fp32 rounding boundary is recomputed with libm, so results do not depend on numpy's CPU
dispatch; parameter-free activations of fp16 inputs are a 65,536-entry table.
"""

from __future__ import annotations

import importlib
import math
from functools import lru_cache

import numpy as np
from coremltools.converters.mil.mil import types

from .. import bitwise, rounded
from . import kernel, out_dtype

try:  # the ufunc np.clip calls (numpy 2; numpy 1.x: numpy.core)
    _umath = importlib.import_module("numpy._core.umath")
except ImportError:
    _umath = importlib.import_module("numpy.core.umath")
_clip = _umath.clip

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _wide(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _param(args: dict, name: str, rank: int, per_channel: bool = False) -> np.ndarray:
    """A scalar parameter, or a ``[C]`` vector laid along axis 1 of a rank-``rank`` tensor."""
    value = _wide(args[name])
    if per_channel and value.ndim == 1:
        return value.reshape((1, -1) + (1,) * (rank - 2))
    return value


def sigmoid_of(x: np.ndarray, fn=rounded.NUMPY) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow for either sign of ``x`` (``fn``: where exp comes from)."""
    z = fn.exp(-np.abs(x))
    return bitwise.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def softplus_of(x: np.ndarray, fn=rounded.NUMPY) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow or flushing the negative tail."""
    return np.maximum(x, 0.0) + fn.log1p(fn.exp(-np.abs(x)))


def _gelu_exact(fn, x: np.ndarray) -> np.ndarray:
    """``0.5 x (1 + erf(x / sqrt 2))``, as ``0.5 x erfc(-x / sqrt 2)`` to keep the negative tail."""
    return 0.5 * x * fn.erfc(-x / math.sqrt(2.0))


def _cube(fn, x: np.ndarray) -> np.ndarray:
    """``x**3`` in float64: two multiplications in numpy's pass (``power`` costs ~40x more), and
    numpy's ``power`` where libm settles an element near a rounding boundary. The two differ by an
    ulp of float64 at most, far inside ``rounded.MARGIN``, so the rounded result is the same."""
    return x * x * x if fn is rounded.NUMPY else x**3


def _gelu_tanh(fn, x: np.ndarray) -> np.ndarray:
    """``0.5 x (1 + tanh(z))``, as ``x sigmoid(2 z)`` (the same function) to keep the negative tail."""
    return x * sigmoid_of(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * _cube(fn, x)), fn)


def _gelu_sigmoid(fn, x: np.ndarray) -> np.ndarray:
    return x * sigmoid_of(1.702 * x, fn)


_GELU: dict[str, rounded.Formula] = {
    "EXACT": _gelu_exact,
    "TANH_APPROXIMATION": _gelu_tanh,
    "SIGMOID_APPROXIMATION": _gelu_sigmoid,
}


def _sigmoid(fn, x):
    return sigmoid_of(x, fn)


def _silu(fn, x):
    return x * sigmoid_of(x, fn)


def _softplus(fn, x):
    return softplus_of(x, fn)


def _of_x(op, formula: rounded.Formula, x) -> np.ndarray:
    """A parameter-free activation of ``x``: by table for fp16 (rounded.fp16_table), else in float64
    settled for and rounded to the declared output dtype."""
    x = np.asarray(x)
    if x.dtype == np.float16 and out_dtype(op) == np.float16:
        return rounded.fp16_table(formula).take(x.view(np.uint16))
    return rounded.rounded(formula, out_dtype(op), x)


def _exact_of_x(op, formula: rounded.Formula, x, *params) -> np.ndarray:
    """An activation of IEEE arithmetic only (``rounded.exact``) in float64, rounded once to the
    declared dtype; an fp16 ``x`` with scalar parameters reads a 65,536-entry table of the same
    formula, one per parameter set."""
    x = np.asarray(x)
    dtype = out_dtype(op)
    if x.dtype == np.float16 and dtype == np.float16 and all(np.ndim(p) == 0 for p in params):
        return _fp16_exact_table(formula, tuple(float(p) for p in params)).take(x.view(np.uint16))
    return rounded.exact(formula, dtype, x, *params)


@lru_cache(maxsize=256)
def _fp16_exact_table(formula: rounded.Formula, params: tuple[float, ...]) -> np.ndarray:
    table = rounded.exact(formula, np.float16, rounded.ALL_FP16, *params)
    table.flags.writeable = False
    return table


@kernel("gelu")
def gelu(op, args):
    mode = args.get("mode") or "EXACT"
    if mode not in _GELU:
        raise ValueError(f"op '{op.name}' (gelu): unknown mode '{mode}', expected one of {sorted(_GELU)}")
    return _of_x(op, _GELU[mode], args["x"])


@kernel("sigmoid")
def sigmoid(op, args):
    return _of_x(op, _sigmoid, args["x"])


@kernel("silu")
def silu(op, args):
    return _of_x(op, _silu, args["x"])


@kernel("softplus")
def softplus(op, args):
    return _of_x(op, _softplus, args["x"])


def _softplus_parametric(fn, x, alpha, beta):
    return alpha * softplus_of(beta * x, fn)


@kernel("softplus_parametric")
def softplus_parametric(op, args):
    x = _wide(args["x"])
    alpha = _param(args, "alpha", x.ndim, per_channel=True)
    beta = _param(args, "beta", x.ndim, per_channel=True)
    return rounded.rounded(_softplus_parametric, out_dtype(op), x, alpha, beta)


@kernel("softsign")
def softsign(op, args):
    x = _wide(args["x"])
    return x / (1.0 + np.abs(x))


def _elu(fn, x, alpha):
    return np.where(x > 0, x, alpha * fn.expm1(np.minimum(x, 0.0)))


@kernel("elu")
def elu(op, args):
    x = _wide(args["x"])
    return rounded.rounded(_elu, out_dtype(op), x, _param(args, "alpha", x.ndim))


@kernel("linear_activation")
def linear_activation(op, args):
    x = _wide(args["x"])
    return _param(args, "alpha", x.ndim) * x + _param(args, "beta", x.ndim)


def _scaled_tanh(fn, x, alpha, beta):
    return alpha * fn.tanh(beta * x)


@kernel("scaled_tanh")
def scaled_tanh(op, args):
    x = _wide(args["x"])
    alpha, beta = _param(args, "alpha", x.ndim), _param(args, "beta", x.ndim)
    return rounded.rounded(_scaled_tanh, out_dtype(op), x, alpha, beta)


def _sigmoid_hard(fn, x, alpha, beta):
    return np.clip(alpha * x + beta, 0.0, 1.0)


@kernel("sigmoid_hard")
def sigmoid_hard(op, args):
    x = np.asarray(args["x"])
    alpha, beta = _param(args, "alpha", x.ndim), _param(args, "beta", x.ndim)
    if x.dtype == np.float32 and out_dtype(op) == np.float32 and alpha.ndim == 0 and beta.ndim == 0:
        return _fp32_sigmoid_hard(x, alpha, beta)
    return _exact_of_x(op, _sigmoid_hard, x, alpha, beta)


def _fp32_sigmoid_hard(x: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """:func:`_sigmoid_hard` of an fp32 ``x`` as ``rounded.exact`` computes it (float64, a block at
    a time, rounded once), in place in one float64 buffer reused for every block: ``x`` widened
    into it (exact), then multiplied, added and clipped there (numpy's ``clip`` ufunc, what
    ``np.clip`` calls, without its Python wrapper)."""
    result = np.empty(x.shape, np.float32)
    flat, written = x.reshape(-1), result.reshape(-1)
    buffer = np.empty(min(flat.size, rounded.CHUNK))
    alpha, beta = np.float64(alpha), np.float64(beta)
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, rounded.CHUNK):
            block = buffer[: min(rounded.CHUNK, flat.size - start)]
            np.copyto(block, flat[start : start + block.size])
            np.multiply(block, alpha, out=block)
            np.add(block, beta, out=block)
            _clip(block, 0.0, 1.0, out=block)
            written[start : start + block.size] = block
    return result


@kernel("clamped_relu")
def clamped_relu(op, args):
    x = _wide(args["x"])
    alpha, beta = _param(args, "alpha", x.ndim), _param(args, "beta", x.ndim)
    return np.minimum(np.where(x >= 0, x, alpha * x), beta)


def _thresholded_relu(fn, x, alpha):
    return np.where(x >= alpha, x, 0.0)


@kernel("thresholded_relu")
def thresholded_relu(op, args):
    """``x`` where ``x >= alpha``, else 0. The comparison is exact in any common float dtype (each
    widens to the other exactly), so fp32 runs in place; fp16 by table."""
    x, alpha = np.asarray(args["x"]), np.asarray(args["alpha"])
    if x.dtype == np.float16:
        return _exact_of_x(op, _thresholded_relu, x, _wide(alpha))
    if x.dtype in (np.float32, np.float64):
        return bitwise.kept(x, np.greater_equal(x, alpha))  # np.where mispredicts on mixed signs
    return np.where(x >= alpha, x, np.zeros((), x.dtype))


@kernel("relu")
def relu(op, args):
    """coremltools' ``value_inference`` formula, ``np.maximum(x, 0)``; fp16 reads a table of it."""
    x = np.asarray(args["x"])
    if x.dtype == np.float16:
        return _fp16_relu_table().take(x.view(np.uint16))
    return np.maximum(x, 0)


@lru_cache(maxsize=None)
def _fp16_relu_table() -> np.ndarray:
    table = np.maximum(rounded.ALL_FP16, 0)
    table.flags.writeable = False
    return table


def fp16_gated_product(op, x, y) -> np.ndarray | None:
    """``mul`` of an fp16 ``v`` and ``sigmoid_hard(v)`` (hard swish, as coremltools converts it),
    in either order, by one table read: the table holds numpy's fp16 product of each of the 65,536
    fp16 values and its ``sigmoid_hard`` (the table that kernel reads), the same bits as the two
    ops one after the other (numpy's fp16 ``multiply`` converts each element: ~4 ns). None when
    ``op`` is not such a product."""
    if not (
        type(x) is np.ndarray
        and type(y) is np.ndarray
        and x.dtype == np.float16
        and y.dtype == np.float16
        and x.shape == y.shape
        and out_dtype(op) == np.float16
    ):
        return None
    for gate, other, gate_first in ((op.y, op.x, False), (op.x, op.y, True)):
        params = _sigmoid_hard_gate(gate, other)
        if params is not None:
            table = _fp16_gated_table(params, gate_first)
            return table.take((y if gate_first else x).view(np.uint16))
    return None


def _sigmoid_hard_gate(gate, other) -> tuple[float, float] | None:
    """(alpha, beta) when var ``gate`` is ``sigmoid_hard`` of var ``other`` with scalar const
    parameters, fp16 in and out (where that kernel reads its table); else None."""
    producer = getattr(gate, "op", None)
    if producer is None or producer.op_type != "sigmoid_hard" or producer.x is not other:
        return None
    params = []
    for name in ("alpha", "beta"):
        var = getattr(producer, name, None)
        if var is None or var.op is None or var.op.op_type != "const":
            return None
        value = var.val
        if value is None or np.ndim(value) != 0:
            return None
        params.append(float(np.asarray(value, dtype=np.dtype(types.nptype_from_builtin(var.dtype)))))
    if out_dtype(producer) != np.float16 or np.dtype(types.nptype_from_builtin(other.dtype)) != np.float16:
        return None
    return params[0], params[1]


@lru_cache(maxsize=64)
def _fp16_gated_table(params: tuple[float, float], gate_first: bool) -> np.ndarray:
    gate = _fp16_exact_table(_sigmoid_hard, params)
    with np.errstate(all="ignore"):
        table = np.multiply(gate, rounded.ALL_FP16) if gate_first else np.multiply(rounded.ALL_FP16, gate)
    table.flags.writeable = False
    return table

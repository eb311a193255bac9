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

``relu``, ``relu6``, ``leaky_relu`` and ``prelu`` keep coremltools' ``value_inference``: it is
correctly rounded for fp32 and fp16 (one multiplication at most).
``softmax`` is a core kernel.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from . import kernel

_erfc = np.vectorize(math.erfc, otypes=[np.float64])

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _wide(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _param(args: dict, name: str, rank: int, per_channel: bool = False) -> np.ndarray:
    """A scalar parameter, or a ``[C]`` vector laid along axis 1 of a rank-``rank`` tensor."""
    value = _wide(args[name])
    if per_channel and value.ndim == 1:
        return value.reshape((1, -1) + (1,) * (rank - 2))
    return value


def sigmoid_of(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` without overflow for either sign of ``x``."""
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def softplus_of(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow or flushing the negative tail."""
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _gelu_exact(x: np.ndarray) -> np.ndarray:
    """``0.5 x (1 + erf(x / sqrt 2))``, as ``0.5 x erfc(-x / sqrt 2)`` to keep the negative tail."""
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """``0.5 x (1 + tanh(z))``, as ``x sigmoid(2 z)`` (the same function) to keep the negative tail."""
    return x * sigmoid_of(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x**3))


_GELU: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "EXACT": _gelu_exact,
    "TANH_APPROXIMATION": _gelu_tanh,
    "SIGMOID_APPROXIMATION": lambda x: x * sigmoid_of(1.702 * x),
}


@kernel("gelu")
def gelu(op, args):
    mode = args.get("mode") or "EXACT"
    if mode not in _GELU:
        raise ValueError(f"op '{op.name}' (gelu): unknown mode '{mode}', expected one of {sorted(_GELU)}")
    return _GELU[mode](_wide(args["x"]))


@kernel("sigmoid")
def sigmoid(op, args):
    return sigmoid_of(_wide(args["x"]))


@kernel("silu")
def silu(op, args):
    x = _wide(args["x"])
    return x * sigmoid_of(x)


@kernel("softplus")
def softplus(op, args):
    return softplus_of(_wide(args["x"]))


@kernel("softplus_parametric")
def softplus_parametric(op, args):
    x = _wide(args["x"])
    alpha = _param(args, "alpha", x.ndim, per_channel=True)
    beta = _param(args, "beta", x.ndim, per_channel=True)
    return alpha * softplus_of(beta * x)


@kernel("softsign")
def softsign(op, args):
    x = _wide(args["x"])
    return x / (1.0 + np.abs(x))


@kernel("elu")
def elu(op, args):
    x = _wide(args["x"])
    alpha = _param(args, "alpha", x.ndim)
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


@kernel("linear_activation")
def linear_activation(op, args):
    x = _wide(args["x"])
    return _param(args, "alpha", x.ndim) * x + _param(args, "beta", x.ndim)


@kernel("scaled_tanh")
def scaled_tanh(op, args):
    x = _wide(args["x"])
    return _param(args, "alpha", x.ndim) * np.tanh(_param(args, "beta", x.ndim) * x)


@kernel("sigmoid_hard")
def sigmoid_hard(op, args):
    x = _wide(args["x"])
    return np.clip(_param(args, "alpha", x.ndim) * x + _param(args, "beta", x.ndim), 0.0, 1.0)


@kernel("clamped_relu")
def clamped_relu(op, args):
    x = _wide(args["x"])
    alpha, beta = _param(args, "alpha", x.ndim), _param(args, "beta", x.ndim)
    return np.minimum(np.where(x >= 0, x, alpha * x), beta)


@kernel("thresholded_relu")
def thresholded_relu(op, args):
    x = np.asarray(args["x"])
    return np.where(_wide(x) >= _wide(args["alpha"]), x, np.zeros_like(x))

"""Normalization kernels (``defs/iOS15/normalization.py``, iOS17 variants), computed in float64.

coremltools has no ``value_inference`` for ``batch_norm``, ``instance_norm`` and
``local_response_norm``; its ``l2_norm`` and ``layer_norm`` ones square and sum in the input's
dtype, so fp16 inputs overflow (``l2_norm`` of values ~300 gives 0) or lose ~2,000 ulps
(``layer_norm``). Here every statistic is taken in float64 from the exact inputs, and the
interpreter rounds once to the declared dtype. Variances are biased (divided by the count).
"""

from __future__ import annotations

import numpy as np

from . import kernel

LRN_CHANNEL_AXIS = -3


def _wide(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _scalar(args: dict, name: str, default: float) -> float:
    value = args.get(name)
    return default if value is None else float(np.asarray(value))


def _per_channel(value, rank: int, default: float) -> np.ndarray | float:
    """A ``[C]`` parameter laid along the channel axis of a rank-``rank`` tensor."""
    if value is None:
        return default
    return _wide(value).reshape((1, -1) + (1,) * (rank - 2))


def _standardize(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    variance = np.mean(np.square(centered), axis=axes, keepdims=True)
    return centered / np.sqrt(variance + epsilon)


def _scale_and_shift_channels(normalized: np.ndarray, args: dict) -> np.ndarray:
    """``gamma * normalized + beta`` with the op's optional ``[C]`` gamma (1) and beta (0)."""
    gamma = _per_channel(args.get("gamma"), normalized.ndim, 1.0)
    beta = _per_channel(args.get("beta"), normalized.ndim, 0.0)
    return normalized * gamma + beta


@kernel("batch_norm")
def batch_norm(op, args):
    """``gamma * (x - mean) / sqrt(variance + epsilon) + beta`` per channel (axis 1)."""
    x = _wide(args["x"])
    rank = x.ndim
    mean = _per_channel(args["mean"], rank, 0.0)
    variance = _per_channel(args["variance"], rank, 1.0)
    normalized = (x - mean) / np.sqrt(variance + _scalar(args, "epsilon", 1e-5))
    return _scale_and_shift_channels(normalized, args)


@kernel("instance_norm")
def instance_norm(op, args):
    """Standardize each ``[n, c]`` slice over the spatial axes, then scale and shift per channel."""
    x = _wide(args["x"])
    normalized = _standardize(x, tuple(range(2, x.ndim)), _scalar(args, "epsilon", 1e-5))
    return _scale_and_shift_channels(normalized, args)


@kernel("layer_norm")
def layer_norm(op, args):
    """Standardize over ``axes``; ``gamma``/``beta`` have the shape of ``x`` on those axes."""
    x = _wide(args["x"])
    rank = x.ndim
    axes_arg = args.get("axes")
    axes = range(rank) if axes_arg is None else (int(a) for a in np.asarray(axes_arg).reshape(-1))
    axes = tuple(sorted({a + rank if a < 0 else a for a in axes}))
    normalized = _standardize(x, axes, _scalar(args, "epsilon", 1e-5))
    param_shape = tuple(x.shape[i] if i in axes else 1 for i in range(rank))
    if args.get("gamma") is not None:
        normalized = normalized * _wide(args["gamma"]).reshape(param_shape)
    if args.get("beta") is not None:
        normalized = normalized + _wide(args["beta"]).reshape(param_shape)
    return normalized


@kernel("l2_norm")
def l2_norm(op, args):
    """``x / sqrt(sum(x^2) + epsilon)`` over the last three axes; leading axes are batch."""
    x = _wide(args["x"])
    square_sum = np.sum(np.square(x), axis=(-3, -2, -1), keepdims=True)
    return x / np.sqrt(square_sum + _scalar(args, "epsilon", 1e-6))


@kernel("local_response_norm")
def local_response_norm(op, args):
    """``x / (k + alpha / size * sum(x_j^2))^beta`` over a window of ``size`` channels.

    Channels are axis -3 and every axis before it is batch, as in Core ML's LRN layer ("for
    ranks greater than 3, the leading dimensions ... are all treated as batch"); coremltools'
    own rank-3 test expects exactly that (its only channel is axis 0). The window of channel
    ``c`` is ``[c - (size - 1) // 2, c + size // 2]``, zero-padded: ONNX's and Caffe's placement.
    Odd sizes are centred, so every convention agrees; for even sizes no Core ML output was
    available to check it against (PyTorch puts the extra channel before ``c`` instead).
    """
    x = _wide(args["x"])
    size = int(np.asarray(args["size"]))
    alpha = _scalar(args, "alpha", 1e-4)
    beta = _scalar(args, "beta", 0.75)
    k = _scalar(args, "k", 1.0)
    squares = np.moveaxis(np.square(x), LRN_CHANNEL_AXIS, -1)
    channels = squares.shape[-1]
    before, after = (size - 1) // 2, size // 2
    padded = np.pad(squares, [(0, 0)] * (squares.ndim - 1) + [(before, after)])
    window_sum = sum(padded[..., offset : offset + channels] for offset in range(size))
    window_sum = np.moveaxis(window_sum, -1, LRN_CHANNEL_AXIS)
    return x / np.power(k + alpha / size * window_sum, beta)

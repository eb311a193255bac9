"""Core kernels: elementwise math, comparisons, logic, casts and data movement.

coremltools' own ``value_inference`` covers many of these but drops bool and fp16 in places
(``slice_by_index`` with ``squeeze_mask`` raises on bool, for example), so the ops every pass
touches are written here once, exactly as MIL defines them.
"""

from __future__ import annotations

import math

import numpy as np
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ... import semantics
from .. import rounded
from . import kernel, out_dtype
from .activation import fp16_gated_product
from ..fp16_matmul import matmul_fp16_t
from ..widened import cached_as


def opset_of(op) -> int:
    """The iOS version of the op's opset (15 for the iOS15 definitions, 17 for iOS17, …)."""
    return int(op.opset_version.name.removeprefix("iOS"))


def _int(value) -> int:
    return int(np.asarray(value))


def _ints(value) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _bools(value, rank: int) -> list[bool]:
    if value is None:
        return [False] * rank
    return [bool(v) for v in np.asarray(value).reshape(-1)]


def _axis(axis, rank: int) -> int:
    axis = _int(axis)
    return axis + rank if axis < 0 else axis


# -- elementwise binary -----------------------------------------------------------------------


def _safe_pow(x, y):
    """Floats: rounded once from float64 (rounded.py; numpy's fp32 power loops differ by CPU)."""
    dtype = np.result_type(x, y)
    if np.issubdtype(dtype, np.integer) and np.any(np.asarray(y) < 0):
        return np.power(np.asarray(x, np.float64), np.asarray(y, np.float64))
    if dtype in rounded.ROUNDED_DTYPES:
        return rounded.rounded(lambda fn, base, exponent: fn.pow(base, exponent), dtype, x, y)
    return np.power(x, y)


def _true_div(x, y):
    if np.issubdtype(np.result_type(x, y), np.integer):
        return np.asarray(x, np.float64) / np.asarray(y, np.float64)
    return np.true_divide(x, y)


_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "real_div": _true_div,
    "floor_div": np.floor_divide,
    "mod": np.mod,
    "pow": _safe_pow,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}


@kernel(*_BINARY)
def binary(op, args):
    if op.op_type == "mul":
        gated = fp16_gated_product(op, args["x"], args["y"])
        if gated is not None:
            return gated
    with np.errstate(all="ignore"):
        return _BINARY[op.op_type](args["x"], args["y"])


# -- elementwise unary ------------------------------------------------------------------------

# Exact in IEEE arithmetic (or a correctly rounded basic operation): the same bits on every CPU.
_UNARY = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "logical_not": np.logical_not,
    "round": np.round,
    "sign": np.sign,
    "sqrt": np.sqrt,
    "square": np.square,
}
# Transcendental: rounded once from float64, settled near rounding boundaries by libm (rounded.py),
# so fp16 and fp32 results do not depend on numpy's CPU dispatch.
_TRANSCENDENTAL = ("acos", "asin", "atan", "atanh", "cos", "cosh", "erf", "exp", "exp2", "sin", "sinh", "tan", "tanh")


@kernel(*_UNARY, *_TRANSCENDENTAL)
def unary(op, args):
    if op.op_type in _TRANSCENDENTAL:
        return rounded.unary(op.op_type, args["x"])
    with np.errstate(all="ignore"):
        return _UNARY[op.op_type](args["x"])


def _epsilon(args, default: float):
    eps = args.get("epsilon")
    return default if eps is None else eps


@kernel("inverse")
def inverse(op, args):
    with np.errstate(all="ignore"):
        return 1.0 / (args["x"] + _epsilon(args, 1e-4))


@kernel("log")
def log(op, args):
    """``log(x + epsilon)``: the sum in x's dtype (as MIL adds it), the log rounded once."""
    with np.errstate(all="ignore"):
        return rounded.unary("log", np.asarray(args["x"] + _epsilon(args, 1e-45)))


@kernel("rsqrt")
def rsqrt(op, args):
    """``1 / sqrt(x + epsilon)`` rounded once: the sum in x's dtype (as MIL adds it), the rest in
    float64 (sqrt then 1/ in fp16 rounds twice, an ulp off for 366 inputs)."""
    shifted = np.asarray(args["x"] + _epsilon(args, 1e-12))
    with np.errstate(all="ignore"):
        return (1.0 / np.sqrt(shifted.astype(np.float64))).astype(shifted.dtype)


@kernel("clip")
def clip(op, args):
    return np.minimum(np.maximum(args["x"], args["alpha"]), args["beta"])


@kernel("threshold")
def threshold(op, args):
    return np.maximum(args["x"], args["alpha"])


_CAST_DTYPES = {
    "bool": np.bool_,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "int64": np.int64,
    "fp16": np.float16,
    "fp32": np.float32,
    "fp64": np.float64,
}


@kernel("cast")
def cast(op, args):
    """MIL cast: floats to ints truncate toward zero; anything nonzero (NaN included) is true."""
    x = np.asarray(args["x"])
    target = np.dtype(_CAST_DTYPES[str(args["dtype"])])
    if target == np.bool_:
        return x != 0 if not np.issubdtype(x.dtype, np.floating) else (x != 0) | np.isnan(x)
    with np.errstate(all="ignore"):
        return x.astype(target)


@kernel("select")
def select(op, args):
    return np.where(np.asarray(args["cond"]).astype(bool), args["a"], args["b"])


@kernel("identity")
def identity(op, args):
    return np.array(args["x"], copy=True)


# -- data movement ----------------------------------------------------------------------------


@kernel("concat")
def concat(op, args):
    values = [np.asarray(v) for v in args["values"]]
    if any(v.ndim == 0 for v in values):  # coremltools concatenates scalars as length-1 vectors
        values = [np.atleast_1d(v) for v in values]
    axis = _axis(args["axis"], values[0].ndim)
    interleave = args.get("interleave")
    if interleave is not None and bool(interleave):
        stacked = np.stack(values, axis=axis + 1)
        shape = list(values[0].shape)
        shape[axis] *= len(values)
        return stacked.reshape(shape)
    return np.concatenate(values, axis=axis)


@kernel("slice_by_index")
def slice_by_index(op, args):
    x = np.asarray(args["x"])
    positions, squeezed = semantics.slice_by_index_positions(
        x.shape,
        _ints(args["begin"]),
        _ints(args["end"]),
        None if args.get("stride") is None else _ints(args["stride"]),
        args.get("begin_mask"),
        args.get("end_mask"),
        args.get("squeeze_mask"),
    )
    result = x[semantics.numpy_index(positions)]
    return np.squeeze(result, axis=squeezed) if squeezed else result


@kernel("slice_by_size")
def slice_by_size(op, args):
    x = np.asarray(args["x"])
    positions = semantics.slice_by_size_positions(x.shape, _ints(args["begin"]), _ints(args["size"]))
    return x[semantics.numpy_index(positions)]


@kernel("split")
def split(op, args):
    x = np.asarray(args["x"])
    axis = _axis(args["axis"], x.ndim)
    if args.get("split_sizes") is not None:
        sizes = _ints(args["split_sizes"])
    else:
        count = _int(args["num_splits"])
        size = math.ceil(x.shape[axis] / count)
        sizes = [size] * (count - 1) + [x.shape[axis] - size * (count - 1)]
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


@kernel("stack")
def stack(op, args):
    values = [np.asarray(v) for v in args["values"]]
    return np.stack(values, axis=_axis(args["axis"], values[0].ndim + 1))


@kernel("transpose")
def transpose(op, args):
    return np.transpose(args["x"], _ints(args["perm"]))


@kernel("reshape")
def reshape(op, args):
    x = np.asarray(args["x"])
    return x.reshape(semantics.reshape_shape(op.opset_version, x.shape, _ints(args["shape"])))


@kernel("expand_dims")
def expand_dims(op, args):
    x = np.asarray(args["x"])
    axes = _ints(args["axes"])
    out_rank = x.ndim + len(axes)
    axes = sorted(a + out_rank if a < 0 else a for a in axes)
    for axis in axes:
        x = np.expand_dims(x, axis)
    return x


@kernel("squeeze")
def squeeze(op, args):
    x = np.asarray(args["x"])
    if args.get("axes") is None:
        # The axes the declared type squeezed: static 1s. A symbolic dim stays, even when it is 1
        # at run time (the program was compiled for its type).
        declared = tuple(i for i, d in enumerate(op.x.shape) if not is_symbolic(d) and d == 1)
        return np.squeeze(x, axis=declared)
    return np.squeeze(x, axis=tuple(_axis(a, x.ndim) for a in _ints(args["axes"])))


@kernel("shape")
def shape(op, args):
    return np.array(np.asarray(args["x"]).shape, dtype=np.int32)


def _gather_indices(indices, size):
    indices = np.asarray(indices).astype(np.int64)
    return np.where(indices < 0, indices + size, indices)


@kernel("gather")
def gather(op, args):
    x = np.asarray(args["x"])
    axis = _axis(args["axis"] if args.get("axis") is not None else 0, x.ndim)
    batch_dims = _int(args["batch_dims"]) if args.get("batch_dims") is not None else 0
    indices = _gather_indices(args["indices"], x.shape[axis])
    if batch_dims == 0:
        return np.take(x, indices, axis=axis)
    batch_shape = x.shape[:batch_dims]
    flat_x = x.reshape((-1,) + x.shape[batch_dims:])
    flat_i = indices.reshape((-1,) + indices.shape[batch_dims:])
    parts = [np.take(xb, ib, axis=axis - batch_dims) for xb, ib in zip(flat_x, flat_i)]
    stacked = np.stack(parts)
    return stacked.reshape(batch_shape + stacked.shape[1:])


@kernel("fill")
def fill(op, args):
    value = args.get("value")
    value = 0.0 if value is None else value
    return np.full(_ints(args["shape"]), value, dtype=out_dtype(op))


@kernel("fill_like")
def fill_like(op, args):
    value = args.get("value")
    value = 0.0 if value is None else value
    return np.full(np.asarray(args["ref_tensor"]).shape, value, dtype=out_dtype(op))


@kernel("tile")
def tile(op, args):
    return np.tile(args["x"], _ints(args["reps"]))


@kernel("reverse")
def reverse(op, args):
    x = np.asarray(args["x"])
    axes = range(x.ndim) if args.get("axes") is None else _ints(args["axes"])
    return np.flip(x, axis=tuple(_axis(a, x.ndim) for a in axes))


@kernel("flatten2d")
def flatten2d(op, args):
    x = np.asarray(args["x"])
    axis = _axis(args.get("axis") if args.get("axis") is not None else 1, x.ndim)
    return x.reshape(math.prod(x.shape[:axis]), -1)


@kernel("pad")
def pad(op, args):
    x = np.asarray(args["x"])
    widths = _ints(args["pad"])
    pairs = [(0, 0)] * (x.ndim - len(widths) // 2) + [(widths[i], widths[i + 1]) for i in range(0, len(widths), 2)]
    mode = str(args.get("mode") or "constant")
    if mode == "constant":
        value = args.get("constant_val")
        return np.pad(x, pairs, mode="constant", constant_values=0 if value is None else value)
    return np.pad(x, pairs, mode={"reflect": "reflect", "replicate": "edge"}[mode])


@kernel("range_1d")
def range_1d(op, args):
    return np.arange(args["start"], args["end"], args["step"])


# -- linear algebra and reductions ------------------------------------------------------------


def _wide(x):
    """fp16 products accumulate in fp32, as Core ML does."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float16 else x


@kernel("matmul")
def matmul(op, args):
    x, y = _wide(args["x"]), _wide(args["y"])
    if args.get("transpose_x") is not None and bool(args["transpose_x"]) and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if args.get("transpose_y") is not None and bool(args["transpose_y"]) and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


@kernel("linear")
def linear(op, args):
    weight = np.asarray(args["weight"])
    x = _wide(args["x"])
    result = None
    if weight.dtype == np.float16:  # the widening _wide makes: kept between calls, or made in blocks
        wide = cached_as(op, "weight", weight, np.float32)
        if wide is None:
            result = matmul_fp16_t(x, weight)
        if result is None:
            weight = weight.astype(np.float32) if wide is None else wide
    if result is None:
        result = np.matmul(x, weight.T)
    return result if args.get("bias") is None else result + _wide(args["bias"])


def _reduce_axes(args, rank):
    axes = args.get("axes")
    if axes is None:
        return tuple(range(rank))
    return tuple(_axis(a, rank) for a in _ints(axes))


def _keep(args) -> bool:
    return args.get("keep_dims") is not None and bool(args["keep_dims"])


_REDUCTIONS = {
    "reduce_sum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "reduce_mean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    "reduce_prod": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "reduce_max": lambda x, a, k: np.max(x, axis=a, keepdims=k),
    "reduce_min": lambda x, a, k: np.min(x, axis=a, keepdims=k),
    "reduce_l1_norm": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "reduce_l2_norm": lambda x, a, k: np.sqrt(np.sum(np.square(x), axis=a, keepdims=k)),
    "reduce_sum_square": lambda x, a, k: np.sum(np.square(x), axis=a, keepdims=k),
    "reduce_log_sum": lambda x, a, k: _log_sum(x, a, k),
    "reduce_log_sum_exp": lambda x, a, k: _log_sum_exp(x, a, k),
}


def _log_sum(x, axes, keep):
    """``log`` of the sum (taken in x's widened dtype), rounded once to x's dtype."""
    total = np.sum(x, axis=axes, keepdims=keep)
    return rounded.unary("log", total)


def _log_sum_of_exp_rows(fn, rows):
    peak = np.max(rows, axis=1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0)
    return fn.log(np.sum(fn.exp(rows - peak), axis=1, keepdims=True)) + peak


def _log_sum_exp(x, axes, keep):
    """In float64, settled for rounding once to x's dtype (rounded.along)."""
    total = rounded.along(_log_sum_of_exp_rows, x.dtype, x, axes)
    return total if keep else np.squeeze(total, axis=axes)


@kernel(*_REDUCTIONS)
def reduce(op, args):
    x = np.asarray(args["x"])
    with np.errstate(all="ignore"):
        return _REDUCTIONS[op.op_type](_wide(x), _reduce_axes(args, x.ndim), _keep(args))


@kernel("reduce_argmax", "reduce_argmin")
def reduce_arg(op, args):
    x = np.asarray(args["x"])
    axis = _axis(args.get("axis") if args.get("axis") is not None else -1, x.ndim)
    pick = np.argmax if op.op_type == "reduce_argmax" else np.argmin
    result = pick(x, axis=axis)
    return np.expand_dims(result, axis) if _keep(args) else result


def _softmax_rows(fn, rows):
    shifted = fn.exp(rows - np.max(rows, axis=1, keepdims=True))
    return shifted / np.sum(shifted, axis=1, keepdims=True)


@kernel("softmax")
def softmax(op, args):
    """In float64, settled for rounding once to x's dtype (rounded.along): numpy's fp32 exp
    differs by CPU."""
    x = np.asarray(args["x"])
    axis = _axis(args.get("axis") if args.get("axis") is not None else -1, x.ndim)
    with np.errstate(all="ignore"):
        return rounded.along(_softmax_rows, x.dtype, x, (axis,))


# -- random -----------------------------------------------------------------------------------
# Core ML's generators are its own: these draw from the same distributions with numpy, seeded by
# the op's ``seed`` when it is set (>= 0), so only the distribution (and the shape) is Core ML's.


def _rng(args) -> np.random.Generator:
    seed = args.get("seed")
    seed = -1 if seed is None else _int(seed)
    return np.random.default_rng(seed if seed >= 0 else None)


def _scalar(args, name: str, default: float) -> float:
    value = args.get(name)
    return default if value is None else float(np.asarray(value))


@kernel("random_uniform")
def random_uniform(op, args):
    low, high = _scalar(args, "low", 0.0), _scalar(args, "high", 1.0)
    return _rng(args).uniform(low, high, size=_ints(args["shape"]))


@kernel("random_normal")
def random_normal(op, args):
    mean, stddev = _scalar(args, "mean", 0.0), _scalar(args, "stddev", 1.0)
    return _rng(args).normal(mean, stddev, size=_ints(args["shape"]))


@kernel("random_bernoulli")
def random_bernoulli(op, args):
    prob = _scalar(args, "prob", 0.5)
    return _rng(args).random(size=_ints(args["shape"])) < prob


@kernel("random_categorical")
def random_categorical(op, args):
    """``size`` draws with replacement per distribution over the last axis; indices as ``T``."""
    x = np.asarray(args["x"], dtype=np.float64)
    mode = args.get("mode") or "logits"
    size = 1 if args.get("size") is None else _int(args["size"])
    if mode == "logits":
        weights = np.exp(x - np.max(x, axis=-1, keepdims=True))
    else:
        weights = np.clip(x, 0, None)
    probs = (weights / np.sum(weights, axis=-1, keepdims=True)).reshape(-1, x.shape[-1])
    rng = _rng(args)
    draws = np.stack([rng.choice(x.shape[-1], size=size, p=row) for row in probs])
    return draws.reshape(*x.shape[:-1], size)

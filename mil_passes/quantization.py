"""``quantize``/``dequantize`` with a scale or zero point computed at run time, as ops Core ML accepts.

MIL's iOS17 ``quantize`` and ``dequantize`` take ``scale`` and ``zero_point`` as const inputs
(their spec in coremltools' ``ops/defs/iOS17/quantization_ops.py``: "zero_point: const
tensor<DstT, [0..1]>"); WebNN's ``quantizeLinear``/``dequantizeLinear`` take them as operands.
The op spec's formulas, written with ops that take run-time operands, in the input's float dtype::

    quantize:   cast(clip(round(x / scale) + cast(zero_point, fp), lo, hi), output_dtype)
    dequantize: (cast(x, fp) - cast(zero_point, fp)) * scale

``lo, hi`` is the range of the integer dtype (:data:`RANGES`); MIL ``round`` rounds half to even
("0.5 is rounded to 0"), as the op spec and WebNN do. A vector parameter lies along ``axis`` and is
reshaped to ``[D, 1, …, 1]`` so it broadcasts (not needed when ``axis`` is the last one).

The op sequence is written once (:func:`quantize_steps`, :func:`dequantize_steps`) over an emitter:
``mil_passes.package.runtime_quantization`` emits protobuf ops from it when reading a package, and
:func:`quantize`/:func:`dequantize` emit pymil ops with coremltools' Builder, for people building
MIL in Python (pymil itself cannot hold a ``quantize`` whose zero point is not const).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Protocol, TypeVar

import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Var, types

__all__ = [
    "RANGES",
    "FLOAT_DTYPES",
    "CONSTANT_STEPS",
    "Emitter",
    "Params",
    "fold",
    "is_constant",
    "quantize_steps",
    "dequantize_steps",
    "quantize",
    "dequantize",
]

# the integer dtypes of MIL quantization and the values each holds
RANGES = {"int8": (-128, 127), "uint8": (0, 255)}
FLOAT_DTYPES = {"fp16": np.float16, "fp32": np.float32}

NUMPY_DTYPES = {**FLOAT_DTYPES, "int8": np.int8, "uint8": np.uint8, "int32": np.int32}
# the steps that only move or convert a parameter: on a constant they are computed, not emitted,
# so a const parameter stays a const
CONSTANT_STEPS: dict[str, Callable[..., np.ndarray]] = {
    "reshape": lambda x, shape: np.reshape(x, shape),
    "cast": lambda x, dtype: np.asarray(x).astype(NUMPY_DTYPES[str(dtype)]),
}

V = TypeVar("V")


def is_constant(value) -> bool:
    """Whether an emitter's value is a numpy constant (not an op's output)."""
    return isinstance(value, (np.ndarray, np.generic))


def fold(op_type: str, label: str | None, inputs: dict):
    """The value of a :data:`CONSTANT_STEPS` step whose inputs are all constants; else None
    (and always None for the result step, which must define the result)."""
    if label is None or op_type not in CONSTANT_STEPS or not all(map(is_constant, inputs.values())):
        return None
    return CONSTANT_STEPS[op_type](**inputs)


class Emitter(Protocol[V]):
    """Where the steps go: ``emit(op_type, label, **inputs)`` adds one op and returns its output.

    Inputs are values the emitter made (or was given) and numpy constants (a dtype name, a
    shape, a clip bound, a const parameter). ``label`` names the step (``None``: the result);
    ``rank(value)`` is a value's rank. An emitter computes a step :func:`fold` can compute.
    """

    def __call__(self, op_type: str, label: str | None, **inputs) -> V: ...

    def rank(self, value: V) -> int: ...


def _along_axis(emit: Emitter[V], param: V, axis: int | None, rank: int, label: str) -> V:
    """A vector along ``axis`` reshaped to broadcast against a rank-``rank`` input; a scalar, or a
    parameter already of the input's rank, as it is."""
    if axis is None or emit.rank(param) != 1:
        return param
    axis = axis + rank if axis < 0 else axis
    trailing = rank - 1 - axis
    if trailing == 0:
        return param
    return emit("reshape", label, x=param, shape=np.array([-1] + [1] * trailing, np.int32))


@dataclass(frozen=True)
class Params(Generic[V]):
    """A quantization's parameters as the steps read them: ``scale`` and ``zero_point`` (None: 0) as
    values of the emitter or numpy constants, the ``axis`` a vector lies along, the input's ``rank``,
    and the float dtype computed in."""

    scale: V
    zero_point: V | None
    axis: int | None
    rank: int
    float_dtype: str

    def along_axis(self, emit: Emitter[V], param: V, label: str) -> V:
        return _along_axis(emit, param, self.axis, self.rank, label)

    def zero_as_float(self, emit: Emitter[V]) -> V | None:
        """The zero point, broadcast along the axis and cast to the float dtype (None: none)."""
        if self.zero_point is None:
            return None
        along = self.along_axis(emit, self.zero_point, "zero_point")
        return emit("cast", f"zero_point_{self.float_dtype}", x=along, dtype=np.str_(self.float_dtype))


def quantize_steps(emit: Emitter[V], x: V, params: Params[V], output_dtype: str) -> V:
    """``cast(clip(round(x / scale) + cast(zero_point, fp), lo, hi), output_dtype)``."""
    low, high = RANGES[output_dtype]
    scaled = emit("real_div", "scaled", x=x, y=params.along_axis(emit, params.scale, "scale"))
    result = emit("round", "rounded", x=scaled)
    zero = params.zero_as_float(emit)
    if zero is not None:
        result = emit("add", "shifted", x=result, y=zero)
    bound = FLOAT_DTYPES[params.float_dtype]
    clipped = emit("clip", "clipped", x=result, alpha=bound(low), beta=bound(high))
    return emit("cast", None, x=clipped, dtype=np.str_(output_dtype))


def dequantize_steps(emit: Emitter[V], x: V, params: Params[V]) -> V:
    """``(cast(x, fp) - cast(zero_point, fp)) * scale``."""
    result = emit("cast", f"input_{params.float_dtype}", x=x, dtype=np.str_(params.float_dtype))
    zero = params.zero_as_float(emit)
    if zero is not None:
        result = emit("sub", "shifted", x=result, y=zero)
    return emit("mul", None, x=result, y=params.along_axis(emit, params.scale, "scale"))


# -- coremltools' Builder ------------------------------------------------------------------------


class _BuilderEmitter:
    """Emits pymil ops with ``mb``; op names are ``<name>_<label>`` and the result is ``name``."""

    def __init__(self, name: str | None) -> None:
        self.name = name

    def __call__(self, op_type: str, label: str | None, **inputs) -> Var | np.ndarray:
        folded = fold(op_type, label, inputs)
        if folded is not None:
            return folded
        name = self.name if label is None or self.name is None else f"{self.name}_{label}"
        return getattr(mb, op_type)(**inputs, **({"name": name} if name else {}))

    def rank(self, value) -> int:
        return value.rank if isinstance(value, Var) else np.ndim(value)


def _const(value, dtype) -> np.ndarray | Var:
    """A Var stays a Var; anything else becomes a numpy constant of ``dtype``."""
    return value if isinstance(value, Var) else np.asarray(value, dtype=dtype)


def _dtype_name(value) -> str:
    """MIL's name for the dtype of a Var or a numpy array (``fp16``, ``int8``, …)."""
    if isinstance(value, Var):
        return types.builtin_to_string(value.dtype)
    return types.builtin_to_string(types.numpy_type_to_builtin_type(np.asarray(value).dtype))


def _checked_dtype(x, wanted: tuple, op: str) -> str:
    dtype = _dtype_name(x) if isinstance(x, Var) else type(x).__name__
    if not isinstance(x, Var) or dtype not in wanted:
        raise ValueError(f"{op}: x must be a tensor Var of {' or '.join(wanted)}, got {dtype}")
    return dtype


def _check_param(value, wanted: str, op: str, param: str) -> None:
    if isinstance(value, Var) and _dtype_name(value) != wanted:
        raise ValueError(f"{op}: {param} '{value.name}' must be {wanted}, got {_dtype_name(value)}")


def _mb_op(op_type: str, x: Var, params: dict, **extra) -> Var:
    """``mb.quantize``/``mb.dequantize`` with the parameters given (all constants)."""
    given = {key: value for key, value in params.items() if value is not None}
    return getattr(mb, op_type)(input=x, **given, **extra)


def quantize(
    x: Var,
    scale,
    zero_point=None,
    axis: int | None = None,
    output_dtype: str = "int8",
    name: str | None = None,
) -> Var:
    """``quantize`` inside ``mb.program``, where ``scale`` or ``zero_point`` may be run-time Vars.

    ``x`` is fp16 or fp32; ``scale`` a Var or array of x's dtype, scalar or a vector along
    ``axis``; ``zero_point`` (optional) a Var or array of ``output_dtype`` (``int8`` or ``uint8``).
    With both parameters constant this is ``mb.quantize``; otherwise the ops of
    :func:`quantize_steps`, the result named ``name``.
    """
    if output_dtype not in RANGES:
        raise ValueError(f"quantize: output_dtype must be one of {', '.join(RANGES)}, got '{output_dtype}'")
    float_dtype = _checked_dtype(x, tuple(FLOAT_DTYPES), "quantize")
    scale = _const(scale, FLOAT_DTYPES[float_dtype])
    zero_point = None if zero_point is None else _const(zero_point, np.dtype(output_dtype))
    _check_param(scale, float_dtype, "quantize", "scale")
    _check_param(zero_point, output_dtype, "quantize", "zero_point")
    if not any(isinstance(p, Var) for p in (scale, zero_point)):
        params = {"scale": scale, "zero_point": zero_point, "axis": axis, "name": name}
        return _mb_op("quantize", x, params, output_dtype=output_dtype)
    return quantize_steps(_BuilderEmitter(name), x, Params(scale, zero_point, axis, x.rank, float_dtype), output_dtype)


def dequantize(x: Var, scale, zero_point=None, axis: int | None = None, name: str | None = None) -> Var:
    """``dequantize`` inside ``mb.program``, where ``scale`` or ``zero_point`` may be run-time Vars.

    ``x`` is int8 or uint8; ``scale`` a Var or array of fp16 or fp32 (other arrays become fp32;
    the result has scale's dtype), scalar or a vector along ``axis``; ``zero_point`` (optional) a Var
    or array of x's dtype. With both parameters constant this is ``mb.dequantize``; otherwise the
    ops of :func:`dequantize_steps`, the result named ``name``.
    """
    int_dtype = _checked_dtype(x, tuple(RANGES), "dequantize")
    if not isinstance(scale, Var) and np.asarray(scale).dtype != np.float16:
        scale = np.asarray(scale, np.float32)
    float_dtype = _dtype_name(scale)
    if float_dtype not in FLOAT_DTYPES:
        raise ValueError(f"dequantize: scale must be fp16 or fp32, got {float_dtype}")
    zero_point = None if zero_point is None else _const(zero_point, np.dtype(int_dtype))
    _check_param(zero_point, int_dtype, "dequantize", "zero_point")
    if not any(isinstance(p, Var) for p in (scale, zero_point)):
        return _mb_op("dequantize", x, {"scale": scale, "zero_point": zero_point, "axis": axis, "name": name})
    return dequantize_steps(_BuilderEmitter(name), x, Params(scale, zero_point, axis, x.rank, float_dtype))

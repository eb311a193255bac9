"""Symbolic values of shape computations, for ``webnn::fold_shape_ops``.

Each numeric scalar and short vector (what shapes are made of) gets a :class:`ShapeValue`: an
array, shaped like the var, whose elements are

- a number (a numpy scalar of the var's dtype) when it is known before run time,
- a :class:`Dim` when it is a run-time dim of some tensor (named by its coremltools symbol), or
- ``None`` when it is neither.

``shape`` ops produce them from their input's type; the ops in ``RULES`` propagate them, exactly
as MIL computes the known elements. Two run-time dims are the same only when their symbols have
the same name: nothing here assumes ``is0 == is1``. Dims travel through ``cast`` between int32
and fp32 unchanged (exact up to 2**24), and through arithmetic only by identities that hold for
every size (``d + 0``, ``d * 1``, ``d - d``, ``d * 0``, …).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic

from ..semantics import numpy_index, slice_by_index_positions, slice_by_size_positions

MAX_ELEMENTS = 256  # shape values are scalars and vectors; longer ones are data


@dataclass(frozen=True)
class Dim:
    """A dim known only at run time, named by its coremltools symbol."""

    name: str

    def __str__(self) -> str:
        return self.name


def dim_of(size) -> "int | Dim":
    """A static dim as ``int``, a symbolic one as :class:`Dim`."""
    return Dim(str(size)) if is_symbolic(size) else int(size)


@dataclass(frozen=True)
class ShapeValue:
    """What is known about a var's value; ``from_shape``: computed (in part) from a ``shape`` op."""

    elements: np.ndarray  # dtype object, shaped like the var
    from_shape: bool

    @property
    def is_known(self) -> bool:
        return all(_is_number(e) for e in self.elements.flat)

    def array(self, dtype: np.dtype) -> np.ndarray:
        """The known value as a numpy array of ``dtype`` (only when ``is_known``)."""
        return np.array([e for e in self.elements.flat], dtype=dtype).reshape(self.elements.shape)


def _is_number(element) -> bool:
    return element is not None and not isinstance(element, Dim)


def numpy_dtype(var: Var) -> np.dtype | None:
    """The var's numpy dtype when it can hold a shape value (numeric, not bool), else None."""
    dtype = var.dtype if var.sym_type is not None else None
    if dtype is None or dtype == types.bool or not (types.is_int(dtype) or types.is_float(dtype)):
        return None
    return np.dtype(types.nptype_from_builtin(dtype))


def trackable(var: Var) -> bool:
    """A numeric scalar, or a vector of static length up to MAX_ELEMENTS: what shapes are made of."""
    sym_type = var.sym_type
    if types.is_tensor(sym_type):  # the shape first: it rules out most tensors, and costs less
        shape = sym_type.get_shape()
        if len(shape) != 1 or is_symbolic(shape[0]) or int(shape[0]) > MAX_ELEMENTS:
            return False
    elif not types.is_scalar(sym_type):
        return False
    return numpy_dtype(var) is not None


class Values:
    """Shape values of vars, computed on demand and memoised (build one per analysis)."""

    def __init__(self) -> None:
        self._memo: dict[Var, Optional[ShapeValue]] = {}

    def of(self, var: Var) -> ShapeValue | None:
        """``var``'s value, or None if it cannot carry one."""
        stack = [var]
        while stack:  # post-order without recursion: shape chains can be long
            top = stack[-1]
            if top in self._memo:
                stack.pop()
                continue
            pending = [v for v in _tracked_inputs(top) if v not in self._memo]
            if pending:
                stack.extend(pending)
                continue
            self._memo[top] = self._evaluate(top)
            stack.pop()
        return self._memo[var]

    def elements(self, var: Var | None) -> np.ndarray | None:
        value = self.of(var) if var is not None else None
        return value.elements if value is not None else None

    def known(self, var: Var | None) -> np.ndarray | None:
        """``var``'s elements when all are known numbers, else None."""
        value = self.of(var) if var is not None else None
        return value.elements if value is not None and value.is_known else None

    def _evaluate(self, var: Var) -> ShapeValue | None:
        if not trackable(var):
            return None
        shape = tuple(var.shape)
        op = var.op
        rule = RULES.get(op.op_type) if op is not None else None
        if rule is None:
            if var.val is not None:
                val = np.asarray(var.val, dtype=numpy_dtype(var))
                return ShapeValue(_objects(val), from_shape=False)
            return ShapeValue(_unknown(shape), from_shape=False)
        from_shape = op.op_type == "shape" or any(
            (value := self._memo.get(v)) is not None and value.from_shape for v in op.get_flattened_inputs()
        )
        try:
            outputs = rule(op, self)
        except (ValueError, IndexError, TypeError, ZeroDivisionError):
            outputs = None  # a form the rule does not model: nothing is known
        if outputs is None:
            return ShapeValue(_unknown(shape), from_shape)
        if not isinstance(outputs, tuple):
            outputs = (outputs,)
        elements = outputs[op.outputs.index(var)]
        if elements is not None and not isinstance(elements, np.ndarray):
            elements = np.array(elements, dtype=object)  # frompyfunc on 0-d inputs gives a scalar
        if elements is None or elements.size != int(np.prod(shape, dtype=np.int64)):
            return ShapeValue(_unknown(shape), from_shape)
        dtype = numpy_dtype(var)
        assert dtype is not None, "a trackable var is numeric"
        return ShapeValue(_typed(elements.reshape(shape), dtype), from_shape)


def _tracked_inputs(var: Var) -> list[Var]:
    op = var.op
    if op is None or op.op_type not in RULES or not trackable(var):
        return []
    return [v for v in op.get_flattened_inputs() if trackable(v)]


def _objects(array: np.ndarray) -> np.ndarray:
    out = np.empty(array.shape, dtype=object)
    for index, value in np.ndenumerate(array):
        out[index] = array.dtype.type(value)
    return out


def _vector(elements: list) -> np.ndarray:
    """A 1-D object array of ``elements`` (numbers, :class:`Dim`, None)."""
    out = np.empty((len(elements),), dtype=object)
    out[:] = elements
    return out


def _unknown(shape: tuple) -> np.ndarray:
    return np.full(shape, None, dtype=object)


def _typed(elements: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Known numbers as numpy scalars of ``dtype``."""
    out = np.empty(elements.shape, dtype=object)
    for index, e in np.ndenumerate(elements):
        out[index] = dtype.type(e) if _is_number(e) else e
    return out


def _ints(elements: np.ndarray | None) -> list[int] | None:
    if elements is None or not all(_is_number(e) for e in elements.flat):
        return None
    return [int(e) for e in elements.flat]


def _param(op: Operation, name: str, values: Values, default=None):
    """A list input of ``op`` as ints, ``default`` when absent, None when not known."""
    var = getattr(op, name, None)
    if var is None:
        return default
    if var.val is not None:  # const params, bool masks included
        return [int(v) for v in np.asarray(var.val).flat]
    return _ints(values.known(var))


def _out_dtype(op: Operation, index: int = 0) -> np.dtype | None:
    return numpy_dtype(op.outputs[index])


# -- rules: (op, values) -> elements (or a tuple, one per output) or None ----------------------


def _shape(op: Operation, values: Values) -> np.ndarray | None:
    if not types.is_tensor(op.x.sym_type) or any_variadic(op.x.shape):
        return None if not types.is_scalar(op.x.sym_type) else np.empty((0,), dtype=object)
    return _vector([dim_of(d) for d in op.x.shape])


def _same_order(op: Operation, values: Values) -> np.ndarray | None:
    """squeeze, expand_dims, reshape, identity: the elements in order, in the declared shape."""
    x = values.elements(op.x)
    shape = op.outputs[0].shape if types.is_tensor(op.outputs[0].sym_type) else ()
    if x is None or any(is_symbolic(d) for d in shape):
        return None
    return x.reshape(tuple(int(d) for d in shape))


def _gather(op: Operation, values: Values) -> np.ndarray | None:
    x, indices = values.elements(op.x), values.known(op.indices)
    axis = _param(op, "axis", values, [0])
    if x is None or indices is None or axis is None or _param(op, "batch_dims", values, [0]) != [0]:
        return None
    axis = axis[0] % x.ndim
    index = np.asarray([int(i) for i in indices.flat], dtype=np.int64).reshape(indices.shape)
    size = x.shape[axis]
    index = np.where(index < 0, index + size, index)
    if index.size and (index.min() < 0 or index.max() >= size):
        return None
    return np.take(x, index, axis=axis)


def _slice_by_index(op: Operation, values: Values) -> np.ndarray | None:
    x = values.elements(op.x)
    rank = x.ndim if x is not None else 0
    begin, end = _param(op, "begin", values), _param(op, "end", values)
    stride = _param(op, "stride", values, [1] * rank)
    masks = [_param(op, name, values, [0] * rank) for name in ("begin_mask", "end_mask", "squeeze_mask")]
    if x is None or None in (begin, end, stride) or any(m is None for m in masks):
        return None
    positions, squeezed = slice_by_index_positions(x.shape, begin, end, stride, *masks)
    selected = x[numpy_index(positions)]
    return selected.reshape([len(p) for a, p in enumerate(positions) if a not in squeezed])


def _slice_by_size(op: Operation, values: Values) -> np.ndarray | None:
    x = values.elements(op.x)
    begin, size = _param(op, "begin", values), _param(op, "size", values)
    if x is None or begin is None or size is None:
        return None
    return x[numpy_index(slice_by_size_positions(x.shape, begin, size))]


def _split(op: Operation, values: Values) -> tuple | None:
    x = values.elements(op.x)
    axis = _param(op, "axis", values)
    if x is None or axis is None:
        return None
    axis = axis[0] % x.ndim
    sizes = [int(out.shape[axis]) for out in op.outputs]
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


def _pieces(op: Operation, values: Values) -> list[np.ndarray] | None:
    """The elements of each of ``op.values``, None when one has none."""
    pieces = [values.elements(v) for v in op.values]
    present = [p for p in pieces if p is not None]
    return present if len(present) == len(pieces) else None


def _concat(op: Operation, values: Values) -> np.ndarray | None:
    pieces = _pieces(op, values)
    axis = _param(op, "axis", values)
    if pieces is None or axis is None or _param(op, "interleave", values, [0]) != [0]:
        return None
    if all(p.ndim == 0 for p in pieces):  # coremltools joins scalars into a vector (torch's frontend does)
        return _vector([p[()] for p in pieces])
    return np.concatenate(pieces, axis=axis[0])


def _stack(op: Operation, values: Values) -> np.ndarray | None:
    pieces = _pieces(op, values)
    axis = _param(op, "axis", values)
    if pieces is None or axis is None:
        return None
    return np.stack(pieces, axis=axis[0])


def _fill(op: Operation, values: Values) -> np.ndarray | None:
    shape, value = _ints(values.known(op.shape)), values.known(op.value)
    if shape is None or value is None or int(np.prod(shape)) > MAX_ELEMENTS:
        return None
    return np.full(tuple(shape), value.flat[0], dtype=object)


def _tile(op: Operation, values: Values) -> np.ndarray | None:
    x, reps = values.elements(op.x), _ints(values.known(op.reps))
    if x is None or reps is None:
        return None
    return np.tile(x, reps)


def _cast(op: Operation, values: Values) -> np.ndarray | None:
    x = values.elements(op.x)
    source, target = numpy_dtype(op.x), _out_dtype(op)
    if x is None or source is None or target is None:  # x has elements only when op.x is numeric
        return None
    return np.frompyfunc(lambda e: _cast_element(e, source, target), 1, 1)(x)


_DIM_DTYPES = (np.dtype(np.int32), np.dtype(np.float32))


def _cast_element(e, source: np.dtype, target: np.dtype):
    if isinstance(e, Dim):
        return e if source in _DIM_DTYPES and target in _DIM_DTYPES else None
    if e is None:
        return None
    if np.issubdtype(target, np.integer) and np.issubdtype(source, np.floating):
        info = np.iinfo(target)
        if not np.isfinite(e) or e != np.floor(e) or not info.min <= e <= info.max:
            return None  # truncation and overflow are not shape arithmetic
    with np.errstate(all="ignore"):
        return target.type(e)


def _real_div(a, b):
    if np.issubdtype(np.asarray(a).dtype, np.integer):
        return a // b if a % b == 0 else None  # MIL truncates an inexact int quotient
    return np.true_divide(a, b)


_ARITHMETIC: dict[str, Callable] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "floor_div": np.floor_divide,
    "real_div": _real_div,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


def _binary(op: Operation, values: Values) -> np.ndarray | None:
    x, y = values.elements(op.x), values.elements(op.y)
    dtype = _out_dtype(op)
    if x is None or y is None or dtype is None:
        return None
    fn = _ARITHMETIC[op.op_type]

    def element(a, b):
        if _is_number(a) and _is_number(b):
            if op.op_type in ("floor_div", "real_div") and b == 0:
                return None
            with np.errstate(all="ignore"):
                result = fn(a, b)
            return None if result is None else dtype.type(result)
        return _dim_identity(op.op_type, a, b, dtype)

    return np.frompyfunc(element, 2, 1)(x, y)


_RIGHT_IDENTITY = {"add": 0, "sub": 0, "mul": 1, "floor_div": 1, "real_div": 1}  # d op y == d
_LEFT_IDENTITY = {"add": 0, "mul": 1}  # y op d == d


def _dim_identity(op_type: str, a, b, dtype: np.dtype):
    """``a op b`` where a run-time dim is involved, when it holds for every size of the dim."""
    if isinstance(a, Dim) and isinstance(b, Dim) and a == b:
        return {"sub": dtype.type(0), "maximum": a, "minimum": a}.get(op_type)
    if isinstance(a, Dim) and _is_number(b):
        if _RIGHT_IDENTITY.get(op_type) == b:
            return a
        return dtype.type(b) if op_type == "mul" and b == 0 else None  # a size times ±0 is that 0
    if _is_number(a) and isinstance(b, Dim):
        if _LEFT_IDENTITY.get(op_type) == a:
            return b
        return dtype.type(a) if op_type == "mul" and a == 0 else None
    return None


def _reduce_prod(op: Operation, values: Values) -> np.ndarray | None:
    x = values.elements(op.x)
    axes = _param(op, "axes", values, list(range(x.ndim)) if x is not None else None)
    dtype = _out_dtype(op)
    if x is None or axes is None or dtype is None or not np.issubdtype(dtype, np.integer):
        return None  # a float product's rounding depends on the order of the factors
    axes = sorted({a % x.ndim for a in axes}) if x.ndim else []
    kept = [a for a in range(x.ndim) if a not in axes]
    group = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    rows = np.transpose(x, kept + axes).reshape(-1, group)
    return _vector([_product(row, dtype) for row in rows])


def _product(row: np.ndarray, dtype: np.dtype):
    dims = [e for e in row if isinstance(e, Dim)]
    numbers = [e for e in row if _is_number(e)]
    known = dtype.type(1)
    with np.errstate(all="ignore"):
        for e in numbers:
            known = dtype.type(known * e)
    if len(numbers) + len(dims) < len(row):
        return None  # an unknown factor (an inf, say) could make even a 0 factor's product NaN
    if any(e == 0 for e in numbers):
        return dtype.type(0)
    if not dims:
        return known
    return dims[0] if len(dims) == 1 and known == 1 else None


RULES: dict[str, Callable[[Operation, Values], "np.ndarray | tuple | None"]] = {
    "shape": _shape,
    "squeeze": _same_order,
    "expand_dims": _same_order,
    "reshape": _same_order,
    "identity": _same_order,
    "gather": _gather,
    "slice_by_index": _slice_by_index,
    "slice_by_size": _slice_by_size,
    "split": _split,
    "concat": _concat,
    "stack": _stack,
    "fill": _fill,
    "tile": _tile,
    "cast": _cast,
    "reduce_prod": _reduce_prod,
    **{op_type: _binary for op_type in _ARITHMETIC},
}

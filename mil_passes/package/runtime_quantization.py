"""``quantize``/``dequantize`` whose scale or zero point is computed at run time, found and lowered
in the protobuf, before coremltools' loader sees them (and the ``constexpr_*`` dequantizations
given a run-time operand).

WebNN's ``quantizeLinear``/``dequantizeLinear`` take ``scale`` and ``zeroPoint`` as operands; the
iOS17 MIL ops take them as const inputs only ("zero_point: const tensor<DstT, [0..1]>" in the op
spec), so a converter that maps one onto the other writes a model Core ML refuses to compile, and
coremltools' loader stops at "Input zero_point must be const at compile time".

:func:`lower_runtime_quantization` reports each such op (``dynamic-quantization-param``, error)
and replaces it, in place, by the op spec's formula written with ops that take run-time operands
(:mod:`mil_passes.quantization`): the last new op defines the op's output name, so every reader and
the model's interface stay as they were. A parameter is const when an immediate value, a
``const`` or ``constexpr_*`` op, or an op reading only consts defines it (what coremltools'
``is_descendant_of_const`` accepts); an op whose parameters are all const is left alone.

``constexpr_affine_dequantize`` (all of whose inputs must be const) is lowered as ``dequantize``;
``constexpr_blockwise_shift_scale`` is refused with one line (its per-block parameters are not
lowered), as is a lowering in a function older than iOS17 (MIL's cast takes int8 from iOS17 on).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from ..ir import FreshNames
from ..lint.findings import Finding
from ..quantization import FLOAT_DTYPES, RANGES, Params, dequantize_steps, fold, is_constant, quantize_steps
from .milproto import (
    DTYPE_NAMES,
    MIL,
    Value,
    ValueType,
    const,
    immediate,
    immediate_array,
    op_name,
    operation,
    tensor_type,
)

RULE = "dynamic-quantization-param"
LOWERING_OPSET = 7  # the lowering casts int8/uint8, which MIL's cast takes from iOS17 (CoreML7) on


class UnloweredQuantization(ValueError):
    """A quantization op with a run-time parameter that cannot be lowered (one line, naming it)."""


@dataclass(frozen=True)
class QuantizationOp:
    """An op type's operands: the quantized or float ``input``, the operand whose dtype is the
    float dtype of the computation, the ``params`` the op spec wants const, where the zero point
    is, what the spec says, and how to lower it (None: not lowered)."""

    input: str
    float_operand: str
    params: tuple[str, ...]
    requirement: str
    lower: Callable | None  # (emit, x, scale, zero_point, axis, rank, float_dtype, op_reader) -> result
    zero_point: str = "zero_point"


def _quantize(emit, x, scale, zero_point, axis, rank, float_dtype, op_reader) -> str:
    output_dtype = op_reader.constant_text("output_dtype")
    if output_dtype not in RANGES:
        raise UnloweredQuantization(
            f"{op_reader.label}: output_dtype '{output_dtype}' is not one of {', '.join(RANGES)}"
        )
    return quantize_steps(emit, x, Params(scale, zero_point, axis, rank, float_dtype), output_dtype)


def _dequantize(emit, x, scale, zero_point, axis, rank, float_dtype, op_reader) -> str:
    return dequantize_steps(emit, x, Params(scale, zero_point, axis, rank, float_dtype))


IOS17_SPEC = "the iOS17 op spec requires const"
CONSTEXPR_SPEC = "a constexpr op requires const"
QUANTIZATION_OPS = {
    "quantize": QuantizationOp("input", "input", ("scale", "zero_point"), IOS17_SPEC, _quantize),
    "dequantize": QuantizationOp("input", "scale", ("scale", "zero_point"), IOS17_SPEC, _dequantize),
    "constexpr_affine_dequantize": QuantizationOp(
        "quantized_data",
        "scale",
        ("quantized_data", "scale", "zero_point"),
        CONSTEXPR_SPEC,
        _dequantize,
    ),
    "constexpr_blockwise_shift_scale": QuantizationOp(
        "data",
        "scale",
        ("data", "scale", "offset"),
        CONSTEXPR_SPEC,
        None,
        zero_point="offset",
    ),
}


# -- reading the protobuf ------------------------------------------------------------------------


def _op_name(op) -> str:
    """The op's name, else its first output's, else its type (for messages and fresh names)."""
    return op_name(op) or (op.outputs[0].name if op.outputs else op.type)


def _bindings(op) -> Iterator:
    for argument in op.inputs.values():
        yield from argument.arguments


class _Scope:
    """What is defined before an op in a block and the blocks enclosing it: types, constants."""

    def __init__(self, parent: "_Scope | None" = None) -> None:
        self.parent = parent
        self.types: dict[str, ValueType] = {}
        self.constants: dict[str, Value | None] = {}  # const name -> immediate value, if any

    def type_of(self, name: str):
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.types:
                return scope.types[name]
            scope = scope.parent
        return None

    def constant(self, name: str):
        """(True, immediate Value or None) when ``name`` is a const; (False, None) otherwise."""
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.types:
                return (name in scope.constants), scope.constants.get(name)
            scope = scope.parent
        return False, None

    def is_const(self, binding) -> bool:
        return binding.WhichOneof("binding") == "value" or self.constant(binding.name)[0]

    def define(self, op) -> None:
        const_op = op.type == "const" or op.type.startswith("constexpr_")
        reads_consts = not op.blocks and all(self.is_const(b) for b in _bindings(op))
        for value in op.outputs:
            self.types[value.name] = value.type
            if const_op or reads_consts:
                val = op.attributes["val"] if op.type == "const" and "val" in op.attributes else None
                immediate = val if val is not None and val.WhichOneof("value") == "immediateValue" else None
                self.constants[value.name] = immediate


class _OpReader:
    """One quantization op's operands: run-time ones, constants, dtypes and ranks."""

    def __init__(self, op, kind: QuantizationOp, scope: _Scope) -> None:
        self.op, self.kind, self.scope = op, kind, scope
        self.label = f"{op.type} '{_op_name(op)}'"

    def binding(self, param: str):
        if param not in self.op.inputs or not self.op.inputs[param].arguments:
            return None
        return self.op.inputs[param].arguments[0]

    def runtime_params(self) -> list[tuple[str, str]]:
        """(param, var name) of each parameter the op spec wants const that is not."""
        found = []
        for param in self.kind.params:
            binding = self.binding(param)
            if binding is not None and not self.scope.is_const(binding):
                found.append((param, binding.name))
        return found

    def _immediate(self, param: str):
        binding = self.binding(param)
        if binding is None:
            return None
        if binding.WhichOneof("binding") == "value":
            value = binding.value
        else:
            value = self.scope.constant(binding.name)[1]
        if value is None or value.WhichOneof("value") != "immediateValue":
            raise UnloweredQuantization(f"{self.label}: {param} is not an immediate constant")
        return value.immediateValue.tensor

    def constant_text(self, param: str) -> str:
        tensor = self._immediate(param)
        return tensor.strings.values[0] if tensor is not None and tensor.strings.values else ""

    def axis(self) -> int | None:
        tensor = self._immediate("axis")
        if tensor is None:
            return None
        if len(tensor.ints.values) != 1:
            raise UnloweredQuantization(f"{self.label}: axis is not one int32")
        return int(tensor.ints.values[0])

    def value_type(self, param: str):
        binding = self.binding(param)
        if binding.WhichOneof("binding") == "value":
            return binding.value.type
        value_type = self.scope.type_of(binding.name)
        if value_type is None or value_type.WhichOneof("type") != "tensorType":
            raise UnloweredQuantization(f"{self.label}: {param} '{binding.name}' has no tensor type")
        return value_type

    def dtype(self, param: str) -> str:
        return DTYPE_NAMES.get(self.value_type(param).tensorType.dataType, "?")

    def rank(self, param: str) -> int:
        return len(self.value_type(param).tensorType.dimensions)


# -- writing the lowering ------------------------------------------------------------------------


def _dims(value_type) -> list[int | None]:
    return [
        d.constant.size if d.WhichOneof("dimension") == "constant" else None for d in value_type.tensorType.dimensions
    ]


def _broadcast(a: list, b: list) -> list:
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    return [y if x == 1 else x if y == 1 or y is None else y if x is None else x for x, y in zip(a, b)]


def _dtype(value_type) -> str:
    return DTYPE_NAMES[value_type.tensorType.dataType]


def _reshaped(x, inputs) -> list:
    dims = _dims(x)
    size = None if None in dims else math.prod(d for d in dims if d is not None)
    return [size if d == -1 else int(d) for d in inputs["shape"]]


# op type -> the output type of the op from its input types and constant inputs
OUTPUT_TYPES = {
    **{
        op_type: (lambda t, c: tensor_type(_dtype(t["x"]), _broadcast(_dims(t["x"]), _dims(t["y"]))))
        for op_type in ("real_div", "add", "sub", "mul")
    },
    "round": lambda t, c: t["x"],
    "clip": lambda t, c: t["x"],
    "cast": lambda t, c: tensor_type(str(c["dtype"]), _dims(t["x"])),
    "reshape": lambda t, c: tensor_type(_dtype(t["x"]), _reshaped(t["x"], c)),
}


class _ProtoEmitter:
    """Emits protobuf ops into ``ops``: names ``<base>_<label>``, made unique; the result is
    ``result``. A const parameter with an immediate value is read as its array, so steps that
    only move or convert it are computed (:func:`~mil_passes.quantization.fold`); an array used
    as it was read stays the const op that holds it."""

    def __init__(self, base: str, result: str, fresh: FreshNames) -> None:
        self.base, self.result, self.fresh = base, result, fresh
        self.ops: list = []
        self.types: dict[str, ValueType] = {}
        self.const_names: dict[int, tuple[np.ndarray, str, bool]] = {}  # id -> (array, name, defined)

    def operand(self, op_reader: _OpReader, param: str) -> str | np.ndarray | None:
        """What ``param`` reads: the array of a const with an immediate value, else the var name
        (an immediate value that is not an array becomes a ``const`` op first)."""
        binding = op_reader.binding(param)
        if binding is None:
            return None
        by_name = binding.WhichOneof("binding") == "name"
        value = op_reader.scope.constant(binding.name)[1] if by_name else binding.value
        array = immediate_array(value) if value is not None else None
        if array is not None:
            read_as = (binding.name, True) if by_name else (f"{self.base}_{param}", False)
            self.const_names[id(array)] = (array, *read_as)
            return array
        if by_name:
            self.types[binding.name] = op_reader.value_type(param)
            return binding.name
        name = self.fresh.fresh(f"{self.base}_{param}")
        self.ops.append(operation("const", [(name, binding.value.type)], attributes={"val": binding.value}))
        self.types[name] = binding.value.type
        return name

    def __call__(self, op_type: str, label: str | None, **inputs) -> str | np.ndarray:
        folded = fold(op_type, label, inputs)
        if folded is not None:
            self.const_names[id(folded)] = (folded, f"{self.base}_{label}", False)
            return folded
        names = {
            param: self._name(value, f"{self.base}_{label or 'result'}_{param}") if is_constant(value) else value
            for param, value in inputs.items()
        }
        constants = {param: value for param, value in inputs.items() if is_constant(value)}
        out_type = OUTPUT_TYPES[op_type]({p: self.types[n] for p, n in names.items()}, constants)
        out = self.result if label is None else self.fresh.fresh(f"{self.base}_{label}")
        self.ops.append(operation(op_type, [(out, out_type)], names))
        self.types[out] = out_type
        return out

    def _name(self, array: np.ndarray, default: str) -> str:
        """The const op holding ``array``: the one it was read from, or a new one."""
        _, name, defined = self.const_names.get(id(array), (array, default, False))
        if not defined:
            name = self.fresh.fresh(name)
            op = const(name, array)
            self.ops.append(op)
            self.types[name] = op.outputs[0].type
            self.const_names[id(array)] = (array, name, True)
        elif name not in self.types:
            self.types[name] = immediate(array).type
        return name

    def rank(self, value) -> int:
        return np.ndim(value) if is_constant(value) else len(self.types[value].tensorType.dimensions)


def _lower(op, op_reader: _OpReader, fresh: FreshNames) -> list:
    kind = op_reader.kind
    float_dtype = op_reader.dtype(kind.float_operand)
    if float_dtype not in FLOAT_DTYPES:
        raise UnloweredQuantization(f"{op_reader.label}: {kind.float_operand} is {float_dtype}, not fp16 or fp32")
    emit = _ProtoEmitter(_op_name(op), op.outputs[0].name, fresh)
    x, scale, zero_point = (emit.operand(op_reader, p) for p in (kind.input, "scale", kind.zero_point))
    axis, rank = op_reader.axis(), op_reader.rank(kind.input)
    if kind.lower is None:  # _Lowering.lower refuses such ops before they get here
        raise UnloweredQuantization(f"{op_reader.label}: mil-passes does not lower {op.type}")
    result = kind.lower(emit, x, scale, zero_point, axis, rank, float_dtype, op_reader)
    last = emit.ops[-1]
    assert result == op.outputs[0].name == last.outputs[0].name
    if "name" in op.attributes:
        last.attributes["name"].CopyFrom(op.attributes["name"])
    last.outputs[0].type.CopyFrom(op.outputs[0].type)  # the type readers of the output were given
    return emit.ops


def _and(words: list[str]) -> str:
    return f"{', '.join(words[:-1])} and {words[-1]}" if len(words) > 1 else words[0]


def _problem(op_reader: _OpReader, runtime: list[tuple[str, str]]) -> str:
    reads = " and ".join(f"{param} from '{name}'" for param, name in runtime)
    which = "which is" if len(runtime) == 1 else "which are"
    return (
        f"{op_reader.label} reads {reads}, {which} computed at run time: {op_reader.kind.requirement} "
        f"{_and([p for p, _ in runtime])} and Core ML refuses the model when it compiles it"
    )


def _finding(op_reader: _OpReader, runtime: list[tuple[str, str]], new_ops: list) -> Finding:
    steps = _and(list(dict.fromkeys(o.type for o in new_ops if o.type != "const")))
    return Finding(
        RULE,
        "error",
        _op_name(op_reader.op),
        f"{_problem(op_reader, runtime)} (fix: mil-passes optimize lowers it to {steps}, which take run-time operands)",
    )


@dataclass
class _Lowering:
    """One walk over a program: the findings, the op types removed and added, fresh names (made
    on the first lowering: a program with nothing to lower costs one walk)."""

    spec: object
    findings: list[Finding]
    changes: Counter
    opset: int = LOWERING_OPSET
    _fresh: FreshNames | None = None

    @property
    def fresh(self) -> FreshNames:
        if self._fresh is None:
            self._fresh = FreshNames(_taken_names(self.spec))
        return self._fresh

    def block(self, block, scope: _Scope) -> None:
        rewritten, changed = [], False
        for op in list(block.operations):
            for nested in op.blocks:
                inner = _Scope(scope)
                for value in nested.inputs:
                    inner.types[value.name] = value.type
                self.block(nested, inner)
            kind = QUANTIZATION_OPS.get(op.type)
            op_reader = _OpReader(op, kind, scope) if kind is not None else None
            runtime = op_reader.runtime_params() if op_reader is not None else []
            new_ops = self.lower(op, op_reader, runtime) if op_reader is not None and runtime else [op]
            rewritten.extend(new_ops)
            changed = changed or bool(runtime)
            for defining in new_ops:  # a lowered constexpr op's output is no const any more
                scope.define(defining)
        if changed:
            copies = [MIL.Operation() for _ in rewritten]
            for copy, op in zip(copies, rewritten):
                copy.CopyFrom(op)
            del block.operations[:]
            block.operations.extend(copies)

    def lower(self, op, op_reader: _OpReader, runtime: list[tuple[str, str]]) -> list:
        if op_reader.kind.lower is None:
            raise UnloweredQuantization(f"{_problem(op_reader, runtime)}; mil-passes does not lower {op.type}")
        if self.opset < LOWERING_OPSET:
            raise UnloweredQuantization(
                f"{_problem(op_reader, runtime)}; lowering it casts int8, which MIL's cast takes from iOS17 "
                f"(opset CoreML{LOWERING_OPSET}) on, and this function's opset is CoreML{self.opset}"
            )
        new_ops = _lower(op, op_reader, self.fresh)
        self.findings.append(_finding(op_reader, runtime, new_ops))
        self.changes[op.type] += 1
        self.changes.subtract(new.type for new in new_ops if new.type != "const")
        return new_ops


def _taken_names(spec) -> set[str]:
    names: set[str] = set()

    def visit(block) -> None:
        names.update(value.name for value in block.inputs)
        for op in block.operations:
            names.add(_op_name(op))
            names.update(value.name for value in op.outputs)
            for nested in op.blocks:
                visit(nested)

    for function in spec.mlProgram.functions.values():
        names.update(value.name for value in function.inputs)
        for block in function.block_specializations.values():
            visit(block)
    return names


def lower_runtime_quantization(spec, changes: Counter | None = None) -> list[Finding]:
    """Replace, in place, every quantize/dequantize of ``spec``'s ML Program whose scale or
    zero point is not a const by ops that take run-time operands; one finding per op.
    ``changes``, if given, counts each op type removed (+1) and added (-1), consts aside.

    Raises :class:`UnloweredQuantization` (one line naming the op) for one that cannot be
    lowered: an output_dtype that is not int8/uint8, a float operand that is not fp16/fp32, a
    parameter without a tensor type, a ``constexpr_blockwise_shift_scale``, an op in a function
    older than iOS17.
    """
    lowering = _Lowering(spec, [], Counter() if changes is None else changes)
    for function in spec.mlProgram.functions.values():
        if not any(_holds_quantization(block) for block in function.block_specializations.values()):
            continue
        scope = _Scope()
        for value in function.inputs:
            scope.types[value.name] = value.type
        for opset, block in function.block_specializations.items():
            lowering.opset = _opset_number(opset)
            lowering.block(block, _Scope(scope))
    return lowering.findings


def _holds_quantization(block) -> bool:
    """Whether ``block`` or a block nested in it holds a quantization op (a quick look first:
    the full walk keeps every definition's type)."""
    return any(op.type in QUANTIZATION_OPS or any(_holds_quantization(b) for b in op.blocks) for op in block.operations)


def _opset_number(opset: str) -> int:
    """7 for ``CoreML7``; opsets named otherwise count as new enough."""
    digits = opset[len("CoreML") :] if opset.startswith("CoreML") else ""
    return int(digits) if digits.isdigit() else LOWERING_OPSET

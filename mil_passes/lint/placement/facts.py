"""What the placement rules read off an op: constness, dtypes, static shapes, the ANE axis names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from coremltools.converters.mil.mil import Function, Operation, Var, types
from coremltools.converters.mil.mil.var import InternalVar
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ...ir import iter_ops


def is_weight_op(op_type: str) -> bool:
    """An op whose output is a weight, not computed at run time: a ``const``, or a ``constexpr_*``
    (MIL's ops over consts alone, decompressed when the model loads)."""
    return op_type == "const" or op_type.startswith("constexpr_")


# The Neural Engine lays tensors out as N, D, C, H, W, the last axis innermost (ane-guide ch. 4;
# Core ML's own log "N[1-65536]D[1-16384]C[1-65536]H[1-16384]W[1-16384]", FluidInference/FluidAudio#121).
AXIS_NAMES = ("W", "H", "C", "D", "N")  # axis -1, -2, …


def is_const(var: Var) -> bool:
    """Known when the model loads: a const or a decompressed weight."""
    return var.op is not None and is_weight_op(var.op.op_type)


@dataclass(frozen=True)
class TypeFacts:
    """What the rules read of a MIL type: tensor or scalar (or neither), element type, shape."""

    value: bool  # a tensor or a scalar
    dtype: Any
    shape: tuple | None  # None for a scalar or a non-value type
    static: tuple[int, ...] | None  # the shape when every size is known


def type_facts(sym_type) -> TypeFacts:
    """What the rules read of ``sym_type`` (coremltools' type checks are slow: :class:`Reader` keeps
    the answers of one lint)."""
    if types.is_tensor(sym_type):
        shape = tuple(sym_type.get_shape())
        static = None if any(is_symbolic(d) for d in shape) else tuple(int(d) for d in shape)
        return TypeFacts(True, sym_type.get_primitive(), shape, static)
    if types.is_scalar(sym_type):
        return TypeFacts(True, sym_type, (), ())
    return TypeFacts(False, None, None, None)


def dtype_of(var: Var):
    """The element type of a tensor or scalar var, else None."""
    return type_facts(var.sym_type).dtype


def static_shape(var: Var) -> tuple[int, ...] | None:
    """The shape when every size is known, else None."""
    return type_facts(var.sym_type).static


def rank_of(var: Var) -> int | None:
    shape = type_facts(var.sym_type).shape
    return None if shape is None else len(shape)


class OpView:
    """An op's value outputs and run-time value inputs (lists flattened), with their type facts,
    and what the rules of every op ask of them (made once per op: lint reads every op)."""

    __slots__ = ("op", "outputs", "inputs", "output_dtypes", "input_dtypes", "max_rank", "max_size")

    def __init__(self, op: Operation, facts_of: Callable[[Any], TypeFacts] = type_facts) -> None:
        self.op = op
        self.outputs: list[tuple[Var, TypeFacts]] = []
        self.inputs: list[tuple[str, Var, TypeFacts]] = []
        self.output_dtypes: set = set()
        self.input_dtypes: set = set()
        self.max_rank = 0  # of the outputs; -1 when one has no rank
        self.max_size = 0  # the largest static size of an output
        for var in op.outputs:  # Var's sym_type and op through their attributes: read for every op
            facts = facts_of(var._sym_type)
            if facts.value:
                self.outputs.append((var, facts))
                self.output_dtypes.add(facts.dtype)
                if facts.shape is None:
                    self.max_rank = -1
                elif self.max_rank >= 0:
                    self.max_rank = max(self.max_rank, len(facts.shape))
                if facts.static:
                    self.max_size = max(self.max_size, *facts.static)
        for name, value in op._input_vars.items():  # op.inputs without building it (ir.input_vars)
            for var in value if isinstance(value, (list, tuple)) else (value,):
                if var is None or isinstance(var, InternalVar):
                    continue
                facts = facts_of(var._sym_type)
                producer = var._op
                if facts.value and (producer is None or not is_weight_op(producer.op_type)):
                    self.inputs.append((name, var, facts))
                    self.input_dtypes.add(facts.dtype)


class Reader:
    """The type facts of one lint, worked out once per type (a program has few: coremltools memoizes
    its tensor types), and each op's :class:`OpView`. Made per run: nothing outlives it."""

    def __init__(self) -> None:
        self._facts: dict[int, tuple[Any, TypeFacts]] = {}  # id of a type: the type (kept alive) and its facts

    def facts_of(self, sym_type) -> TypeFacts:
        entry = self._facts.get(id(sym_type))
        if entry is None:
            entry = self._facts[id(sym_type)] = (sym_type, type_facts(sym_type))
        return entry[1]

    def view(self, op: Operation) -> OpView:
        return OpView(op, self.facts_of)


class FunctionView:
    """What the program rules read of one function, worked out once: its ops (nested blocks included)
    by type, and the bytes of its weights as loaded."""

    def __init__(self, func: Function, reader: Reader | None = None) -> None:
        self.func = func
        self.reader = reader or Reader()
        self.by_type: dict[str, list[Operation]] = {}
        for op in iter_ops(func):
            self.by_type.setdefault(op.op_type, []).append(op)
        self._weight_bytes: int | None = None

    def ops_of(self, *op_types: str) -> list[Operation]:
        return [op for op_type in op_types for op in self.by_type.get(op_type, ())]

    @property
    def weight_bytes(self) -> int:
        """The bytes of every weight (consts and decompressed ``constexpr_*`` outputs) as loaded."""
        if self._weight_bytes is None:
            total = 0
            for op_type, ops in self.by_type.items():
                if not is_weight_op(op_type):
                    continue
                for op in ops:
                    for out in op.outputs:
                        facts = self.reader.facts_of(out.sym_type)
                        if facts.static is not None and facts.dtype is not None:
                            total += math.prod(facts.static) * _itemsize(facts.dtype)
            self._weight_bytes = total
        return self._weight_bytes


def _itemsize(dtype) -> int:
    return int(np.dtype(types.nptype_from_builtin(dtype)).itemsize)


def only_leaves(var: Var) -> bool:
    """Read by no op, only returned by its block."""
    return not var.child_ops and bool(var.consuming_blocks)


def axis_value(op: Operation, name: str = "axis", default: int | None = None) -> int | None:
    value = getattr(op, name, None)
    if value is None:
        return default
    return None if value.val is None else int(value.val)


#: The suffixes coremltools gives the ops of an ``ImageType``'s preprocessing (its backend pass
#: ``mil_backend::insert_image_preprocessing_ops``: ``{input}__scaled__`` = input * scale,
#: ``{input}__biased__`` = + bias).
_PREPROCESSING_SUFFIXES = ("__scaled__", "__biased__")


def added_for_interface(op: Operation) -> str | None:
    """Why ``op`` is one coremltools itself adds for the model's interface, or None: the fp32
    scale/bias of an ``ImageType`` input, and a classifier's ``classify`` (with the cast of the
    probabilities it reads). The user controls neither (only the interface's declaration), so what
    lint finds in them is information."""
    readers = op.outputs[0].child_ops if op.outputs else ()
    if op.op_type == "classify" or (op.op_type == "cast" and readers and all(r.op_type == "classify" for r in readers)):
        return "coremltools adds it for ClassifierConfig"
    name = op.outputs[0].name if op.outputs else op.name
    for suffix in _PREPROCESSING_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in _function_input_names(op):
            return "coremltools adds it for ImageType scale/bias"
    return None


def _function_input_names(op: Operation) -> set[str]:
    block = op.enclosing_block
    while block is not None and getattr(block, "outer_op", None) is not None:
        block = block.outer_op.enclosing_block
    inputs = getattr(block, "inputs", {}) if block is not None else {}
    return set(inputs) if isinstance(inputs, dict) else set()

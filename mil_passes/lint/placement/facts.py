"""What the placement rules read off an op: constness, dtypes, static shapes, the ANE axis names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.var import InternalVar
from coremltools.converters.mil.mil.types.symbolic import is_symbolic


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


_FACTS: dict[int, tuple[Any, TypeFacts]] = {}  # id of a type: the type (kept alive) and its facts


def facts_of(sym_type) -> TypeFacts:
    """The facts of ``sym_type``, worked out once per type (coremltools' type checks are slow and its
    tensor types are memoized classes, so a program has few)."""
    entry = _FACTS.get(id(sym_type))
    known = entry[1] if entry is not None else None
    if known is None:
        if types.is_tensor(sym_type):
            shape = tuple(sym_type.get_shape())
            static = None if any(is_symbolic(d) for d in shape) else tuple(int(d) for d in shape)
            known = TypeFacts(True, sym_type.get_primitive(), shape, static)
        elif types.is_scalar(sym_type):
            known = TypeFacts(True, sym_type, (), ())
        else:
            known = TypeFacts(False, None, None, None)
        _FACTS[id(sym_type)] = (sym_type, known)
    return known


def tensor_vars(vars_) -> list[Var]:
    return [v for v in vars_ if isinstance(v, Var) and facts_of(v.sym_type).value]


def dtype_of(var: Var):
    """The element type of a tensor or scalar var, else None."""
    return facts_of(var.sym_type).dtype


def static_shape(var: Var) -> tuple[int, ...] | None:
    """The shape when every size is known, else None."""
    return facts_of(var.sym_type).static


def rank_of(var: Var) -> int | None:
    shape = facts_of(var.sym_type).shape
    return None if shape is None else len(shape)


class OpView:
    """An op's value outputs and run-time value inputs (lists flattened), with their type facts,
    and what the rules of every op ask of them (made once per op: lint reads every op)."""

    __slots__ = ("op", "outputs", "inputs", "output_dtypes", "input_dtypes", "max_rank", "max_size")

    def __init__(self, op: Operation) -> None:
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


_LAST: list[OpView | None] = [None]  # the rules of one op ask in turn: its view is made once


def view(op: Operation) -> OpView:
    last = _LAST[0]
    if last is None or last.op is not op:
        last = _LAST[0] = OpView(op)
    return last


def forget() -> None:
    """Drop the last view (it would keep its program alive)."""
    _LAST[0] = None


def data_inputs(op: Operation, skip: frozenset[str] = frozenset()) -> list[tuple[str, Var]]:
    """``op``'s run-time tensor inputs by name (lists flattened), but for the names in ``skip``."""
    return [(name, var) for name, var, _ in view(op).inputs if name not in skip]


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

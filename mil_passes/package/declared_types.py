"""Declared value types against the types each op's inputs give.

A converter writes every op output's type into the protobuf, and Core ML's compiler checks
them: the pywebnn MobileNetV2 failed with "Param x has incorrect type for operator ios17.conv
... got tensor<fp32, [1]>" because its converter declared ``[1]`` for a ``[1, 32, 112, 112]``
value (docs/evidence.md §2). coremltools' loader only asserts "Mismatch between var types", naming
nothing. Here the program is loaded with the declared types set aside
(:func:`declared_types_set_aside`), pymil infers each op's types from its inputs,
:func:`repair_types` fills the holes of coremltools' inference (``INFERENCE_HOLES``), and
:func:`declared_type_findings` reports every op output whose declared type contradicts the
inferred one, naming the op and both types. The program keeps the inferred types, so a package
saved from it is fixed.

Declared and inferred types contradict when their kind, dtype or rank differ, when a dim is a
different constant in each, or when a dim known only at run time is declared 0. A dim declared
unknown never contradicts.
"""

from __future__ import annotations

import contextlib
import types as python_types
from typing import Iterable, Iterator
from unittest import mock

from coremltools.converters.mil.frontend.milproto import load as milproto_load
from coremltools.converters.mil.mil import Block, Operation, Program, Var, types
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic

from ..type_repair import INFERENCE_HOLES, repair_types, reshape_output_shape, select_output_shape  # noqa: F401
from ..lint.findings import Finding

Dims = tuple  # of int (a constant) or None (known only at run time)


@contextlib.contextmanager
def declared_types_set_aside() -> Iterator[None]:
    """Within this block coremltools' milproto loader accepts op outputs whose declared types
    disagree with pymil's; :func:`declared_type_findings` compares them afterwards, by name."""
    tolerant = python_types.SimpleNamespace(**vars(types))
    tolerant.is_compatible_type = lambda inferred, declared: True
    with mock.patch.object(milproto_load, "types", tolerant):
        yield


# -- comparing ---------------------------------------------------------------------------------


def declared_type(value_type) -> tuple[str, str, Dims] | None:
    """(kind, dtype, dims) of a protobuf ValueType; None for lists, dicts and states."""
    if value_type.WhichOneof("type") != "tensorType":
        return None
    tensor = value_type.tensorType
    dtype = types.builtin_to_string(types.PROTO_TO_BUILTIN_TYPE[tensor.dataType])
    dims = tuple(d.constant.size if d.WhichOneof("dimension") == "constant" else None for d in tensor.dimensions)
    return "tensor", dtype, dims


def inferred_type(var: Var) -> tuple[str, str, Dims] | None:
    sym_type = var.sym_type
    if types.is_tensor(sym_type):
        if any_variadic(var.shape):
            return None
        dims = tuple(None if is_symbolic(d) else int(d) for d in var.shape)
        return "tensor", types.builtin_to_string(var.dtype), dims
    if types.is_scalar(sym_type):
        return "tensor", types.builtin_to_string(sym_type), ()
    return None


def type_text(kind_dtype_dims: tuple[str, str, Dims]) -> str:
    """MIL's text form, ``?`` for a dim known only at run time: ``tensor<fp32, [?, 4]>``."""
    _, dtype, dims = kind_dtype_dims
    if not dims:
        return dtype
    return f"tensor<{dtype}, [{', '.join('?' if d is None else str(d) for d in dims)}]>"


def contradicts(declared: tuple[str, str, Dims], inferred: tuple[str, str, Dims]) -> bool:
    """True when no value can have both types (see the module docstring)."""
    if declared[:2] != inferred[:2] or len(declared[2]) != len(inferred[2]):
        return True
    for said, computed in zip(declared[2], inferred[2]):
        if said is None:
            continue
        if computed is None and said == 0:
            return True
        if computed is not None and said != computed:
            return True
    return False


def _declared_types(block, path: tuple, found: dict) -> None:
    for op in block.operations:
        for value in op.outputs:
            found[path + (value.name,)] = value.type
        first = op.outputs[0].name if op.outputs else op.type
        for index, nested in enumerate(op.blocks):
            _declared_types(nested, path + ((first, index),), found)


def declared_type_findings(spec, prog: Program, repaired: Iterable[Operation] = ()) -> list[Finding]:
    """A ``declared-type-mismatch`` error per op output whose type in ``spec`` contradicts the
    type ``prog`` (loaded from ``spec``) infers; ``repaired`` are the ops :func:`repair_types`
    gave a type coremltools' inference got wrong."""
    declared: dict[tuple, object] = {}
    for name, function in spec.mlProgram.functions.items():
        _declared_types(function.block_specializations[function.opset], (name,), declared)
    findings: list[Finding] = []
    repaired_ops = set(repaired)
    for name, func in prog.functions.items():
        _compare_block(func, (name,), declared, repaired_ops, findings)
    return findings


def _compare_block(block: Block, path: tuple, declared: dict, repaired: set, findings: list) -> None:
    for op in block.operations:
        if op.op_type != "const":
            for var in op.outputs:
                value_type = declared.get(path + (var.name,))
                said = declared_type(value_type) if value_type is not None else None
                computed = inferred_type(var)
                if said is not None and computed is not None and contradicts(said, computed):
                    findings.append(_finding(op, var, said, computed, op in repaired))
        first = op.outputs[0].name if op.outputs else op.op_type
        for index, nested in enumerate(op.blocks):
            _compare_block(nested, path + ((first, index),), declared, repaired, findings)


def _finding(op: Operation, var: Var, said, computed, repaired: bool) -> Finding:
    why = f"; {INFERENCE_HOLES[op.op_type][1]}" if repaired else ""
    return Finding(
        "declared-type-mismatch",
        "error",
        op.name,
        f"{op.op_type} '{op.name}' declares '{var.name}' as {type_text(said)}, but its inputs give "
        f"{type_text(computed)}{why} (Core ML's compiler checks declared types; a package saved "
        "by mil-passes carries the inferred one)",
    )

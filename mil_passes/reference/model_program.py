"""The MIL program of an ``MLModel``: the one ``predict`` and ``make_state`` interpret.

It is the model's own MIL program when it has one (an ``MLModel`` from ``ct.convert``), else it is
loaded once from the model's protobuf and weights (an ``MLModel`` loaded from a package) and
remembered for as long as the model lives. Only the interpreter holds a loaded program, so its
consts are frozen and its compressed weights decoded in place (:func:`decode_compressed_weights`):
an int4 model then holds its fp16 weights alone, as the uncompressed model does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import weakref
from typing import Any

from coremltools.converters.mil.mil import Program, Var

from ..type_repair import repair_types
from .decoded import DECODED_OPS, read_only
from .frozen import freeze_consts
from .interpreter import const_op_outputs
from .memory import decoded_bytes, interpretation_bytes, require, weight_file_bytes

__all__ = ["NotAnMLProgramError", "model_program", "spec_of", "description_of", "program_of"]

_LOADED: "weakref.WeakKeyDictionary[Any, Program]" = weakref.WeakKeyDictionary()
_FITS: "weakref.WeakSet[Program]" = weakref.WeakSet()  # programs found to fit in memory


class NotAnMLProgramError(ValueError):
    """The model is not an ML Program, so it has no MIL program to interpret."""


def model_program(model: Any) -> tuple[Program, str]:
    """The MIL program ``predict`` runs for ``model``, and the name of the function it calls."""
    spec = spec_of(model)
    kind = spec.WhichOneof("Type")
    if kind != "mlProgram":
        raise NotAnMLProgramError(f"this model is a '{kind}' model, which has no MIL program")
    _, function_name = description_of(model, spec)
    return program_of(model, spec), function_name


def _label(model: Any) -> str:
    path = getattr(model, "package_path", None)
    return str(path) if path and not getattr(model, "is_temp_package", False) else "the model"


def spec_of(model: Any):
    spec = getattr(model, "_spec", None)
    if spec is None:
        if not hasattr(model, "get_spec"):
            raise TypeError(f"predict() needs a coremltools MLModel, got {type(model).__name__}")
        spec = model.get_spec()
    return spec


def description_of(model: Any, spec) -> tuple[Any, str]:
    description = spec.description
    if not description.functions:
        return description, "main"
    name = getattr(model, "function_name", None) or description.defaultFunctionName
    for function in description.functions:
        if function.name == name:
            return function, name
    raise ValueError(f"the model has no function '{name}'")


def program_of(model: Any, spec) -> Program:
    """``model``'s program. Raises :class:`~.memory.NotEnoughMemoryError` when loading or
    interpreting it would need more memory than the machine has available (checked once per
    program, before its weights are loaded and before it is first interpreted)."""
    prog = _program_of(model, spec)
    if prog not in _FITS:
        require(interpretation_bytes(prog), "interpreting it", _label(model))
        _FITS.add(prog)
    return prog


def _program_of(model: Any, spec) -> Program:
    prog = getattr(model, "_mil_program", None)
    if isinstance(prog, Program):
        return prog
    prog = _LOADED.get(model)
    if prog is None:
        from coremltools.converters.mil.frontend.milproto.load import load

        weights_dir = getattr(model, "weights_dir", None) or ""
        parts = {"weights": weight_file_bytes(weights_dir), "compressed weights decoded": decoded_bytes(spec)}
        require(parts, "loading it", _label(model))
        prog = load(
            model_spec=spec,
            specification_version=spec.specificationVersion,
            file_weights_dir=str(weights_dir),
        )
        repair_types(prog)  # the loader re-infers types, and types a reshape's 0 target literally
        freeze_consts(prog)  # only the interpreter holds it: what is worked out from a weight holds
        decode_compressed_weights(prog)
        _LOADED[model] = prog
    return prog


def decode_compressed_weights(prog: Program) -> None:
    """Replace each top-level ``constexpr_*`` op of ``prog`` that reads consts only by consts of
    its decoded values (read-only, the values an evaluation computes), one op at a time, and drop
    the compressed inputs no other op reads: for a program only the interpreter holds, so that an
    int4 weight is not kept beside its decoded fp16 form. Ops whose outputs a block returns stay."""
    from coremltools.converters.mil import Builder as mb

    decoded_any = False
    for function in prog.functions.values():
        returned = set(function.outputs)
        for op in list(function.operations):
            if op.op_type not in DECODED_OPS or returned.intersection(op.outputs):
                continue
            inputs = [var for var in op._input_vars.values() if var is not None]
            if not all(isinstance(var, Var) and var.op is not None and var.op.op_type == "const" for var in inputs):
                continue
            sources = [var.op for var in inputs]
            values = const_op_outputs(op)
            with function:
                for var, value in zip(op.outputs, values):
                    weight = mb.const(val=read_only(value), before_op=op, name=var.name)
                    function.replace_uses_of_var_after_op(anchor_op=op, old_var=var, new_var=weight, force_replace=True)
            function.remove_ops([op])
            unread = [source for source in dict.fromkeys(sources) if not source.outputs[0].child_ops]
            function.remove_ops(unread)
            for source in unread:  # a removed op lives on in reference cycles: its array goes now
                for held in (*source.outputs, *(v for v in source._input_vars.values() if v is not None)):
                    held._sym_val = None
            decoded_any = True
    freeze_consts(prog)
    if decoded_any:
        _return_freed_memory()


def _return_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc keeps the compressed inputs' pages)."""
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator returns pages its own way
        pass

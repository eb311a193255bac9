"""The MIL program of an ``MLModel``: the one ``predict`` and ``make_state`` interpret.

It is the model's own MIL program when it has one (an ``MLModel`` from ``ct.convert``), else it is
loaded once from the model's protobuf and weights (an ``MLModel`` loaded from a package) and
remembered for as long as the model lives.
"""

from __future__ import annotations

import weakref
from typing import Any

from coremltools.converters.mil.mil import Program

from ..inference import repair_types
from .frozen import freeze_consts
from .memory import interpretation_bytes, require, weight_file_bytes

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
        require({"weights": weight_file_bytes(weights_dir)}, "loading it", _label(model))
        prog = load(
            model_spec=spec,
            specification_version=spec.specificationVersion,
            file_weights_dir=str(weights_dir),
        )
        repair_types(prog)  # the loader re-infers types, and types a reshape's 0 target literally
        freeze_consts(prog)  # only the interpreter holds it: what is worked out from a weight holds
        _LOADED[model] = prog
    return prog

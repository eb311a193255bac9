"""Core ML models to pymil and back: ``.mlpackage`` folders, or ``.mlmodel`` files holding an ML Program.

``read(path)`` checks the files (``files``: paths stay inside the package, weight
references fit their files), reads the protobuf, makes its names unambiguous
(``duplicate_names``), lowers quantize/dequantize ops whose scale or zero point is computed at
run time to ops Core ML accepts (``runtime_quantization``), builds the Program with coremltools'
milproto loader, and compares the declared types with the inferred ones (``declared_types``).
``load(path)`` is its Program.

``save(prog, path, like=source)`` writes ``prog`` with the source's model description (input
and output names, types, shape ranges, enumerated shapes, metadata, author/license/version
strings) and specification version, through coremltools' MIL backend alone: no pass runs, not
even the backend pipeline's fusions, so a load+save round trip writes the same protobuf and
the same weight bytes. The package is written next to ``path`` and renamed at the end.
"""

from __future__ import annotations

import errno
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import coremltools as ct
from coremltools import proto
from coremltools.converters.mil.backend.mil.load import load as export_program
from coremltools.converters.mil.frontend.milproto import load as milproto_load
from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

from .declared_types import (
    contradicts,
    declared_type_findings,
    declared_types_set_aside,
    inferred_type,
    repair_types,
)
from ..lint import DimNames, Finding, by_severity, lint_report
from ..lint.placement import Placement
from ..lint.dims import ranges_of_description
from .atomic import remove_stale_staging, replacing, scratch_folder
from .files import (
    MANIFEST,
    ModelFiles,
    PackageError,
    check_weights,
    loaded_weight_bytes,
    locate,
    path_problem,
    read_spec,
)
from ..reference.memory import require
from .layout import write_package
from .duplicate_names import InterfaceClash, UndefinedName, fix_duplicate_names
from .runtime_quantization import UnloweredQuantization, lower_runtime_quantization
from ..ir import iter_blocks, iter_ops, iter_proto_ops

__all__ = [
    "Package",
    "PackageError",
    "read",
    "load",
    "save",
    "save_program",
    "check_output_path",
    "copy_program",
    "write_new",
    "build_program",
]

ARRAY_DTYPES = {"fp32": "FLOAT32", "fp16": "FLOAT16", "int32": "INT32", "fp64": "DOUBLE", "int8": "INT8"}


@dataclass
class Package:
    """A model read from disk: its protobuf (names made unique, run-time quantization parameters
    lowered), its Program, and what the protobuf check found (``duplicate-name``,
    ``dynamic-quantization-param``, ``declared-type-mismatch``); ``op_changes`` counts the op
    types those repairs removed (+) and added (-), so op counts can be given as the file has them."""

    path: Path
    spec: "proto.Model_pb2.Model"
    program: Program
    findings: list[Finding] = field(default_factory=list)
    files: ModelFiles | None = None
    op_changes: Counter = field(default_factory=Counter)

    def lint(self, chip: str | None = None) -> list[Finding]:
        """The protobuf check's findings and :func:`~mil_passes.lint.lint`'s, errors first; run-time
        dims named by the inputs and ranges the model declares."""
        return self.lint_report(chip)[0]

    def lint_report(self, chip: str | None = None) -> tuple[list[Finding], Placement]:
        """:meth:`lint`'s findings and the predicted Neural Engine placement (``chip``: one chip's family)."""
        dims = DimNames.of_program(self.program, ranges_of_description(self.spec.description))
        findings, placement = lint_report(self.program, dims=dims, chip=chip)
        return by_severity(self.findings + findings), placement


def read(path: str | Path) -> Package:
    """Read ``path`` without trusting it; raises :class:`PackageError` (one line naming the path), or
    :class:`~mil_passes.reference.memory.NotEnoughMemoryError` before loading weights the machine
    has no room for."""
    files = locate(path)
    spec = read_spec(files)
    check_weights(spec, files)
    require({"weights": loaded_weight_bytes(spec)}, "reading it", str(files.path))
    op_changes: Counter = Counter()
    try:
        findings = fix_duplicate_names(spec)
        findings += lower_runtime_quantization(spec, op_changes)
    except (InterfaceClash, UndefinedName, UnloweredQuantization) as error:
        raise PackageError(f"{files.path}: {error}") from None
    program = _build(spec, files)
    try:
        repaired = repair_types(program)
    except Exception as error:  # noqa: BLE001 - pymil re-inference can raise anything
        raise PackageError(f"{files.path}: cannot infer the types of the program: {_one_line(error)}") from None
    findings += declared_type_findings(spec, program, repaired)
    return Package(files.path, spec, program, findings, files, op_changes)


def load(path: str | Path) -> Program:
    """The Program of the model at ``path`` (see :func:`read`)."""
    return read(path).program


def build_program(spec, like: Package) -> Program:
    """The Program of ``spec``, a protobuf edited from ``like``'s (read with ``like``'s weights)."""
    if like.files is None:
        raise ValueError("the package was not read from disk: its weights are unknown")
    program = _program_of(spec, like.files.weights_dir, like.path)
    repair_types(program)
    return program


def _build(spec, files: ModelFiles) -> Program:
    return _program_of(spec, files.weights_dir, files.path)


def _program_of(spec, weights_dir: str | Path, label: str | Path) -> Program:
    try:
        with declared_types_set_aside():
            program = milproto_load.load(
                model_spec=spec,
                specification_version=spec.specificationVersion,
                file_weights_dir=str(weights_dir),
            )
    except Exception as error:  # noqa: BLE001 - coremltools' loader raises any type on bad input
        raise PackageError(f"{label}: coremltools cannot build the program: {_one_line(error)}") from None
    _drop_loader_placeholders(program, _defined_names(spec))
    return program


def copy_program(prog: Program) -> Program:
    """A new Program equal to ``prog``, rebuilt from its protobuf (``copy.deepcopy`` recurses too
    deep past ~1,000 ops): coremltools' MIL backend writes it, no pass runs, and the milproto
    loader reads it back as :func:`read` does. ``prog`` is not modified."""
    version = max(int(func.opset_version) for func in prog.functions.values())
    with scratch_folder("copy") as weights:
        spec = export_program(prog, weights, specification_version=version)
        spec.specificationVersion = version
        try:
            fix_duplicate_names(spec)
        except (InterfaceClash, UndefinedName) as error:
            raise PackageError(f"cannot copy the program: {error}") from None
        copied = _program_of(spec, weights, "copy")
    repair_types(copied)
    return copied


def _defined_names(spec) -> Counter:
    """How many ops of the protobuf define each var name (all functions, nested blocks too)."""
    return Counter(value.name for op in iter_proto_ops(spec) for value in op.outputs)


def _drop_loader_placeholders(program: Program, defined: Counter) -> None:
    """Remove the unused ``const`` ops coremltools' loader adds as stand-in parents of nested
    blocks (they are not in the protobuf; left in, every round trip would add them).

    They are told apart by count, not by name: a placeholder gets the builder's next free name
    (``const_0``, ``const_1``, ... from a counter shared by the whole process), which may be a
    name the file itself uses. Every unused const beyond the number of ops the protobuf has
    with its name is a placeholder (two unused consts of one name are both dead code, so which
    one goes does not change the program)."""
    excess = Counter(var.name for op in iter_ops(program) for var in op.outputs)
    excess.subtract(defined)
    for block in iter_blocks(program):
        placeholders = []
        for op in block.operations:
            name = op.outputs[0].name if op.op_type == "const" else None
            if name is None or excess[name] <= 0:
                continue
            if not op.outputs[0].child_ops and op.outputs[0] not in block.outputs:
                placeholders.append(op)
                excess[name] -= 1
        if placeholders:
            block.remove_ops(placeholders)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def save(
    prog: Program,
    path: str | Path,
    *,
    like: Package | str | Path | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``prog`` as a ``.mlpackage`` at ``path``, with the description and specification
    version of ``like`` (a :class:`Package`, a model path, or a Model protobuf).

    Without ``like`` the description is made from the program's interface. Output types in the
    description that contradict the program's are replaced by the program's, and ops whose
    type coremltools' inference gets wrong (``declared_types.INFERENCE_HOLES``; a pass may have
    built one) get their computed type first. Raises
    :class:`PackageError` for a path that is not ``.mlpackage``, whose folder is missing, or
    that exists (unless ``overwrite``; never replaces what is not an ``.mlpackage``), and
    ``ValueError`` when ``prog``'s inputs or outputs are not those ``like`` describes.
    """
    path = check_output_path(path, overwrite=overwrite)
    source = _like_spec(like)
    repair_types(prog)
    with replacing(path) as staged:
        _export_and_write(prog, source, staged)
    return path


def write_new(
    prog: Program, path: str | Path, *, like: "Package | str | Path | proto.Model_pb2.Model | None" = None
) -> None:
    """:func:`save` without its checks and its staging: write ``prog`` as a new ``.mlpackage``
    folder at ``path``, which must not exist. For a caller that stages the write itself
    (:func:`~mil_passes.package.atomic.replacing`)."""
    source = _like_spec(like)
    repair_types(prog)
    _export_and_write(prog, source, Path(path))


def check_output_path(path: str | Path, *, overwrite: bool = False) -> Path:
    """``path`` as a place a package can be written; raises :class:`PackageError` if it is not.

    First removes the staging folders a killed run left beside ``path``
    (:func:`~mil_passes.package.atomic.remove_stale_staging`), which may put back a package that
    run had moved aside, so "already exists" is said of what is really there."""
    path = Path(path)
    if path.suffix != ".mlpackage":
        raise PackageError(f"{path}: an ML Program is written as a folder named *.mlpackage")
    try:
        os.stat(path.parent)
    except OSError as error:
        problem = "does not exist" if error.errno == errno.ENOENT else f"cannot be used: {path_problem(error)}"
        raise PackageError(f"{path}: the folder '{path.parent}' {problem}") from None
    if not path.parent.is_dir():
        raise PackageError(f"{path}: '{path.parent}' is not a folder")
    remove_stale_staging(path.parent)  # first: it may put back a package a killed run moved aside
    if path.is_symlink():
        try:
            os.stat(path)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise PackageError(f"{path}: {path_problem(error)}; not writing there") from None
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise PackageError(f"{path}: already exists (--force replaces it)")
        if path.is_symlink() or not (path.is_dir() and (path / MANIFEST).is_file()):
            raise PackageError(f"{path}: exists and is not an .mlpackage; not replacing it")
    return path


def _like_spec(like) -> "proto.Model_pb2.Model | None":
    if like is None:
        return None
    if isinstance(like, Package):
        return like.spec
    if isinstance(like, proto.Model_pb2.Model):
        return like
    return read_spec(locate(like))


def _export_and_write(prog: Program, source, path: Path) -> None:
    """Write ``prog`` as a new package folder at ``path`` (not staged)."""
    if source is None:
        version = max(int(func.opset_version) for func in prog.functions.values())
        description = None
    else:
        version = source.specificationVersion
        description = proto.Model_pb2.ModelDescription()
        description.CopyFrom(source.description)
        _check_interface(prog, description)
        _reconcile_output_types(prog, description)

    def export(weights: str):
        model = export_program(prog, weights, specification_version=version, model_description=description)
        if source is not None and "buildInfo" in source.mlProgram.attributes:
            model.mlProgram.attributes["buildInfo"].CopyFrom(source.mlProgram.attributes["buildInfo"])
        return model

    write_package(path, export)


def _main_function_name(description) -> str:
    return description.defaultFunctionName or "main"


def _check_interface(prog: Program, description) -> None:
    if description.functions:
        return  # multifunction descriptions are kept as they are
    func = prog.functions.get(_main_function_name(description))
    if func is None:
        raise ValueError(f"the program has no function '{_main_function_name(description)}'")
    described_inputs = sorted([f.name for f in description.input] + [f.name for f in description.state])
    if described_inputs != sorted(func.inputs):
        raise ValueError(f"the program's inputs {sorted(func.inputs)} are not the described {described_inputs}")
    outputs = [var.name for var in func.outputs]
    described_outputs = [f.name for f in description.output]
    if outputs != described_outputs:
        raise ValueError(f"the program's outputs {outputs} are not the described {described_outputs}")


def _reconcile_output_types(prog: Program, description) -> None:
    """Replace output array types the program contradicts (e.g. a literal 0 coremltools wrote)."""
    if description.functions:
        return
    func = prog.functions[_main_function_name(description)]
    for feature, var in zip(description.output, func.outputs):
        if feature.type.WhichOneof("Type") != "multiArrayType":
            continue
        array = feature.type.multiArrayType
        computed = inferred_type(var)
        dtype = ARRAY_DTYPES.get(computed[1]) if computed else None
        if computed is None or dtype is None:
            continue
        said_dtype = proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(array.dataType)
        shape_wrong = bool(array.shape) and contradicts(("tensor", computed[1], tuple(array.shape)), computed)
        if said_dtype != dtype:
            array.dataType = proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Value(dtype)
        if shape_wrong:
            del array.shape[:]
            if all(d is not None for d in computed[2]):
                array.shape.extend(computed[2])


def save_program(prog: Program, path: str | Path, *, target=ct.target.iOS17) -> Path:
    """Save ``prog`` as an ML Program package at ``path`` through ``ct.convert`` with the EMPTY
    pipeline (coremltools' backend passes still run), replacing what is there.

    Writes next to ``path`` first and renames at the end: no partial package on failure.
    ``ct.convert`` mutates the program it is given, so pass one you no longer need.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = ct.convert(
        prog,
        convert_to="mlprogram",
        pass_pipeline=PassPipeline.EMPTY,
        minimum_deployment_target=target,
        skip_model_load=True,
    )
    with replacing(path) as written:
        model.save(str(written))
    return path

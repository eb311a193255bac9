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
from typing import Any

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
    PIPELINE_KINDS,
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
from .functions import (
    default_function,
    function_description,
    function_names,
    function_view,
    is_multifunction,
    merged_placement,
)
from .pipelines import Stage, lint_stages, read_stages, write_stages
from .shared_weights import share_identical_weights

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
    "write_pipeline",
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
    #: A pipeline's stages in order (empty for a model of one program; ``program`` is then the
    #: first ML Program stage's)
    stages: list[Stage[Package]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The model's type as Model.proto names it: ``mlProgram``, ``pipeline``, …"""
        return str(self.spec.WhichOneof("Type"))

    def lint(self, chip: str | None = None) -> list[Finding]:
        """The protobuf check's findings and :func:`~mil_passes.lint.lint`'s, errors first; run-time
        dims named by the inputs and ranges the model declares."""
        return self.lint_report(chip)[0]

    def lint_report(self, chip: str | None = None) -> tuple[list[Finding], Placement]:
        """:meth:`lint`'s findings and the predicted Neural Engine placement (``chip``: one chip's
        family). Each function of a multifunction model is linted as Core ML reads it, alone
        (its findings name it), and each ML Program stage of a pipeline (its findings name the
        stage; a stage of another type is one finding, ``not-ml-program-stage``); the placement
        then counts every function's and stage's ops."""
        if self.stages:
            return lint_stages(self.stages, chip)
        findings, placements = list(self.findings), []
        for name in function_names(self.program):
            view = function_view(self.program, name)
            description = function_description(self.spec, name)
            dims = DimNames.of_program(view, ranges_of_description(description))
            found, placement = lint_report(view, dims=dims, chip=chip)
            if is_multifunction(self.program):
                found = [finding.located(function=name) for finding in found]
            findings += found
            placements.append(placement)
        return by_severity(findings), merged_placement(placements)


def read(path: str | Path) -> Package:
    """Read ``path`` without trusting it; raises :class:`PackageError` (one line naming the path), or
    :class:`~mil_passes.reference.memory.NotEnoughMemoryError` before loading weights the machine
    has no room for. A pipeline (``pipeline``, ``pipelineClassifier``, ``pipelineRegressor``) is read
    stage by stage: :attr:`Package.stages` (see :mod:`.pipelines`)."""
    files = locate(path)
    spec = read_spec(files)
    if spec.WhichOneof("Type") in PIPELINE_KINDS:
        return _read_pipeline(files, spec)
    return _read_program(files, spec, str(files.path))


def _read_pipeline(files: ModelFiles, spec) -> Package:
    """The pipeline ``spec``: a Package whose :attr:`~Package.stages` hold each stage; its
    ``program`` is the first ML Program stage's."""
    stages = read_stages(files, spec, _read_program)
    first = next(stage.package for stage in stages if stage.package is not None)
    return Package(files.path, spec, first.program, [], files, first.op_changes, stages)


def _read_program(files: ModelFiles, spec, label: str) -> Package:
    """The :class:`Package` of ``spec``, an ML Program (a model's, or a pipeline stage's: ``label``
    names it in errors), its weights in ``files``."""
    check_weights(spec, files)
    require({"weights": loaded_weight_bytes(spec)}, "reading it", label)
    op_changes: Counter = Counter()
    try:
        findings = fix_duplicate_names(spec)
        findings += lower_runtime_quantization(spec, op_changes)
    except (InterfaceClash, UndefinedName, UnloweredQuantization) as error:
        raise PackageError(f"{label}: {error}") from None
    program = _program_of(spec, files.weights_dir, label)
    try:
        repaired = repair_types(program)
    except Exception as error:  # noqa: BLE001 - pymil re-inference can raise anything
        raise PackageError(f"{label}: cannot infer the types of the program: {_one_line(error)}") from None
    findings += declared_type_findings(spec, program, repaired)
    return Package(files.path, spec, program, findings, files, op_changes)


def load(path: str | Path) -> Program:
    """The Program of the model at ``path`` (see :func:`read`); a pipeline has one per stage:
    :class:`PackageError` (read it with :func:`read`)."""
    package = read(path)
    if package.stages:
        raise PackageError(f"{path}: a {package.kind} model holds a program per stage; read(path).stages has them")
    return package.program


def build_program(spec, like: Package) -> Program:
    """The Program of ``spec``, a protobuf edited from ``like``'s (read with ``like``'s weights)."""
    if like.files is None:
        raise ValueError("the package was not read from disk: its weights are unknown")
    program = _program_of(spec, like.files.weights_dir, like.path)
    repair_types(program)
    return program


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
    program.default_function_name = spec.description.defaultFunctionName or "main"
    program.export_as_multifunction = bool(spec.description.functions)
    described = [f.name for f in spec.description.functions if f.name in program.functions]
    if described:  # the description's order (the protobuf's map of functions has none)
        program.functions = {name: program.functions[name] for name in described + list(program.functions)}
    return program


def copy_program(prog: Program) -> Program:
    """A new Program equal to ``prog``, rebuilt from its protobuf (``copy.deepcopy`` recurses too
    deep past ~1,000 ops): coremltools' MIL backend writes it, no pass runs, and the milproto
    loader reads it back as :func:`read` does. ``prog`` is not modified."""
    version = max(int(func.opset_version) for func in prog.functions.values())
    with scratch_folder("copy") as weights:
        spec = export_program(prog, weights, specification_version=version)
        spec.specificationVersion = version
        spec.description.defaultFunctionName = default_function(prog) if is_multifunction(prog) else ""
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
    write_package(path, lambda weights: _exported(prog, source, weights))


def write_pipeline(package: Package, path: str | Path) -> None:
    """Write the pipeline ``package`` (read by :func:`read`: its :attr:`~Package.stages`) as a new
    package folder at ``path`` (not staged): each ML Program stage's program in its place, with
    its description; every other stage and the pipeline's own description as they were."""

    def export(weights: str):
        return write_stages(
            package.spec,
            package.stages,
            Path(weights),
            lambda stage, folder: _exported(stage.program, stage.spec, folder),
        )

    write_package(Path(path), export)


def _exported(prog: Program, source, weights: str):
    """``prog``'s Model protobuf, its weights written into the folder ``weights``: with ``source``'s
    description (checked against ``prog``'s interface, output types the program contradicts
    replaced), specification version and build info; shared weights written once."""
    if source is None:
        version = max(int(func.opset_version) for func in prog.functions.values())
        description = None
    else:
        version = source.specificationVersion
        description = proto.Model_pb2.ModelDescription()
        description.CopyFrom(source.description)
        _check_interface(prog, description)
        _reconcile_output_types(prog, description)
        prog.default_function_name = description.defaultFunctionName or "main"
    if is_multifunction(prog):
        share_identical_weights(prog, version)
    model = export_program(prog, weights, specification_version=version, model_description=description)
    if source is not None and "buildInfo" in source.mlProgram.attributes:
        model.mlProgram.attributes["buildInfo"].CopyFrom(source.mlProgram.attributes["buildInfo"])
    return model


def _described_functions(description) -> list[tuple[str, Any]]:
    """``(function name, its description)``: each of a multifunction model, or ``main``'s."""
    if description.functions:
        return [(described.name, described) for described in description.functions]
    return [(description.defaultFunctionName or "main", description)]


def _check_interface(prog: Program, description) -> None:
    """``prog`` has the functions ``description`` names, each with its described inputs (states
    included), outputs and order; and the default function it names."""
    described_names = [name for name, _ in _described_functions(description)]
    if description.functions and sorted(described_names) != sorted(prog.functions):
        raise ValueError(
            f"the program's functions {sorted(prog.functions)} are not the described {sorted(described_names)}"
        )
    for name, described in _described_functions(description):
        func = prog.functions.get(name)
        if func is None:
            raise ValueError(f"the program has no function '{name}'")
        where = f"function '{name}': " if description.functions else ""
        described_inputs = sorted([f.name for f in described.input] + [f.name for f in described.state])
        if described_inputs != sorted(func.inputs):
            raise ValueError(
                f"{where}the program's inputs {sorted(func.inputs)} are not the described {described_inputs}"
            )
        outputs = [var.name for var in func.outputs]
        described_outputs = [f.name for f in described.output]
        if outputs != described_outputs:
            raise ValueError(f"{where}the program's outputs {outputs} are not the described {described_outputs}")


def _reconcile_output_types(prog: Program, description) -> None:
    """Replace output array types the program contradicts (e.g. a literal 0 coremltools wrote),
    in every function's description."""
    for name, described in _described_functions(description):
        for feature, var in zip(described.output, prog.functions[name].outputs):
            _reconcile_output_type(feature, var)


def _reconcile_output_type(feature, var) -> None:
    if feature.type.WhichOneof("Type") != "multiArrayType":
        return
    array = feature.type.multiArrayType
    computed = inferred_type(var)
    dtype = ARRAY_DTYPES.get(computed[1]) if computed else None
    if computed is None or dtype is None:
        return
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

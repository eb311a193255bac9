"""Find a model's protobuf and weight files without trusting the package they come in.

An ``.mlpackage`` is a folder: ``Manifest.json`` names the root model file by a path under
``Data/``, and the model's weights sit in ``weights/`` beside that file, referenced from the
protobuf as ``@model_path/weights/<file>`` plus a byte offset. ``ct.models.MLModel`` follows
whatever the manifest says, even ``../../outside/model.mlmodel`` (docs/evidence.md §3). Here every
path is checked to stay inside the package (no absolute path, no ``..``, no symlink on the way)
and every weight reference is checked against its file's blob header before anything reads
the file. Nothing in a package is executed: it is parsed as JSON and protobuf only, and every
string of it that becomes a path, and the manifest's JSON, is checked first (``untrusted``).

Every problem is a :class:`~mil_passes.package.errors.PackageError` whose message is one line
naming the path.
"""

from __future__ import annotations

import errno
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from coremltools import proto
from google.protobuf.message import DecodeError

from ..reference.memory import loaded_bytes, tensor_elements_and_bits
from .errors import PackageError
from .untrusted import check_path_string, load_json, shown

MANIFEST = "Manifest.json"
MAX_MANIFEST_BYTES = 1 << 20
MAX_MODEL_BYTES = (1 << 31) - 1  # protobuf's limit on one message
WEIGHT_PREFIX = "@model_path/weights/"
BLOB_ALIGNMENT = 64
BLOB_HEADER = struct.Struct("<II")  # storage_header: count, version
BLOB_METADATA = struct.Struct("<IIQQ")  # blob_metadata: sentinel, mil_dtype, sizeInBytes, offset
BLOB_SENTINEL = 0xDEADBEEF
BLOB_VERSION = 2


def require_existing(path: Path) -> None:
    """Raise :class:`PackageError` unless ``path`` exists: a missing path, a symbolic link loop
    and what else the OS refuses (permission) are each said as such."""
    try:
        os.stat(path)
    except OSError as error:
        raise PackageError(f"{path}: {path_problem(error)}") from None
    except ValueError:  # a NUL byte; a command line cannot pass one, a Python caller can
        raise PackageError(f"{shown(str(path))}: a path cannot hold a NUL byte") from None


def path_problem(error: OSError) -> str:
    """The words for an ``OSError`` met looking a path up (``symbolic link loop``)."""
    if error.errno == errno.ELOOP:
        return "a symbolic link loop"
    if error.errno == errno.ENOENT:
        return "no such file or directory"
    return os.strerror(error.errno) if error.errno else str(error)


@dataclass(frozen=True)
class ModelFiles:
    """Where a model's parts are: ``root`` is the folder nothing may leave."""

    path: Path  # as the user gave it
    root: Path  # the package folder (or the folder of a bare .mlmodel), resolved
    model_file: Path
    weights_dir: Path  # what ``@model_path/weights/`` means; may not exist

    @property
    def is_package(self) -> bool:
        return self.model_file.parent != self.root


def locate(path: str | Path) -> ModelFiles:
    """The model file and weights folder of ``path`` (a ``.mlpackage`` folder or a ``.mlmodel``)."""
    path = Path(path)
    require_existing(path)
    if path.is_dir():
        root = path.resolve()
        manifest = root / MANIFEST
        if manifest.is_symlink():
            raise PackageError(f"{path}: {MANIFEST} is a symlink; refusing to follow it")
        if not manifest.is_file():
            raise PackageError(f"{path}: a folder without {MANIFEST}, not an .mlpackage")
        model_file = _inside(path, root, "Data/" + _root_model_path(path, manifest), "the root model")
    else:
        root = path.resolve().parent
        model_file = path.resolve()
    weights_dir = model_file.parent / "weights"
    _inside(path, root, str(weights_dir.relative_to(root)), "the weights folder")
    return ModelFiles(path, root, model_file, weights_dir)


def _root_model_path(path: Path, manifest: Path) -> str:
    """The manifest's root model path, after checking every entry stays inside ``Data/``."""
    if manifest.stat().st_size > MAX_MANIFEST_BYTES:
        raise PackageError(f"{path}: {MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
    content = load_json(path, manifest.read_bytes(), MANIFEST)
    entries = content.get("itemInfoEntries") if isinstance(content, dict) else None
    root_id = content.get("rootModelIdentifier") if isinstance(content, dict) else None
    if not isinstance(entries, dict) or not isinstance(root_id, str):
        raise PackageError(f"{path}: {MANIFEST} lacks itemInfoEntries or rootModelIdentifier")
    for identifier, entry in entries.items():
        item = entry.get("path") if isinstance(entry, dict) else None
        what = f"{MANIFEST} entry '{shown(identifier)}'"
        if not isinstance(item, str) or not item:
            raise PackageError(f"{path}: {what} has no path")
        _check_relative(path, check_path_string(path, item, f"{what} path"), what)
    if root_id not in entries:
        raise PackageError(f"{path}: {MANIFEST} names root model '{shown(root_id)}', which it does not list")
    return entries[root_id]["path"]


def _check_relative(path: Path, relative: str, what: str) -> PurePosixPath:
    pure = PurePosixPath(relative)
    if pure.is_absolute() or "\\" in relative or (len(relative) > 1 and relative[1] == ":"):
        raise PackageError(f"{path}: {what} is an absolute path '{shown(relative)}'; refusing to follow it")
    if ".." in pure.parts:
        raise PackageError(f"{path}: {what} '{shown(relative)}' leads outside the package; refusing to follow it")
    return pure


def _inside(path: Path, root: Path, relative: str, what: str) -> Path:
    """``root / relative``, refusing absolute paths, ``..`` and symlinks on the way."""
    current = root
    for part in _check_relative(path, relative, what).parts:
        current = current / part
        if current.is_symlink():
            raise PackageError(
                f"{path}: {what} goes through the symlink '{shown(str(current.relative_to(root)))}'; "
                "refusing to follow it"
            )
    if os.path.commonpath([os.path.realpath(current), str(root)]) != str(root):
        raise PackageError(f"{path}: {what} '{shown(relative)}' leads outside the package; refusing to follow it")
    return current


def read_spec(files: ModelFiles) -> "proto.Model_pb2.Model":
    """The model protobuf, parsed and checked to be a whole ML Program."""
    path, model_file = files.path, files.model_file
    label = shown(model_file.name if not files.is_package else str(model_file.relative_to(files.root)))
    if not model_file.exists():
        raise PackageError(f"{path}: model file '{label}' is missing")
    if not model_file.is_file():
        raise PackageError(f"{path}: model file '{label}' is not a regular file")
    size = model_file.stat().st_size
    if size == 0:
        raise PackageError(f"{path}: model file '{label}' is empty")
    if size > MAX_MODEL_BYTES:
        raise PackageError(f"{path}: model file '{label}' is larger than a protobuf can be ({size} bytes)")
    spec = proto.Model_pb2.Model()
    try:
        spec.ParseFromString(model_file.read_bytes())
    except (DecodeError, RuntimeError, ValueError) as error:
        raise PackageError(
            f"{path}: model file '{label}' is not a Core ML protobuf (corrupt or truncated: {error})"
        ) from None
    kind = spec.WhichOneof("Type")
    if kind is None:
        raise PackageError(f"{path}: model file '{label}' holds no model (truncated or not a Core ML model)")
    if kind in PIPELINE_KINDS:
        stages = pipeline_stages(spec)
        if not any(stage.WhichOneof("Type") == "mlProgram" for stage in stages):
            kinds = ", ".join(str(stage.WhichOneof("Type")) for stage in stages)
            raise PackageError(
                f"{path}: a {kind} model without an ML Program stage ({kinds}); reconvert its stages with "
                "convert_to='mlprogram'"
            )
        for number, stage in enumerate(stages):
            if stage.WhichOneof("Type") == "mlProgram":
                _check_interface(Path(f"{path}: stage {number}"), stage)
        return spec
    if kind != "mlProgram":
        raise PackageError(f"{path}: a {kind} model, not an ML Program; reconvert it with convert_to='mlprogram'")
    _check_interface(path, spec)
    return spec


#: The model types that hold other models, in order, as stages (Model.proto).
PIPELINE_KINDS = ("pipeline", "pipelineClassifier", "pipelineRegressor")


def pipeline_stages(spec) -> list:
    """The models of a pipeline (``pipeline``, ``pipelineClassifier``, ``pipelineRegressor``), in order."""
    kind = spec.WhichOneof("Type")
    holder = spec.pipeline if kind == "pipeline" else getattr(spec, kind).pipeline
    return list(holder.models)


def _check_interface(path: Path, spec) -> None:
    """The description and the program agree (a truncated file often breaks this): the default
    function exists, every function has a block for its opset, and each described function's
    inputs, states and outputs are its program function's (a multifunction model describes each
    function with its own states; a model of one function describes ``main`` at the top)."""
    program = spec.mlProgram
    name = spec.description.defaultFunctionName or "main"
    if name not in program.functions:
        raise PackageError(f"{path}: the ML Program has no function '{shown(name)}' (truncated or corrupt)")
    for function_name, function in program.functions.items():
        if function.opset not in function.block_specializations:
            raise PackageError(
                f"{path}: function '{shown(function_name)}' has no block for its opset '{shown(function.opset)}'"
            )
    described = list(spec.description.functions) or [spec.description]
    for description in described:
        function_name = getattr(description, "name", "") or name
        if function_name not in program.functions:
            raise PackageError(f"{path}: the description's function '{shown(function_name)}' is not in the ML Program")
        _check_function_interface(path, description, program.functions[function_name], function_name)


def _check_function_interface(path: Path, description, function, function_name: str) -> None:
    block = function.block_specializations[function.opset]
    where = f" of function '{shown(function_name)}'" if function_name != "main" else ""
    described_inputs = [f.name for f in description.input] + [f.name for f in description.state]
    described_outputs = [f.name for f in description.output]
    program_inputs = [value.name for value in function.inputs]
    if sorted(described_inputs) != sorted(program_inputs):
        raise PackageError(
            f"{path}: the description's inputs{where} {shown(str(described_inputs), 100)} are not the program's "
            f"{shown(str(program_inputs), 100)}"
        )
    if described_outputs != list(block.outputs):
        raise PackageError(
            f"{path}: the description's outputs{where} {shown(str(described_outputs), 100)} are not the program's "
            f"{shown(str(list(block.outputs)), 100)}"
        )


@dataclass(frozen=True)
class BlobReference:
    """One weight a value reads from a file: where it is referenced and what it declares."""

    where: str
    file_name: str
    offset: int
    value_type: object  # MIL_pb2.ValueType


def blob_references(program) -> Iterator[BlobReference]:
    """Every ``blobFileValue`` of an ML Program: op attributes and inline input values, all blocks."""
    for where, value in blob_values(program):
        blob = value.blobFileValue
        yield BlobReference(where, blob.fileName, blob.offset, value.type)


def blob_values(program) -> Iterator[tuple[str, Any]]:
    """``(where, value)`` for every value of an ML Program read from a weight file (the protobuf's
    own ``Value`` messages: editing one edits the program)."""
    for function_name, function in program.functions.items():
        for block in function.block_specializations.values():
            yield from _block_blobs(block, f"function '{shown(function_name)}'")


def _block_blobs(block, where: str) -> Iterator[tuple[str, Any]]:
    for op in block.operations:
        label = f"{shown(op.type)} '{shown(op.outputs[0].name if op.outputs else op.type)}'"
        values = list(op.attributes.items())
        values += [
            (param, binding.value)
            for param, argument in op.inputs.items()
            for binding in argument.arguments
            if binding.WhichOneof("binding") == "value"
        ]
        for param, value in values:
            if value.WhichOneof("value") == "blobFileValue":
                yield f"{label} ({param}) in {where}", value
        for nested in op.blocks:
            yield from _block_blobs(nested, where)


def check_weights(spec, files: ModelFiles) -> None:
    """Check every weight reference: a file in the weights folder, a blob header at the offset,
    and data that fits in the file and has the size the declared type needs."""
    path = files.path
    sizes: dict[Path, int] = {}
    for reference in blob_references(spec.mlProgram):
        name = reference.file_name
        if not name.startswith(WEIGHT_PREFIX) or "/" in name[len(WEIGHT_PREFIX) :]:
            raise PackageError(
                f"{path}: weight reference '{shown(name)}' of {reference.where} is not a file in "
                f"{WEIGHT_PREFIX}; refusing to follow it"
            )
        base = check_path_string(path, name[len(WEIGHT_PREFIX) :], f"the weight file of {reference.where}")
        relative = str(files.weights_dir.relative_to(files.root) / base)
        weight_file = _inside(path, files.root, relative, f"weight file '{shown(base)}'")
        if weight_file not in sizes:
            if not weight_file.exists():
                raise PackageError(f"{path}: weight file 'weights/{shown(base)}' is missing")
            if not weight_file.is_file():
                raise PackageError(f"{path}: weight file 'weights/{shown(base)}' is not a regular file")
            sizes[weight_file] = _check_blob_header(path, weight_file)
        _check_blob(path, weight_file, sizes[weight_file], reference)


def _check_blob_header(path: Path, weight_file: Path) -> int:
    size = weight_file.stat().st_size
    with weight_file.open("rb") as handle:
        header = handle.read(BLOB_ALIGNMENT)
    if len(header) < BLOB_ALIGNMENT:
        raise PackageError(f"{path}: weight file 'weights/{shown(weight_file.name)}' is shorter than its header")
    _, version = BLOB_HEADER.unpack_from(header)
    if version != BLOB_VERSION:
        raise PackageError(
            f"{path}: weight file 'weights/{shown(weight_file.name)}' has storage version {version}, not {BLOB_VERSION}"
        )
    return size


def _check_blob(path: Path, weight_file: Path, size: int, reference: BlobReference) -> None:
    label = f"weight file 'weights/{shown(weight_file.name)}'"
    offset = reference.offset
    if offset < BLOB_ALIGNMENT or offset % BLOB_ALIGNMENT or offset + BLOB_METADATA.size > size:
        raise PackageError(
            f"{path}: {reference.where} reads offset {offset} of {label} ({size} bytes): "
            "not a blob position in the file"
        )
    with weight_file.open("rb") as handle:
        handle.seek(offset)
        sentinel, _, byte_count, data_offset = BLOB_METADATA.unpack(handle.read(BLOB_METADATA.size))
    if sentinel != BLOB_SENTINEL:
        raise PackageError(f"{path}: {reference.where} reads offset {offset} of {label}, where no blob starts")
    if data_offset < offset + BLOB_ALIGNMENT or data_offset + byte_count > size:
        raise PackageError(
            f"{path}: {reference.where} has {byte_count} bytes at offset {data_offset} of {label}, "
            f"past its end ({size} bytes)"
        )
    expected = _declared_bytes(reference.value_type)
    if expected is not None and expected != byte_count:
        raise PackageError(
            f"{path}: {reference.where} declares {expected} bytes of weights, "
            f"but its blob in {label} holds {byte_count}"
        )


def loaded_weight_bytes(spec) -> int:
    """What coremltools' loader allocates for the weight files' blobs (checked by
    :func:`check_weights`): their bytes, sub-byte types at one byte an element, as it unpacks them."""
    return sum(loaded_bytes(reference.value_type) for reference in blob_references(spec.mlProgram))


def _declared_bytes(value_type) -> int | None:
    elements, bits = tensor_elements_and_bits(value_type)
    if elements is None or bits is None:
        return None
    return math.ceil(elements * bits / 8)

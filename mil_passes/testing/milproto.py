"""Write ML Program protobufs and packages by hand, as a converter other than coremltools does.

Tests use these to reproduce what such converters emit (a name defined twice, a declared type
that is wrong, a weight reference past the end of its file, a manifest pointing outside the
package) without going through coremltools' serializer, which would not write them.
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from coremltools import proto

MIL = proto.MIL_pb2
DTYPES = {
    "fp16": MIL.FLOAT16, "fp32": MIL.FLOAT32, "int8": MIL.INT8, "int16": MIL.INT16,
    "int32": MIL.INT32, "uint8": MIL.UINT8, "uint16": MIL.UINT16, "bool": MIL.BOOL,
    "string": MIL.STRING,
}
ARRAY_DTYPES = {"fp16": "FLOAT16", "fp32": "FLOAT32", "int32": "INT32"}
BLOB_DTYPES = {np.dtype(np.float16): 1, np.dtype(np.float32): 2, np.dtype(np.uint8): 3, np.dtype(np.int8): 4}
OPSET = "CoreML7"  # iOS17
SPECIFICATION_VERSION = 8


def tensor_type(dtype: str, shape: Sequence[int | None]) -> "MIL.ValueType":
    """``tensor<dtype, shape>``; ``None`` in ``shape`` is a dim known only at run time."""
    value_type = MIL.ValueType()
    tensor = value_type.tensorType
    tensor.dataType = DTYPES[dtype]
    tensor.rank = len(shape)
    for size in shape:
        dim = tensor.dimensions.add()
        if size is None:
            dim.unknown.variadic = False
        else:
            dim.constant.size = size
    return value_type


def immediate(array) -> "MIL.Value":
    """An immediate value holding ``array`` (its dtype decides the field)."""
    array = np.asarray(array)
    value = MIL.Value()
    dtype = {np.dtype(np.float32): "fp32", np.dtype(np.int32): "int32", np.dtype(np.bool_): "bool"}.get(
        array.dtype, "string" if array.dtype.kind in "US" else None
    )
    if dtype is None:
        raise ValueError(f"no immediate encoding written for {array.dtype}")
    value.type.CopyFrom(tensor_type(dtype, array.shape))
    tensor = value.immediateValue.tensor
    flat = array.ravel().tolist()
    field = {"fp32": tensor.floats, "int32": tensor.ints, "bool": tensor.bools, "string": tensor.strings}
    field[dtype].values.extend(flat)
    return value


def blob_value(dtype: str, shape: Sequence[int], offset: int, file_name: str = "weight.bin") -> "MIL.Value":
    """A value read from ``@model_path/weights/<file_name>`` at ``offset``."""
    value = MIL.Value()
    value.type.CopyFrom(tensor_type(dtype, shape))
    value.blobFileValue.fileName = f"@model_path/weights/{file_name}"
    value.blobFileValue.offset = offset
    return value


def operation(
    op_type: str,
    outputs: Sequence[tuple[str, "MIL.ValueType"]],
    inputs: Mapping[str, str | Sequence[str]] | None = None,
    *,
    name: str | None = None,
    attributes: Mapping[str, "MIL.Value"] | None = None,
) -> "MIL.Operation":
    """An op reading ``inputs`` (param → var name, or names for a tuple input) and defining
    ``outputs``; its ``name`` attribute defaults to its first output's name."""
    op = MIL.Operation()
    op.type = op_type
    for param, names in (inputs or {}).items():
        argument = op.inputs[param]
        for var_name in [names] if isinstance(names, str) else names:
            argument.arguments.add().name = var_name
    for var_name, value_type in outputs:
        out = op.outputs.add()
        out.name = var_name
        out.type.CopyFrom(value_type)
    op.attributes["name"].CopyFrom(immediate(np.array(name or outputs[0][0])))
    for key, value in (attributes or {}).items():
        op.attributes[key].CopyFrom(value)
    return op


def const(name: str, array) -> "MIL.Operation":
    """A ``const`` op holding ``array`` as an immediate value."""
    value = immediate(array)
    return operation("const", [(name, value.type)], attributes={"val": value})


def blob_const(name: str, dtype: str, shape: Sequence[int], offset: int, file_name: str = "weight.bin"):
    """A ``const`` op whose value is a blob in a weight file."""
    value = blob_value(dtype, shape, offset, file_name)
    return operation("const", [(name, value.type)], attributes={"val": value})


def _feature(name: str, value_type) -> "proto.Model_pb2.FeatureDescription":
    feature = proto.Model_pb2.FeatureDescription()
    feature.name = name
    tensor = value_type.tensorType
    array = feature.type.multiArrayType
    array.dataType = proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Value(
        ARRAY_DTYPES[next(k for k, v in DTYPES.items() if v == tensor.dataType)]
    )
    if all(d.WhichOneof("dimension") == "constant" for d in tensor.dimensions):
        array.shape.extend(d.constant.size for d in tensor.dimensions)
    return feature


def ml_program(
    inputs: Sequence[tuple[str, "MIL.ValueType"]],
    operations: Sequence["MIL.Operation"],
    outputs: Sequence[str],
    *,
    opset: str = OPSET,
    specification_version: int = SPECIFICATION_VERSION,
) -> "proto.Model_pb2.Model":
    """A Model holding one function ``main``; the description follows the declared types (the
    last definition of each output name)."""
    model = proto.Model_pb2.Model()
    model.specificationVersion = specification_version
    program = model.mlProgram
    program.version = 1
    function = program.functions["main"]
    function.opset = opset
    for var_name, value_type in inputs:
        value = function.inputs.add()
        value.name = var_name
        value.type.CopyFrom(value_type)
        model.description.input.append(_feature(var_name, value_type))
    block = function.block_specializations[opset]
    declared = {}
    for op in operations:
        block.operations.append(op)
        declared.update({out.name: out.type for out in op.outputs})
    block.outputs.extend(outputs)
    for var_name in outputs:
        model.description.output.append(_feature(var_name, declared[var_name]))
    return model


def blob_file(arrays: Sequence[np.ndarray]) -> tuple[bytes, list[int]]:
    """A weight file in MIL blob storage format 2 holding ``arrays``; returns it and their offsets."""
    content = bytearray(struct.pack("<II", len(arrays), 2).ljust(64, b"\0"))
    offsets = []
    for array in arrays:
        data = np.ascontiguousarray(array).tobytes()
        offsets.append(len(content))
        data_offset = len(content) + 64
        meta = struct.pack("<IIQQ", 0xDEADBEEF, BLOB_DTYPES[np.dtype(array.dtype)], len(data), data_offset)
        content += meta.ljust(64, b"\0") + data
        content += b"\0" * (-len(content) % 64)
    return bytes(content), offsets


def write_package(
    model: "proto.Model_pb2.Model | bytes",
    path: str | Path,
    *,
    weights: Mapping[str, bytes] | None = None,
    model_path: str = "com.apple.CoreML/model.mlmodel",
) -> Path:
    """Write ``path`` as an ``.mlpackage``: a Manifest naming ``model_path`` (under ``Data/``)
    as the root model, the model there, and ``weights`` files beside it in ``weights/``."""
    path = Path(path)
    data = path / "Data"
    model_file = data / model_path
    if ".." not in Path(model_path).parts and not Path(model_path).is_absolute():
        model_file.parent.mkdir(parents=True, exist_ok=True)
        model_file.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    else:
        path.mkdir(parents=True, exist_ok=True)
    if weights:
        folder = data / "com.apple.CoreML" / "weights"
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in weights.items():
            (folder / name).write_bytes(content)
    root_id = str(uuid.UUID(int=1))
    entries = {
        root_id: {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Specification",
            "name": "model.mlmodel",
            "path": model_path,
        }
    }
    if weights:
        entries[str(uuid.UUID(int=2))] = {
            "author": "com.apple.CoreML",
            "description": "CoreML Model Weights",
            "name": "weights",
            "path": "com.apple.CoreML/weights",
        }
    manifest = {"fileFormatVersion": "1.0.0", "itemInfoEntries": entries, "rootModelIdentifier": root_id}
    (path / "Manifest.json").write_text(json.dumps(manifest, indent=2))
    return path

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

from ...package.milproto import DTYPES, MIL, Operation, Value, ValueType, const, immediate, operation, tensor_type
from ...quantization import FLOAT_DTYPES

__all__ = [
    "DTYPES",
    "MIL",
    "const",
    "immediate",
    "operation",
    "tensor_type",
    "blob_value",
    "blob_const",
    "ml_program",
    "blob_file",
    "write_package",
    "quantization_model",
]
ARRAY_DTYPES = {"fp16": "FLOAT16", "fp32": "FLOAT32", "int32": "INT32"}
BLOB_DTYPES = {np.dtype(np.float16): 1, np.dtype(np.float32): 2, np.dtype(np.uint8): 3, np.dtype(np.int8): 4}
OPSET = "CoreML7"  # iOS17
SPECIFICATION_VERSION = 8


def blob_value(dtype: str, shape: Sequence[int], offset: int, file_name: str = "weight.bin") -> Value:
    """A value read from ``@model_path/weights/<file_name>`` at ``offset``."""
    value = MIL.Value()
    value.type.CopyFrom(tensor_type(dtype, shape))
    value.blobFileValue.fileName = f"@model_path/weights/{file_name}"
    value.blobFileValue.offset = offset
    return value


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
    inputs: Sequence[tuple[str, ValueType]],
    operations: Sequence[Operation],
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


def quantization_model(
    op_type: str,
    shape: Sequence[int],
    *,
    float_dtype: str = "fp32",
    int_dtype: str = "int8",
    axis: int | None = None,
    scale=None,
    zero_point=None,
    runtime: Sequence[str] = ("zero_point",),
    with_zero_point: bool = True,
    full_rank: bool = False,
) -> "proto.Model_pb2.Model":
    """A model with one ``quantize`` or ``dequantize`` (iOS17), as a WebNN converter writes it.

    Inputs: ``x`` (``float_dtype`` for quantize; int32 for dequantize, cast to ``int_dtype``), and
    for each parameter named in ``runtime`` an input of that name: ``scale`` (``float_dtype``) and
    ``zero_point`` (int32, cast to ``int_dtype`` by the model), of shape ``[shape[axis]]`` when
    ``axis`` is given (``full_rank``: the input's rank, ``shape[axis]`` at ``axis``, 1 elsewhere),
    else ``[1]``. The other parameters are ``const`` ops holding ``scale`` and
    ``zero_point`` (scalars without ``axis``). Output ``out``: quantize's result cast to int32, or
    dequantize's.
    """
    param_shape = [shape[axis]] if axis is not None else [1]
    if full_rank and axis is not None:
        param_shape = [size if i == axis % len(shape) else 1 for i, size in enumerate(shape)]
    inputs = [("x", tensor_type(float_dtype if op_type == "quantize" else "int32", shape))]
    ops = [const("int_dtype", np.array(int_dtype))]
    if op_type == "dequantize":
        ops.append(operation("cast", [("x_int", tensor_type(int_dtype, shape))], {"x": "x", "dtype": "int_dtype"}))
    params = {"input": "x" if op_type == "quantize" else "x_int", "scale": "scale"}
    if axis is not None:
        ops.append(const("axis", np.int32(axis)))
        params["axis"] = "axis"
    if "scale" in runtime:
        inputs.append(("scale", tensor_type(float_dtype, param_shape)))
    else:
        ops.append(const("scale", np.asarray(scale, dtype=FLOAT_DTYPES[float_dtype])))
    if with_zero_point:
        params["zero_point"] = "zp"
        if "zero_point" in runtime:
            inputs.append(("zero_point", tensor_type("int32", param_shape)))
            ops.append(
                operation(
                    "cast", [("zp", tensor_type(int_dtype, param_shape))], {"x": "zero_point", "dtype": "int_dtype"}
                )
            )
        else:
            ops.append(const("zp", np.asarray(zero_point, dtype=np.dtype(int_dtype))))
    if op_type == "quantize":
        params["output_dtype"] = "int_dtype"
        ops.append(operation("quantize", [("q", tensor_type(int_dtype, shape))], params))
        ops.append(const("int32_name", np.array("int32")))
        ops.append(operation("cast", [("out", tensor_type("int32", shape))], {"x": "q", "dtype": "int32_name"}))
    else:
        ops.append(operation("dequantize", [("out", tensor_type(float_dtype, shape))], params))
    return ml_program(inputs, ops, ["out"])

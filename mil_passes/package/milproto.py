"""Pieces of an ML Program protobuf: value types, immediate values, ops, ``const`` ops.

The package's protobuf repairs build new ops with these (``runtime_quantization``), and
``mil_passes.testing.models.handwritten`` writes whole test packages with them. Values are encoded by
coremltools' own MIL serializer helpers (fp16 and int8 go to the ``bytes`` field, as Core ML reads).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from coremltools import proto
from coremltools.converters.mil.backend.mil.helper import create_scalar_value, create_tensor_value

MIL = proto.MIL_pb2
# coremltools ships no type stubs for its protobuf modules: the messages are Any to mypy.
ValueType = Any  # MIL_pb2.ValueType
Value = Any  # MIL_pb2.Value
Operation = Any  # MIL_pb2.Operation
DTYPES = {
    "fp16": MIL.FLOAT16,
    "fp32": MIL.FLOAT32,
    "int8": MIL.INT8,
    "int16": MIL.INT16,
    "int32": MIL.INT32,
    "uint8": MIL.UINT8,
    "uint16": MIL.UINT16,
    "bool": MIL.BOOL,
    "string": MIL.STRING,
}
DTYPE_NAMES = {code: name for name, code in DTYPES.items()}


def tensor_type(dtype: str, shape: Sequence[int | None]) -> ValueType:
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


def immediate(array) -> Value:
    """An immediate value holding ``array`` (its dtype decides the type and the field)."""
    array = np.asarray(array)
    if array.dtype.kind in "US":
        if array.ndim:
            raise ValueError("an immediate string value is a scalar")
        return create_scalar_value(str(array))
    return create_tensor_value(array)


# dtype -> (the TensorValue field that holds it, numpy dtype); fp16 and 8-bit ints are raw bytes
_FIELDS = {
    "fp32": ("floats", np.float32),
    "int32": ("ints", np.int32),
    "bool": ("bools", np.bool_),
    "fp16": ("bytes", np.float16),
    "int8": ("bytes", np.int8),
    "uint8": ("bytes", np.uint8),
}


def immediate_array(value: Value) -> np.ndarray | None:
    """The array an immediate tensor value holds; None for another value (a blob file, a
    string, a list) or dtype."""
    if value.WhichOneof("value") != "immediateValue" or value.type.WhichOneof("type") != "tensorType":
        return None
    tensor_type_ = value.type.tensorType
    field = _FIELDS.get(DTYPE_NAMES.get(tensor_type_.dataType, ""))
    if field is None or any(d.WhichOneof("dimension") != "constant" for d in tensor_type_.dimensions):
        return None
    dims = [int(d.constant.size) for d in tensor_type_.dimensions]
    values = getattr(value.immediateValue.tensor, field[0]).values
    flat: np.ndarray = np.frombuffer(values, field[1]) if field[0] == "bytes" else np.array(values, field[1])
    return flat.reshape(dims) if flat.size == int(np.prod(dims)) else None


def operation(
    op_type: str,
    outputs: Sequence[tuple[str, ValueType]],
    inputs: Mapping[str, str | Sequence[str]] | None = None,
    *,
    name: str | None = None,
    attributes: Mapping[str, Value] | None = None,
) -> Operation:
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


def const(name: str, array) -> Operation:
    """A ``const`` op holding ``array`` as an immediate value."""
    value = immediate(array)
    return operation("const", [(name, value.type)], attributes={"val": value})


def op_name(op: Operation) -> str | None:
    """The ``name`` attribute of a protobuf op, when it holds one string; else None."""
    value = op.attributes.get("name") if "name" in op.attributes else None
    if value is None or value.WhichOneof("value") != "immediateValue":
        return None
    strings = value.immediateValue.tensor.strings.values
    return strings[0] if len(strings) == 1 else None

"""Protobuf pieces (mil_passes.package.milproto): values encoded as coremltools' loader reads them."""

import numpy as np
import pytest
from coremltools.converters.mil.frontend.milproto.load import _load_value

from mil_passes.package.milproto import DTYPE_NAMES, const, immediate, immediate_array, operation, tensor_type


@pytest.mark.parametrize(
    "value",
    [
        np.float16(-128.5),
        np.array([1, -2], np.int8),
        np.array([0, 255], np.uint8),
        np.array([[1.5, 2]], np.float32),
        np.int32(7),
        np.array([True, False]),
    ],
)
def test_immediate_values_read_back_as_written(value):
    read = _load_value(None, immediate(value))
    assert np.asarray(read).dtype == np.asarray(value).dtype
    assert np.asarray(read).tolist() == np.asarray(value).tolist()


def test_immediate_strings_are_scalars():
    assert _load_value(None, immediate(np.array("int8"))) == "int8"
    with pytest.raises(ValueError, match="an immediate string value is a scalar"):
        immediate(np.array(["a", "b"]))


def test_operation_and_const():
    value_type = tensor_type("fp16", (2, None))
    assert DTYPE_NAMES[value_type.tensorType.dataType] == "fp16"
    dims = value_type.tensorType.dimensions
    assert dims[0].constant.size == 2 and dims[1].WhichOneof("dimension") == "unknown"
    op = operation("add", [("y", value_type)], {"x": "a", "y": "b"})
    assert (op.type, op.inputs["x"].arguments[0].name, op.outputs[0].name) == ("add", "a", "y")
    assert op.attributes["name"].immediateValue.tensor.strings.values == ["y"]
    c = const("half", np.float16(0.5))
    assert c.type == "const" and _load_value(None, c.attributes["val"]) == np.float16(0.5)


def test_immediate_array_reads_back_what_immediate_writes():
    for value in (np.float16(-1.5), np.array([[1, -2]], np.int8), np.array([3.25], np.float32), np.int32(4)):
        array = immediate_array(immediate(value))
        assert array.dtype == np.asarray(value).dtype and array.tolist() == np.asarray(value).tolist()
    assert immediate_array(immediate(np.array("fp16"))) is None
    blob = const("w", np.float32(1)).attributes["val"]
    blob.ClearField("immediateValue")
    blob.blobFileValue.fileName = "@model_path/weights/weight.bin"
    assert immediate_array(blob) is None

"""Optional inputs: the value Core ML gives an input declared with a default when a feed leaves it out.

coremltools writes ``TensorType(default_value=...)`` into the model description as an optional
multiarray input (``isOptional``) whose fill value is ``floatDefaultValue`` (or
``doubleDefaultValue`` / ``intDefaultValue``) over the array's declared shape: Core ML fills an
absent optional input with it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["input_defaults"]

_FILLS = ("floatDefaultValue", "doubleDefaultValue", "intDefaultValue")


def input_defaults(description) -> dict[str, np.ndarray]:
    """The value of each optional multiarray input of ``description`` (a model's or a function's)
    that declares a default: its fill over its declared shape, in its declared dtype."""
    from coremltools import proto

    array_types = proto.FeatureTypes_pb2.ArrayFeatureType.ArrayDataType
    defaults = {}
    for feature in description.input:
        if not feature.type.isOptional or feature.type.WhichOneof("Type") != "multiArrayType":
            continue
        array = feature.type.multiArrayType
        which = array.WhichOneof("defaultOptionalValue")
        if which not in _FILLS:
            continue
        dtype = {"FLOAT16": np.float16, "FLOAT32": np.float32, "DOUBLE": np.float64, "INT32": np.int32}.get(
            array_types.Name(array.dataType), np.float32
        )
        defaults[feature.name] = np.full(tuple(array.shape), getattr(array, which), dtype=dtype)
    return defaults

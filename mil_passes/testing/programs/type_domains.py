"""The dtypes an op's input accepts in an opset, read from coremltools' own input specs.

Each op class declares its inputs (``input_spec``); a tensor input names its type domain, a
tuple of dtypes or an id (``"T"``) looked up in the class's ``type_domains``. The class itself
depends on the opset (``iOS17`` ``cast`` takes int8 … uint16, ``iOS15`` ``cast`` does not), so
the domain is read from the class the builder would pick for that opset. A drawn var of a dtype
outside the domain would fail coremltools' type check as the op is built: the generator asks
here instead of keeping its own lists.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from coremltools.converters.mil.mil.operation import Operation

import coremltools as ct
from coremltools.converters.mil.mil import types
from coremltools.converters.mil.mil.input_type import TensorInputType, TupleInputType
from coremltools.converters.mil.mil.ops.helper import _get_version_of_op
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from .recipe import DTYPES


def op_class(op_type: str, opset: Any) -> type[Operation]:
    """The op class coremltools' builder uses for ``op_type`` in ``opset``."""
    return _get_version_of_op(SSAOpRegistry.core_ops[op_type], opset)


@lru_cache(maxsize=None)
def accepted_dtypes(op_type: str, input_name: str, opset: Any) -> tuple[str, ...]:
    """The dtype names ``op_type``'s input ``input_name`` accepts in ``opset``, as coremltools
    checks them, among those the generator can draw (``recipe.DTYPES``). A tuple input
    (``concat``'s ``values``) has no domain of its own: any dtype the opset holds."""
    spec = op_class(op_type, opset).input_spec.input_types
    if input_name not in spec:
        raise KeyError(f"op {op_type!r} has no input {input_name!r}: it has {', '.join(spec)}")
    declared = spec[input_name]
    if isinstance(declared, TupleInputType):
        return held_dtypes(opset)
    if not isinstance(declared, TensorInputType):
        raise TypeError(f"input {input_name!r} of {op_type!r} is not a tensor input ({type(declared).__name__})")
    domain = declared.type_domain or op_class(op_type, opset).type_domains[declared.type_domain_id]
    names = {types.builtin_to_string(t) for t in domain}
    return tuple(name for name in DTYPES if name in names and name in held_dtypes(opset))


def held_dtypes(opset: Any) -> tuple[str, ...]:
    """Every dtype name a program of ``opset`` can hold, in ``recipe.DTYPES`` order (iOS17 added
    the small ints, reached through ``cast``)."""
    small = ("int8", "uint8", "int16", "uint16")
    return tuple(name for name in DTYPES if opset >= ct.target.iOS17 or name not in small)

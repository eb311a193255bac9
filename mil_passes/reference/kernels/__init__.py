"""Numpy kernels of the reference interpreter, registered by MIL op type.

A kernel is ``fn(op, args) -> value | tuple[value, ...]``: ``op`` is the pymil Operation (for
its declared output types and opset), ``args`` maps each input name to its value: a numpy array
(0-d for scalars), a ``str``, a list of arrays for tuple inputs, or ``None`` for an absent
optional input. The interpreter casts results to the declared dtypes.

Each family lives in its own module; importing this package registers all of them.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import numpy as np
from coremltools.converters.mil.mil import types

Kernel = Callable[[Any, dict], Any]

KERNELS: dict[str, Kernel] = {}

# Every module of this package, in load order: a later family may replace an earlier one's kernel
# (``kernel(..., replaces=True)``). A test checks that no module is left out.
FAMILIES = (
    "core",
    "activation",
    "conv_pool",
    "normalization",
    "quantization",
    "indexing",
    "image",
    "recurrent",
    "lists",
    "sequence",
    "detection",
    "state",
    "classify",
)


def kernel(*op_types: str, replaces: bool = False) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the kernel of each of ``op_types``; registering an op type twice is an
    error unless ``replaces`` says the new kernel supersedes one loaded before it."""

    def register(fn: Kernel) -> Kernel:
        for op_type in op_types:
            previous = KERNELS.get(op_type)
            same = previous is not None and (previous.__module__, previous.__qualname__) == (
                fn.__module__,
                fn.__qualname__,
            )
            if previous is not None and not replaces and not same:  # a module imported again is the same kernel
                raise ValueError(f"kernel of '{op_type}' registered twice ({previous.__module__}, {fn.__module__})")
            KERNELS[op_type] = fn
        return fn

    return register


_DTYPES: dict[Any, np.dtype] = {}


def out_dtype(op, index: int = 0) -> np.dtype:
    """The numpy dtype declared for output ``index`` of ``op`` (worked out once per MIL type: types
    are immutable)."""
    var = op.outputs[index]
    sym_type = var.sym_type
    try:
        return _DTYPES[sym_type]
    except KeyError:
        dtype = _DTYPES[sym_type] = np.dtype(types.nptype_from_builtin(var.dtype))
        return dtype
    except TypeError:  # an unhashable type
        return np.dtype(types.nptype_from_builtin(var.dtype))


def load_families() -> None:
    """Import every kernel family (a family that fails to import raises: no kernel goes missing
    without a word)."""
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}")

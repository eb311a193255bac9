"""Numpy kernels of the reference interpreter, registered by MIL op type.

A kernel is ``fn(op, args) -> value | tuple[value, ...]``: ``op`` is the pymil Operation (for
its declared output types and opset), ``args`` maps each input name to its value: a numpy array
(0-d for scalars), a ``str``, a list of arrays for tuple inputs, or ``None`` for an absent
optional input. The interpreter casts results to the declared dtypes.

Each family lives in its own module; importing this package registers all of them.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable

import numpy as np
from coremltools.converters.mil.mil import types

Kernel = Callable[[Any, dict], Any]

KERNELS: dict[str, Kernel] = {}

#: Every module of this package is a family of kernels.
FAMILIES = tuple(module.name for module in pkgutil.iter_modules(__path__))


def kernel(*op_types: str) -> Callable[[Kernel], Kernel]:
    """Register ``fn`` as the kernel of each of ``op_types``."""

    def register(fn: Kernel) -> Kernel:
        for op_type in op_types:
            KERNELS[op_type] = fn
        return fn

    return register


def out_dtype(op, index: int = 0) -> np.dtype:
    """The numpy dtype declared for output ``index`` of ``op``."""
    return np.dtype(types.nptype_from_builtin(op.outputs[index].dtype))


def load_families() -> None:
    """Import every kernel family (a family that fails to import raises: no kernel goes missing
    without a word)."""
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}")

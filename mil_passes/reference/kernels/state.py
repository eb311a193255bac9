"""State kernels (iOS18): ``read_state`` and ``coreml_update_state``.

A state input of a function is bound to a :class:`StateCell`, the storage Core ML keeps for that
state between predictions. ``read_state`` returns the value the cell holds when the op runs;
``coreml_update_state`` makes ``value`` the cell's new value and returns it. Values are never
changed in place, so a ``read_state`` result read before an update keeps its value (MIL's value
semantics). ``slice_update``, the in-place write torch's ``cache[..., a:b] = x`` converts to, is
in ``indexing``; its result is a new array no one else holds, so a cell takes it without a copy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import UnsupportedOpError
from . import kernel


@dataclass
class StateCell:
    """The current value of one state (fp16, its declared shape)."""

    name: str
    value: np.ndarray


def _cell(op, args, input_name: str) -> StateCell:
    cell = args[input_name]
    if not isinstance(cell, StateCell):
        raise UnsupportedOpError(op.op_type, op.name, f"'{input_name}' is not bound to a state")
    return cell


@kernel("read_state")
def read_state(op, args):
    return _cell(op, args, "input").value


@kernel("coreml_update_state")
def coreml_update_state(op, args):
    cell = _cell(op, args, "state")
    value = np.asarray(args["value"])
    if value.shape != cell.value.shape:
        raise ValueError(
            f"op '{op.name}' (coreml_update_state) writes shape {value.shape} to state '{cell.name}' "
            f"of shape {cell.value.shape}"
        )
    fresh = getattr(op.value.op, "op_type", None) == "slice_update"  # a copy made for this write alone
    cell.value = value.astype(cell.value.dtype, copy=not fresh)
    return value

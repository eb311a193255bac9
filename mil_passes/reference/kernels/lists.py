"""List kernels: ``make_list``, ``list_length``, ``list_read``, ``list_write``, ``list_gather``,
``list_scatter``.

A list value is an immutable :class:`TensorList`; every write returns a new one, so a list carried
through ``while_loop`` iterations is never aliased. Elements never written read as zeros of the
element shape (coremltools' op tests pin this: ``make_list(init_length=2)`` then ``list_read(0)``
gives zeros). A dynamic list grows when written past its end; a fixed-length one refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import types

from . import kernel


@dataclass(frozen=True)
class TensorList:
    """The elements (``None`` where never written), their dtype and shape (``None`` where the
    shape is symbolic until an element is written), and whether the list may grow."""

    items: tuple[np.ndarray | None, ...]
    dtype: np.dtype
    elem_shape: tuple[int, ...] | None
    dynamic: bool

    def element(self, op, index: int, name: str) -> np.ndarray:
        if not 0 <= index < len(self.items):
            raise IndexError(
                f"{op.op_type} '{op.name}': input '{name}' is {index}, outside a list of length {len(self.items)}"
            )
        item = self.items[index]
        if item is not None:
            return item
        shape = self.elem_shape or next((x.shape for x in self.items if x is not None), None)
        if shape is None:
            raise ValueError(
                f"{op.op_type} '{op.name}': element {index} was never written and the element shape is unknown"
            )
        return np.zeros(shape, self.dtype)

    def write(self, op, index: int, value: np.ndarray) -> "TensorList":
        if index < 0:
            raise IndexError(f"{op.op_type} '{op.name}': input 'index' is {index}, a negative list index")
        items = list(self.items)
        if index >= len(items):
            if not self.dynamic:
                raise IndexError(
                    f"{op.op_type} '{op.name}': input 'index' is {index}, past the end of a "
                    f"fixed-length list of length {len(items)}"
                )
            items += [None] * (index + 1 - len(items))
        value = np.asarray(value, dtype=self.dtype)
        if self.elem_shape is not None and value.shape != self.elem_shape:
            raise ValueError(
                f"{op.op_type} '{op.name}': input 'value' has shape {value.shape}, the list's "
                f"elements are {self.elem_shape}"
            )
        items[index] = value
        return TensorList(tuple(items), self.dtype, self.elem_shape, self.dynamic)


def _list(op, args: dict) -> TensorList:
    ls = args["ls"]
    if not isinstance(ls, TensorList):
        raise TypeError(f"{op.op_type} '{op.name}': input 'ls' is a {type(ls).__name__}, not a list")
    return ls


@kernel("make_list")
def make_list(op, args: dict) -> TensorList:
    """An ``init_length`` list of ``dtype`` elements of ``elem_shape`` (unwritten: zeros)."""
    length = 1 if args.get("init_length") is None else int(np.asarray(args["init_length"]))
    dims = [np.asarray(d)[()] for d in args["elem_shape"]]
    known = all(not isinstance(d, (str, np.str_)) for d in dims)
    elem_shape = tuple(int(d) for d in dims) if known else None
    dtype = np.dtype(types.nptype_from_builtin(types.string_to_builtin(str(args.get("dtype") or "fp32"))))
    dynamic = True if args.get("dynamic_length") is None else bool(np.asarray(args["dynamic_length"]))
    return TensorList((None,) * length, dtype, elem_shape, dynamic)


@kernel("list_length")
def list_length(op, args: dict) -> np.ndarray:
    return np.int32(len(_list(op, args).items))


@kernel("list_read")
def list_read(op, args: dict) -> np.ndarray:
    return _list(op, args).element(op, int(np.asarray(args["index"])), "index")


@kernel("list_write")
def list_write(op, args: dict) -> TensorList:
    return _list(op, args).write(op, int(np.asarray(args["index"])), args["value"])


@kernel("list_gather")
def list_gather(op, args: dict) -> np.ndarray:
    """The elements at ``indices``, stacked along a new first axis."""
    ls = _list(op, args)
    indices = [int(i) for i in np.asarray(args["indices"]).reshape(-1)]
    if not indices:
        return np.zeros((0,) + (ls.elem_shape or ()), ls.dtype)
    return np.stack([ls.element(op, i, "indices") for i in indices])


@kernel("list_scatter")
def list_scatter(op, args: dict) -> TensorList:
    """``value[k]`` written at ``indices[k]``, in order."""
    ls = _list(op, args)
    value = np.asarray(args["value"])
    for k, index in enumerate(np.asarray(args["indices"]).reshape(-1)):
        ls = ls.write(op, int(index), value[k])
    return ls

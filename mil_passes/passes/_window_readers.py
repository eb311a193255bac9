"""How each window op reads the concat's output, axis by axis, for ``concat_slice_to_slice_concat``.

A reader answers, for one output of a ``slice_by_index``, ``slice_by_size`` or ``split``: which
positions it reads along an axis, whether it squeezes or keeps an axis whole, and the op and
params that read a given part of a concat input with the same cut on every other axis.
``read`` returns the readers of an op, or a :class:`Declined` when its bounds are not constants.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..rewriter import Declined
from ..semantics import size_positions, slice_positions
from ._windows import index_bounds

SLICE_PARAMS = ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask")
DEFAULTS = {"stride": 1, "begin_mask": False, "end_mask": False, "squeeze_mask": False}


def _values(op: Operation, name: str, rank: int) -> list | None:
    """A const list input of ``op`` as Python values, its default when absent, None if run-time."""
    var = getattr(op, name, None)
    if var is None:
        return [DEFAULTS[name]] * rank
    if var.val is None:
        return None
    return [v.item() for v in var.val]


def _const_params(op: Operation, names: tuple[str, ...]) -> dict[str, list] | Declined:
    """The const list params ``names`` of ``op`` (see :func:`_values`), or a refusal naming
    those that are not compile-time constants."""
    params = {name: _values(op, name, op.x.rank) for name in names}
    runtime = [name for name, values in params.items() if values is None]
    if runtime:
        return Declined(op, f"{' and '.join(runtime)} known only at run time")
    return {name: values for name, values in params.items() if values is not None}


class Reader(ABC):
    """How one window output reads the concat's output, axis by axis."""

    @classmethod
    @abstractmethod
    def read(cls, op: Operation, axis: int) -> list[Reader] | Declined:
        """The readers of ``op``'s outputs when its x is concatenated along ``axis``."""

    def __init__(self, op: Operation, params: dict[str, list], index: int = 0):
        self.op, self.params, self.index = op, params, index

    def output(self) -> Var:
        return self.op.outputs[self.index]

    @abstractmethod
    def positions(self, axis: int, size: int) -> range:
        """Positions read along ``axis`` of ``size`` elements."""

    def squeezes(self, axis: int) -> bool:
        return False

    def keeps(self, axis: int) -> bool:
        """Is ``axis`` read whole, in order, not squeezed? A symbolic dim not provably whole is cut."""
        dim = self.op.x.shape[axis]
        if self.squeezes(axis) or is_symbolic(dim):
            return False
        return self.positions(axis, int(dim)) == range(int(dim))

    @abstractmethod
    def cut(self, axis: int, part: range) -> tuple[str, dict[str, list]]:
        """The op type and params that read ``part`` along ``axis`` and the window's cut elsewhere."""


class _IndexReader(Reader):
    """A ``slice_by_index``: any sign, masks, strides and squeezes."""

    @classmethod
    def read(cls, op: Operation, axis: int) -> list[Reader] | Declined:
        params = _const_params(op, SLICE_PARAMS)
        return params if isinstance(params, Declined) else [cls(op, params)]

    def positions(self, axis: int, size: int) -> range:
        p = self.params
        return slice_positions(
            size,
            p["begin"][axis],
            p["end"][axis],
            p["stride"][axis],
            p["begin_mask"][axis],
            p["end_mask"][axis],
            p["squeeze_mask"][axis],
        )

    def squeezes(self, axis: int) -> bool:
        return self.params["squeeze_mask"][axis]

    def keeps(self, axis: int) -> bool:
        p = self.params
        if not p["squeeze_mask"][axis] and p["stride"][axis] == 1 and p["end_mask"][axis]:
            if p["begin_mask"][axis] or p["begin"][axis] == 0:
                return True
        return super().keeps(axis)

    def cut(self, axis: int, part: range) -> tuple[str, dict[str, list]]:
        """Bounds from the positions read on every axis of known size; symbolic ones as written.

        (coremltools' type inference rewrites negative bounds in place, so copying them as
        written could give, say, ``begin 1, end 0`` where ``-1:0`` was meant.)
        """
        params = {name: list(values) for name, values in self.params.items()}
        for other, dim in enumerate(self.op.x.shape):
            if other == axis or not is_symbolic(dim):
                positions = part if other == axis else self.positions(other, int(dim))
                begin, end, stride = index_bounds(positions)
                params["begin"][other], params["stride"][other] = begin, stride
                params["end"][other] = 0 if end is None else end
                params["begin_mask"][other], params["end_mask"][other] = False, end is None
        defaults = [name for name, value in DEFAULTS.items() if all(v == value for v in params[name])]
        return "slice_by_index", {k: v for k, v in params.items() if k not in defaults}


class _SizeReader(Reader):
    """A ``slice_by_size``: ``size`` -1 reads to the end of the axis."""

    @classmethod
    def read(cls, op: Operation, axis: int) -> list[Reader] | Declined:
        params = _const_params(op, ("begin", "size"))
        if isinstance(params, Declined):
            return params
        for index, (begin, size) in enumerate(zip(params["begin"], params["size"])):
            if begin < 0 and size == -1:  # coremltools types it as dim - begin
                return Declined(op, f"begin {begin} with size -1 on axis {index}: its declared type is wrong")
        return [cls(op, params)]

    def positions(self, axis: int, size: int) -> range:
        return size_positions(size, self.params["begin"][axis], self.params["size"][axis])

    def keeps(self, axis: int) -> bool:
        return (self.params["begin"][axis], self.params["size"][axis]) == (0, -1) or super().keeps(axis)

    def cut(self, axis: int, part: range) -> tuple[str, dict[str, list]]:
        begin, size = list(self.params["begin"]), list(self.params["size"])
        begin[axis], size[axis] = part.start, len(part)
        return "slice_by_size", {"begin": begin, "size": size}


class _SplitReader(Reader):
    """One output of a ``split`` along the concat axis: a span of that axis, nothing else cut."""

    @classmethod
    def read(cls, op: Operation, axis: int) -> list[Reader] | Declined:
        split_axis = op.axis.val.item() % op.x.rank
        if split_axis != axis:
            return Declined(op, f"splits axis {split_axis}, not the concat axis {axis}: no window to move")
        sizes = [out.shape[axis] for out in op.outputs]
        if any(is_symbolic(size) for size in sizes):
            return Declined(op, "split sizes known only at run time")
        starts = [sum(int(s) for s in sizes[:i]) for i in range(len(sizes) + 1)]
        return [cls(op, {"span": starts[i : i + 2]}, i) for i in range(len(sizes))]

    def positions(self, axis: int, size: int) -> range:
        start, stop = self.params["span"]
        return range(size)[start:stop]

    def keeps(self, axis: int) -> bool:
        return True

    def cut(self, axis: int, part: range) -> tuple[str, dict[str, list]]:
        shape = self.op.x.shape
        begin = [part.start if i == axis else 0 for i in range(len(shape))]
        end = [part.stop if i == axis else 0 if is_symbolic(dim) else int(dim) for i, dim in enumerate(shape)]
        end_mask = [i != axis and is_symbolic(dim) for i, dim in enumerate(shape)]
        params = {"begin": begin, "end": end, "end_mask": end_mask}
        return "slice_by_index", params if any(end_mask) else {"begin": begin, "end": end}


READERS = {"slice_by_index": _IndexReader, "slice_by_size": _SizeReader, "split": _SplitReader}

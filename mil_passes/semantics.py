"""What MIL's slice and reshape parameters mean: the one reading the passes, lint, the declared-type
check and the interpreter's kernels share.

Sources: the MIL op specs in coremltools' op definitions (``ops/defs/iOS15/tensor_transformation.py``
``slice_by_index``, ``slice_by_size``, ``reshape``; ``ops/defs/iOS17/tensor_transformation.py``
``reshape``), and coremltools' own readings of them (``solve_slice_by_index_slice``,
``reshape.replace_zeros_in_shape``), which these functions match.

Positions are Python ``range`` objects (numpy's slicing rules); sizes may be ints or any other
object standing for a run-time dim (a coremltools symbol, a :class:`~mil_passes.passes` ``Dim``),
which reshape's ``0`` copies as it is.
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar

import numpy as np

INT32_MAX = 2**31 - 1
IOS17 = 8  # coremltools' AvailableTarget.iOS17: from here on reshape matches a 0 from the right

D = TypeVar("D")


# -- slice_by_index / slice_by_size ------------------------------------------------------------


def slice_positions(
    size: int,
    begin: int,
    end: int,
    stride: int = 1,
    begin_mask: bool = False,
    end_mask: bool = False,
    squeeze: bool = False,
) -> range:
    """Positions one ``slice_by_index`` axis selects from an axis of ``size`` elements.

    A squeezed axis reads ``begin`` alone (``end`` and ``stride`` ignored; a masked begin is 0);
    otherwise ``x[begin:end:stride]`` with a masked bound as ``None``.
    """
    if stride == 0:
        raise ValueError("slice stride is 0")
    if squeeze:
        return range(size)[slice(None if begin_mask else begin, None, INT32_MAX)]
    return range(size)[slice(None if begin_mask else begin, None if end_mask else end, stride)]


def size_positions(size: int, begin: int, length: int) -> range:
    """Positions one ``slice_by_size`` axis selects: ``length`` from ``begin``, ``-1`` for the rest."""
    start = begin + size if begin < 0 else begin
    stop = size if length < 0 else start + length
    return range(size)[start:stop]


def _flags(values: Sequence | None, rank: int) -> list[bool]:
    return [False] * rank if values is None else [bool(v) for v in values]


def slice_by_index_positions(
    shape: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    stride: Sequence[int] | None = None,
    begin_mask: Sequence | None = None,
    end_mask: Sequence | None = None,
    squeeze_mask: Sequence | None = None,
) -> tuple[tuple[range, ...], tuple[int, ...]]:
    """The positions a ``slice_by_index`` reads on every axis of ``shape``, and the axes it squeezes."""
    rank = len(shape)
    strides = [1] * rank if stride is None else [int(s) for s in stride]
    begins, ends = _flags(begin_mask, rank), _flags(end_mask, rank)
    squeezes = _flags(squeeze_mask, rank)
    positions = tuple(
        slice_positions(int(shape[a]), int(begin[a]), int(end[a]), strides[a], begins[a], ends[a], squeezes[a])
        for a in range(rank)
    )
    return positions, tuple(a for a in range(rank) if squeezes[a])


def slice_by_size_positions(shape: Sequence[int], begin: Sequence[int], size: Sequence[int]) -> tuple[range, ...]:
    """The positions a ``slice_by_size`` reads on every axis of ``shape``."""
    return tuple(size_positions(int(d), int(b), int(s)) for d, b, s in zip(shape, begin, size))


def as_slice(positions: range) -> slice:
    """A numpy slice reading exactly ``positions`` (a stop below 0 becomes ``None``)."""
    if not positions:  # an empty range may start at -1, which numpy reads as the last element
        return slice(0, 0, 1)
    stop: int | None = positions.stop
    if positions.step < 0 and positions.stop < 0:
        stop = None
    return slice(positions.start, stop, positions.step)


def numpy_index(positions: Sequence[range]) -> tuple[slice, ...]:
    """The numpy index reading ``positions`` on every axis."""
    return tuple(as_slice(p) for p in positions)


# -- reshape -----------------------------------------------------------------------------------


def reshape_zeros(opset_version: int, x_shape: Sequence[D], target: Sequence) -> list:
    """``target`` with each ``0`` replaced by the dim of x it copies, by the op's opset rule.

    Before iOS17 a ``0`` copies the dim at the same index, and needs ``len(target) == rank``
    (``ValueError`` otherwise); from iOS17 on it copies the dim at the same position counted from
    the right, and is 1 where x has no such dim. Other elements are kept (``-1`` included).
    """
    target = list(target)
    zeros = [isinstance(t, (int, np.integer)) and t == 0 for t in target]
    if not any(zeros):
        return target
    rank = len(x_shape)
    if opset_version >= IOS17:
        offset = rank - len(target)
        return [
            (x_shape[offset + i] if offset + i >= 0 else 1) if zero else t
            for i, (t, zero) in enumerate(zip(target, zeros))
        ]
    if len(target) != rank:
        raise ValueError(f"a 0 in the target needs x's rank {rank}, the target has {len(target)} dims")
    return [x_shape[i] if zero else t for i, (t, zero) in enumerate(zip(target, zeros))]


def reshape_shape(opset_version: int, x_shape: Sequence[int], target: Sequence[int]) -> list[int]:
    """The output shape of ``reshape(x, target)`` for a static ``x_shape``: zeros copied, ``-1`` solved."""
    resolved = [int(d) for d in reshape_zeros(opset_version, [int(d) for d in x_shape], target)]
    if resolved.count(-1) > 1:
        raise ValueError(f"reshape target {list(target)} holds more than one -1")
    if -1 in resolved:
        known = math.prod(d for d in resolved if d != -1)
        total = math.prod(int(d) for d in x_shape)
        resolved[resolved.index(-1)] = total // known if known else 0
    return resolved

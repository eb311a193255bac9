"""Window arithmetic for ``concat_slice_to_slice_concat``: pure functions on integers.

A *window* selects positions along the concat axis (a Python ``range``, numpy semantics); the
concat's inputs occupy consecutive spans of that axis. These functions say which positions of
which input the window covers, in window order, and how to write each part as slice bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Piece:
    """Positions ``part`` (local to concat input ``index``), in the order the window reads them."""

    index: int
    part: range

    def is_whole(self, size: int) -> bool:
        """Does the piece read the whole input, in order?"""
        return self.part == range(size)


def selected_positions(
    size: int,
    begin: int,
    end: int,
    stride: int = 1,
    begin_mask: bool = False,
    end_mask: bool = False,
    squeeze: bool = False,
) -> range:
    """Positions one ``slice_by_index`` axis selects from an axis of ``size`` elements.

    Follows coremltools' ``solve_slice_by_index_slice``: a squeezed axis reads ``begin`` alone
    (``end`` and ``stride`` ignored); otherwise ``x[begin:end:stride]`` with masks as ``None``.
    """
    if stride == 0:
        raise ValueError("slice stride is 0")
    if squeeze:
        return range(size)[slice(None if begin_mask else begin, None, INT32_MAX)]
    return range(size)[slice(None if begin_mask else begin, None if end_mask else end, stride)]


def sized_positions(size: int, begin: int, length: int) -> range:
    """Positions one ``slice_by_size`` axis selects: ``length`` from ``begin``, ``-1`` for the rest."""
    start = begin + size if begin < 0 else begin
    stop = size if length < 0 else start + length
    return range(size)[start:stop]


def _within(selected: range, low: int, high: int) -> range:
    """The sub-range of ``selected`` whose values lie in ``[low, high)``, in the same order."""
    step = selected.step
    if step > 0:
        first = -((selected.start - low) // step)  # ceil((low - start) / step)
        past = -((selected.start - high) // step)
    else:
        first = (selected.start - high) // -step + 1
        past = (selected.start - low) // -step + 1
    return selected[max(first, 0) : max(past, 0)]


def pieces_of(selected: range, sizes: Sequence[int]) -> list[Piece]:
    """Split the window ``selected`` (positions of the concat's output) over inputs of ``sizes``.

    Inputs the window misses give no piece; a negative step reads the inputs last to first.
    """
    pieces, offset = [], 0
    for index, size in enumerate(sizes):
        part = _within(selected, offset, offset + size)
        if len(part):
            pieces.append(Piece(index, range(part.start - offset, part.stop - offset, part.step)))
        offset += size
    if selected.step < 0:
        pieces.reverse()
    return pieces


def index_bounds(part: range) -> tuple[int, int | None, int]:
    """``(begin, end, stride)`` of a ``slice_by_index`` axis reading ``part``, all in range.

    ``end`` is ``None`` when the slice runs down past position 0 (write it as ``end_mask``).
    """
    if not len(part):
        return 0, 0, 1
    step = part.step if len(part) > 1 else 1
    end = part[-1] + (1 if step > 0 else -1)
    return part[0], (None if end < 0 else end), step

"""Window arithmetic for ``concat_slice_to_slice_concat``: pure functions on integers.

A *window* selects positions along the concat axis (a Python ``range``, numpy semantics); the
concat's inputs occupy consecutive spans of that axis. These functions say which positions of
which input the window covers, in window order, and how to write each part as slice bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Piece:
    """Positions ``part`` (local to concat input ``index``), in the order the window reads them."""

    index: int
    part: range

    def is_whole(self, size: int) -> bool:
        """Does the piece read the whole input, in order?"""
        return self.part == range(size)


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

"""Which two adjacent axes of a rank-5 tensor a data-movement op keeps together, and the op's
parameters in rank 4 with them merged (for ``webnn::data_movement_rank5_to_rank4``).

Axes ``i`` and ``i + 1`` merge for an op when it moves the elements of the pair as the elements of
one axis of ``n_i * n_(i+1)``, in row-major order: a transpose that keeps them next to each other
and in order; a slice whose positions on the pair, read as one axis, are a slice again; a concat,
split or tile along neither of them. An axis of size 1 merges with either neighbour whatever the op
does with it. Each planner takes static shapes and constant parameters (Python values) and returns
the rank-4 op's parameters, or None where the pair does not merge; :func:`plans` reads an op's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import Declined
from ..semantics import as_slice, slice_by_index_positions, slice_by_size_positions

Shape = tuple[int, ...]


def merge_pair(shape: Sequence[int], i: int) -> Shape:
    """``shape`` with axes ``i`` and ``i + 1`` merged into one."""
    return (*shape[:i], shape[i] * shape[i + 1], *shape[i + 2 :])


def merged_positions(outer: range, inner: range, outer_size: int, inner_size: int) -> range | None:
    """The positions ``a * inner_size + b`` (``a`` in ``outer``, then ``b`` in ``inner``) as one
    range of the merged axis, or None where they are no slice of it."""
    if not outer or not inner:
        return None  # an empty slice: left as it is
    if len(outer) == 1:
        return range(outer[0] * inner_size, (outer[0] + 1) * inner_size)[as_slice(inner)]
    if len(inner) == 1:
        return range(inner[0], outer_size * inner_size, inner_size)[as_slice(outer)]
    step = inner.step
    if outer.step * inner_size != step * len(inner):
        return None  # the step from one block's last position to the next block's first is another
    start = outer[0] * inner_size + inner[0]
    return range(start, start + len(outer) * len(inner) * step, step)


def slice_positions4(positions: Sequence[range], shape: Sequence[int], i: int) -> list[range] | None:
    """A slice's positions on every axis (rank 5) with axes ``i`` and ``i + 1`` merged, or None."""
    merged = merged_positions(positions[i], positions[i + 1], shape[i], shape[i + 1])
    return None if merged is None else [*positions[:i], merged, *positions[i + 2 :]]


def slice_params(positions: Sequence[range]) -> dict[str, list]:
    """``slice_by_index`` parameters that read exactly ``positions`` (no squeeze: a reshape follows)."""
    slices = [as_slice(p) for p in positions]
    params: dict[str, list] = {
        "begin": [s.start for s in slices],
        "end": [0 if s.stop is None else s.stop for s in slices],
    }
    if any(s.step != 1 for s in slices):
        params["stride"] = [s.step for s in slices]
    if any(s.stop is None for s in slices):
        params["end_mask"] = [s.stop is None for s in slices]
    return params


def transpose_perm(shape: Shape, perm: Sequence[int], i: int) -> list[int] | None:
    """The rank-4 ``perm``: axis ``i + 1`` follows ``i`` in the output, or one of them has size 1
    (it goes; its neighbour takes the merged place)."""
    perm = [p % 5 for p in perm]
    at = perm.index(i)
    if (at < 4 and perm[at + 1] == i + 1) or shape[i + 1] == 1:
        dropped = i + 1
    elif shape[i] == 1:
        dropped = i
    else:
        return None
    return [p - (p > dropped) for p in perm if p != dropped]


def axis_after_merge(axis: int, shape: Shape, i: int) -> int | None:
    """A concat's or split's ``axis`` once axes ``i``, ``i + 1`` merge: the pair is not along it, or
    its other axis has size 1 (the same in every piece)."""
    axis %= 5
    if axis < i:
        return axis
    if axis > i + 1:
        return axis - 1
    other = i + 1 if axis == i else i
    return i if shape[other] == 1 else None


def tile_reps(shape: Shape, reps: Sequence[int], i: int) -> list[int] | None:
    """The rank-4 ``reps``: axis ``i + 1`` is not repeated (the merged axis repeats as ``i`` did),
    or axis ``i`` has size 1 and is not repeated (the merged axis repeats as ``i + 1`` did)."""
    reps = list(reps)
    if reps[i + 1] == 1:
        return [*reps[: i + 1], *reps[i + 2 :]]
    if shape[i] == 1 and reps[i] == 1:
        return [*reps[:i], *reps[i + 1 :]]
    return None


# -- an op's plans ---------------------------------------------------------------------------

SLICE_INPUTS = ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask")


@dataclass(frozen=True)
class Plan:
    """Axes ``pair``, ``pair + 1`` of the rank-5 input merge; ``params``: the rank-4 op's own."""

    pair: int
    params: dict[str, Any] = field(hash=False)
    update: Shape | None = None  # slice_update: the rank-4 shape of its update


def static_shape(var: Var) -> Shape:
    """``var``'s shape as ints (no size known only at run time)."""
    return tuple(int(d) for d in var.shape)


def _constants(op: Operation, names: tuple[str, ...]) -> dict[str, Any] | Declined:
    """The op's inputs ``names`` that it has, as Python lists, or why they are not constants."""
    present = {name: getattr(op, name) for name in names if getattr(op, name, None) is not None}
    runtime = [name for name, var in present.items() if var.val is None]
    if runtime:
        return Declined(op, f"{' and '.join(runtime)} known only at run time")
    return {name: np.asarray(var.val).tolist() for name, var in present.items()}


def _slice_plans(op: Operation, shape: Shape, params: dict[str, Any]) -> list[Plan | None] | Declined:
    squeezed: tuple[int, ...] = ()
    if op.op_type == "slice_by_size":
        positions = slice_by_size_positions(shape, params["begin"], params["size"])
    else:
        positions, squeezed = slice_by_index_positions(shape, **params)
    read = tuple(len(p) for a, p in enumerate(positions) if a not in squeezed)
    typed = static_shape(op.update if op.op_type == "slice_update" else op.outputs[0])
    if read != typed:
        return Declined(op, f"coremltools types its window {typed}, and it reads {read}")
    plans: list[Plan | None] = []
    for i in range(4):
        merged = slice_positions4(positions, shape, i)
        update = None if merged is None else tuple(len(p) for p in merged)
        plans.append(None if merged is None else Plan(i, slice_params(merged), update))
    return plans


def parameters(op: Operation) -> dict[str, Any] | Declined:
    """The op's constant parameters as Python lists, or why they are not constants."""
    kind = op.op_type
    names = {"transpose": ("perm",), "tile": ("reps",), "concat": ("axis",), "split": ("axis",)}
    return _constants(op, names.get(kind, ("size", *SLICE_INPUTS) if kind == "slice_by_size" else SLICE_INPUTS))


def plans(op: Operation, shape: Shape, params: dict[str, Any]) -> list[Plan | None] | Declined:
    """For each pair ``i`` of the rank-5 input, the rank-4 op's parameters (None: no merge)."""
    kind = op.op_type
    if kind == "transpose":
        perms = [transpose_perm(shape, params["perm"], i) for i in range(4)]
        return [None if p is None else Plan(i, {"perm": p}) for i, p in enumerate(perms)]
    if kind == "tile":
        reps = [tile_reps(shape, params["reps"], i) for i in range(4)]
        return [None if r is None else Plan(i, {"reps": r}) for i, r in enumerate(reps)]
    if kind in ("concat", "split"):
        axes = [axis_after_merge(params["axis"], shape, i) for i in range(4)]
        return [None if a is None else Plan(i, {"axis": np.int32(a)}) for i, a in enumerate(axes)]
    return _slice_plans(op, shape, params)

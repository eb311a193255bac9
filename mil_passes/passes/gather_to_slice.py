"""``webnn::gather_to_slice``: a gather by constant indices as slices, which the Neural Engine runs.

Given (a model picking channels 4–7, then 0)::

    %g = gather(x=%x, indices=[4, 5, 6, 7, 0], axis=1)       # %x: (2, 8, 3)

Result::

    %g_run0 = slice_by_index(x=%x, begin=[0, 4, 0], end=[0, 8, 0], end_mask=[True, False, True])
    %g_run1 = slice_by_index(x=%x, begin=[0, 0, 0], end=[0, 1, 0], end_mask=[True, False, True])
    %g = concat(values=(%g_run0, %g_run1), axis=1)

Core ML places ``gather`` on the CPU (roboflow/rf-detr#1495 measured ``gather_along_axis`` off the
Neural Engine; pytorch/executorch#19252 lists ``ios17.gather``); a slice is data movement it runs
there. The indices are split into runs of consecutive positions (negative ones counted from the
end); one run is one slice, several are a concat of slices along the axis, up to
:data:`MAX_RUNS` (beyond that the gather stays: a concat of many one-element slices costs more
than it saves). A rank-0 index is a slice whose axis is squeezed. Exact: the same elements, in
the same order. Only ``batch_dims = 0``, a constant axis, a static size along it, and indices in
range (an out-of-range gather is left for Core ML to refuse). A gather of integer data (shape
vectors, token ids) stays one gather when it would become several slices: int32 slices and
concats run off the Neural Engine as well, so the rewrite would add ops off it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..declaration import PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="gather_to_slice",
    summary="Rewrite every gather by constant indices as slices (a concat of slices for several runs).",
    slots=(
        Slot(
            70,
            "common::remove_symbolic_reshape",
            "a gather's indices are constants after const_elimination; after fold_shape_ops, which folds the "
            "gathers of shape vectors whole",
        ),
    ),
    fixes=("ane-gather",),
)

MAX_RUNS = 4


@dataclass(frozen=True)
class Runs:
    """The gather as slices: ``runs`` of (start, stop) positions along ``axis``; ``scalar``: a
    rank-0 index (the axis is squeezed away)."""

    axis: int
    runs: tuple[tuple[int, int], ...]
    scalar: bool


def runs_of(indices: np.ndarray, size: int) -> tuple[tuple[int, int], ...] | None:
    """Maximal runs of consecutive positions of 1-D ``indices`` (in range for ``size``), or None."""
    positions = [int(i) + size if int(i) < 0 else int(i) for i in indices.reshape(-1)]
    if not positions or any(not 0 <= p < size for p in positions):
        return None
    runs = [[positions[0], positions[0] + 1]]
    for p in positions[1:]:
        if p == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([p, p + 1])
    return tuple((start, stop) for start, stop in runs)


class GatherOfConstantIndices(RewritePattern[Runs]):
    """``gather(x, const indices, axis)`` → slices of ``x`` (a concat of them for several runs)."""

    op_types = ("gather",)
    rule = "ane-gather"
    cause = "gathers by constant indices: Core ML runs a gather on the CPU/GPU; slices run on the Neural Engine"

    def match(self, op: Operation) -> Runs | Declined | None:
        indices = op.indices.val
        if indices is None or op.x.val is not None:
            return None  # run-time indices: no slice computes it; a const x: const_elimination's
        batch_dims = op.batch_dims.val if getattr(op, "batch_dims", None) is not None else 0
        axis = op.axis.val if op.axis is not None else 0
        shape = op.x.shape
        if batch_dims != 0 or axis is None or shape is None or np.ndim(indices) > 1:
            return Declined(op, "only a 0-d or 1-d gather along a constant axis without batch dims becomes slices")
        axis = int(axis) + len(shape) if int(axis) < 0 else int(axis)
        if is_symbolic(shape[axis]):
            return Declined(op, "the gathered axis has a size known only at run time")
        runs = runs_of(np.asarray(indices), int(shape[axis]))
        if runs is None:
            return Declined(op, "an index is out of range")
        if len(runs) > MAX_RUNS:
            return Declined(
                op, f"its indices make {len(runs)} runs of consecutive positions (at most {MAX_RUNS} become slices)"
            )
        if len(runs) > 1 and types.is_int(op.x.dtype):
            return Declined(
                op,
                f"its {types.builtin_to_string(op.x.dtype)} data makes {len(runs)} slices and a concat, which Core ML "
                "runs off the Neural Engine too (ane-int32-compute): more ops off than the one gather",
            )
        return Runs(axis, runs, np.ndim(indices) == 0)

    def detail(self, op: Operation, match: Runs) -> str:
        return ", ".join(f"[{a}:{b}]" for a, b in match.runs) + f" of axis {match.axis}"

    def rewrite(self, op: Operation, match: Runs, rewriter: Rewriter) -> Var:
        rank, out = len(op.x.shape), op.outputs[0]
        pieces = []
        for number, (start, stop) in enumerate(match.runs):
            begin, end = [0] * rank, [0] * rank
            begin[match.axis], end[match.axis] = start, stop
            mask = [axis != match.axis for axis in range(rank)]
            inputs = dict(x=op.x, begin=np.array(begin, np.int32), end=np.array(end, np.int32), end_mask=mask)
            inputs["begin_mask"] = mask
            if match.scalar:
                inputs["squeeze_mask"] = [axis == match.axis for axis in range(rank)]
            name = out.name if len(match.runs) == 1 else f"{out.name}_run{number}"
            pieces.append(rewriter.add("slice_by_index", name, **inputs))
        if len(pieces) == 1:
            return pieces[0]
        return rewriter.add("concat", out.name, values=tuple(pieces), axis=match.axis)


@register(DECLARATION)
class GatherToSlice(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [GatherOfConstantIndices()]

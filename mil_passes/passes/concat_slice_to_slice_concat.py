"""``webnn::concat_slice_to_slice_concat``: cut windows out of a concat's inputs, not its output.

Given::

    %joined = concat(values=(%cache, %x), axis=-1, interleave=False)     # [1, 4, 8] + [1, 4, 7]
    %next_cache = slice_by_index(x=%joined, begin=[0, 0, -8], end=[0, 0, 0],
                                 end_mask=[True, True, True])            # [1, 4, 8]

Result::

    %next_cache_piece0 = slice_by_index(x=%cache, begin=[0, 0, 7], end=[1, 4, 8])   # [1, 4, 1]
    %next_cache = concat(values=(%next_cache_piece0, %x), axis=2, interleave=False)

A window cut out of a concat's output makes the Neural Engine compiler of M2-generation chips
refuse the whole program (docs/evidence.md §1); the same values cut out of the inputs compile.

Windows are ``slice_by_index`` (any begin/end sign, masks, strides, squeezes), ``slice_by_size``
(``-1`` sizes) and every used output of a ``split`` along the concat axis. Each becomes the
pieces of the inputs it reads — an input itself when read whole with nothing else cut, else a
slice of it with the window's cut on the other axes — joined by a ``concat`` when there are
several. Slices this builds of a concat among the inputs are windows again: the rewriter
re-visits them. The concat stays while anything else uses it.

Declined (left unchanged, the reason in debug logging): window bounds known only at run time;
a concat input whose size on the concat axis is known only at run time, or a scalar input (torch's
frontend concatenates scalars into shape vectors); ``interleave=True``;
a ``split`` along another axis than the concat's (no window of the concat axis to move). Two
guards keep malformed windows as they are: one that reads nothing of the concat axis, and a
``slice_by_size`` with a negative begin and size -1 (coremltools types it ``dim - begin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..ir import is_used
from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..declaration import LintRule, PassDeclaration, Slot
from . import register
from ._window_readers import READERS, Reader
from ._windows import pieces_of

DECLARATION = PassDeclaration(
    name="concat_slice_to_slice_concat",
    summary="Rewrite every window of a concat's output as a concat of windows of its inputs.",
    slots=(
        Slot(
            40,
            "common::remove_symbolic_reshape",
            "needs constant slice bounds: after const_elimination and fold_shape_ops",
        ),
        Slot(
            97,
            "common::remove_symbolic_reshape",
            "again after gather_to_slice: a gather of several runs becomes a concat of slices, and a window a later "
            "slice cuts from it is removed here, not by the next run of the pipeline (found by the fuzzer, --seed 7: "
            "slice(concat(gather(x, [0, 0]), c)))",
        ),
    ),
    rules=(
        LintRule(
            "slice-of-concat",
            "info",
            "any other window cut from a concat's output on its axis",
            "the graph shape of `ane-refused-slice-of-concat`, not known to be refused; NVIDIA NeMo's "
            "`CausalConv1D.update_cache` writes it",
        ),
    ),
    fixes=("ane-refused-slice-of-concat",),
)


@dataclass(frozen=True)
class Cut:
    """A piece to build: ``op_type`` on ``source`` with ``params``; ``op_type`` None: ``source`` itself."""

    source: Var
    op_type: str | None = None
    params: dict[str, list] | None = None


@dataclass(frozen=True)
class Window:
    """One output of a window op, as the pieces that compute it: it reads ``positions`` of the
    concat's ``axis`` (``axis_size`` elements)."""

    output: Var
    cuts: tuple[Cut, ...]
    join_axis: int
    axis: int
    positions: range
    axis_size: int


def _span(positions: range) -> str:
    step = "" if positions.step == 1 else f":{positions.step}"
    stop = positions.stop if positions.stop >= 0 else ""
    return f"[{positions.start}:{stop}{step}]"


def _concat_sizes(op: Operation, concat: Operation, axis: int) -> list[int] | Declined:
    for value in concat.values:
        if value.rank == 0:  # concat reads a scalar as one element; a piece of it would be a scalar
            return Declined(op, f"concat input '{value.name}' is a scalar")
        if is_symbolic(value.shape[axis]):
            return Declined(op, f"concat input '{value.name}' has a run-time size on axis {axis}")
    return [int(value.shape[axis]) for value in concat.values]


def _window(reader: Reader, concat: Operation, axis: int, sizes: list[int]) -> Window | Declined:
    selected = reader.positions(axis, sum(sizes))
    if not selected:
        return Declined(reader.op, f"'{reader.output().name}' reads no element of the concat axis")
    others_kept = all(reader.keeps(other) for other in range(reader.op.x.rank) if other != axis)
    cuts = []
    for piece in pieces_of(selected, sizes):
        source = concat.values[piece.index]
        if others_kept and not reader.squeezes(axis) and piece.is_whole(sizes[piece.index]):
            cuts.append(Cut(source))
        else:
            cuts.append(Cut(source, *reader.cut(axis, piece.part)))
    if cuts == [Cut(value) for value in concat.values]:
        cuts = [Cut(concat.outputs[0])]  # the window reads the concat's output whole
    join_axis = axis - sum(reader.squeezes(other) for other in range(axis))
    return Window(reader.output(), tuple(cuts), join_axis, axis, selected, sum(sizes))


class WindowOfConcat(RewritePattern[tuple[Window, ...]]):
    """A window op whose ``x`` is a concat's output."""

    op_types = tuple(READERS)
    rule = "slice-of-concat"

    def match(self, op: Operation) -> tuple[Window, ...] | Declined | None:
        concat = op.x.op
        if concat is None or concat.op_type != "concat" or not any(map(is_used, op.outputs)):
            return None  # not a window of a concat, or dead code: nothing to move
        if concat.interleave is not None and concat.interleave.val:
            return Declined(op, f"concat '{concat.name}' interleaves its inputs")
        axis = concat.axis.val.item() % op.x.rank
        sizes = _concat_sizes(op, concat, axis)
        if isinstance(sizes, Declined):
            return sizes
        readers = READERS[op.op_type].read(op, axis)
        if isinstance(readers, Declined):
            return readers
        windows = []
        for reader in readers:
            if is_used(reader.output()):
                window = _window(reader, concat, axis, sizes)
                if isinstance(window, Declined):
                    return window  # the first refusal: the op stays as it is
                windows.append(window)
        return tuple(windows)

    def detail(self, op: Operation, match: tuple[Window, ...]) -> str:
        concat = op.x.op
        window = match[0]
        if len(match) > 1:
            reads = f"cuts axis {window.axis} of concat '{concat.name}' into {len(match)} windows"
        elif window.positions == range(window.axis_size):
            reads = f"reads all of axis {window.axis} of concat '{concat.name}' and cuts other axes"
        else:
            reads = (
                f"reads {_span(window.positions)} of axis {window.axis} "
                f"({window.axis_size} elements) of concat '{concat.name}'"
            )
        if all(w.cuts == (Cut(concat.outputs[0]),) for w in match):
            return f"{reads}, the whole axis: it is replaced by the concat itself"
        sources = sorted({c.source.name for w in match for c in w.cuts})
        return f"{reads}: it is cut from the concat's inputs instead ({', '.join(repr(n) for n in sources)})"

    def rewrite(self, op: Operation, match: tuple[Window, ...], rewriter: Rewriter) -> tuple[Var | None, ...]:
        joined: dict[Var, Var] = {}
        for window in match:
            name = window.output.name
            pieces = [_piece(cut, f"{name}_piece{k}", rewriter) for k, cut in enumerate(window.cuts)]
            joined[window.output] = (
                pieces[0]
                if len(pieces) == 1
                else rewriter.add(
                    "concat",
                    f"{name}_concat",
                    values=tuple(pieces),
                    axis=_const(rewriter, "axis", window.join_axis),
                    interleave=_const(rewriter, "interleave", False),
                )
            )
        return tuple(joined.get(out) for out in op.outputs)


def _piece(cut: Cut, name: str, rewriter: Rewriter) -> Var:
    if cut.op_type is None or cut.params is None:  # a Cut has both or neither
        return cut.source
    params = {param: _const(rewriter, param, values) for param, values in cut.params.items()}
    return rewriter.add(cut.op_type, name, x=cut.source, **params)


def _const(rewriter: Rewriter, param: str, value: Any) -> Any:
    """A shared const (:meth:`Rewriter.const`): windows share their bounds.

    Building ops is most of this pass's cost: sharing makes the streaming program's rewrite
    2 ops per window instead of 7. Negative bounds are not shared: coremltools' slice type
    inference rewrites them in place for the shape of the op at hand.
    """
    value = np.array(value, dtype=np.bool_ if param.endswith(("mask", "interleave")) else np.int32)
    if value.dtype != np.bool_ and (value < 0).any():
        return value
    return rewriter.const(value, f"concat_slice_{param}")


@register(DECLARATION)
class ConcatSliceToSliceConcat(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [WindowOfConcat()]

"""The Neural Engine refusal: which windows of a concat the ANE compiler rejects.

Reported on an M2 Pro (h14g compiler, macOS 27.2, coremltools 9.0, iOS17 target,
``.cpuAndNeuralEngine``): compiling for the Neural Engine fails ("Graph traversal failure",
return code 22) exactly when all four hold —

1. a ``slice_by_index`` slices a concat's output along the last axis;
2. the slice starts at an offset that is not a multiple of 8 elements;
3. its width is a multiple of 8 but not of 32;
4. a ``concat`` or ``stack`` then joins the slice with other tensors.

Starts 0/8/16/24/32 and widths 1, 2, 4, 9, 12, 31, 32, 33, 64 compile. Core ML then loads the model
without an error and runs every op on the CPU. See ``docs/neural-engine.md``. The predicate is applied
to the windows ``webnn::concat_slice_to_slice_concat`` matches (the rule ``ane-refused-slice-of-concat``
in :mod:`.program_rules`), which is what removes them.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ...passes.concat_slice_to_slice_concat import Window

ALIGNMENT = 8
BAD_WIDTH_PERIOD = 32
JOINS = ("concat", "stack")


def refused_join(op: Operation, window: Window) -> Operation | None:
    """The op that joins ``op``'s window when all four conditions hold, else None."""
    if op.op_type != "slice_by_index":
        return None
    width = len(window.positions)
    last_axis = window.axis == op.x.rank - 1
    cut = width < window.axis_size
    misaligned = window.positions.start % ALIGNMENT != 0
    bad_width = width % ALIGNMENT == 0 and width % BAD_WIDTH_PERIOD != 0
    if not (last_axis and cut and misaligned and bad_width):
        return None
    joins = [c for c in window.output.child_ops if c.op_type in JOINS and len(c.values) > 1]
    return joins[0] if joins else None


#: What every refused window shares (the grouped report's words).
REFUSED_CAUSE = "a misaligned window of a concat's last axis, joined again: the ANE compiler refuses the whole model"


def refusal_why(op: Operation, window: Window, join: Operation) -> str:
    """What a refused window does, in the words that follow the op's name."""
    start, width = window.positions.start, len(window.positions)
    return (
        f"cuts [{start}:{start + width}] (offset {start}, width {width}) from the last axis of concat "
        f"'{op.x.op.name}', and {join.op_type} '{join.name}' joins it"
    )

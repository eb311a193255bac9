"""Findings about a MIL program that Core ML would hide or fail on, with stable rule ids.

| rule | severity | evidence |
|---|---|---|
| ``ane-refused-slice-of-concat`` | error | FIELD_NOTES §1: the Neural Engine compiler refuses it |
| ``slice-of-concat`` | warning | any other window cut from a concat's output on its axis |
| ``non-bool-condition`` | warning | a cast to bool feeding ``select`` or a logical op (WebNN uint8, §1) |
| ``runtime-shape`` | info | a ``shape`` op that survives, with the reason (§1, §2 Shapes) |
| ``duplicate-name`` | error | ``protobuf_check``: a reloaded package reads the wrong definition (§2) |
| ``declared-type-mismatch`` | error | ``declared_types``: Core ML rejected the pywebnn MobileNetV2 (§1) |
| ``dynamic-quantization-param`` | error | ``runtime_quantization``: the iOS17 op spec requires const scale/zero_point |

The last three come from reading a model's protobuf (``mlpackage.read``), not from a Program.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from coremltools.converters.mil.mil import Operation, Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..reference.kernels.core import index_window
from ..ir import iter_ops

SEVERITIES = ("error", "warning", "info")
WINDOW_OPS = ("slice_by_index", "slice_by_size", "split")
LOGICAL_OPS = ("logical_and", "logical_or", "logical_xor", "logical_not")
ANE_ALIGNMENT, ANE_BAD_WIDTH_PERIOD = 8, 32


@dataclass(frozen=True)
class Finding:
    """One problem: a stable ``rule`` id, its ``severity``, the op it is about, and why."""

    rule: str
    severity: str
    op: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.severity}: [{self.rule}] {self.message}"


@dataclass(frozen=True)
class Window:
    """The part of a concat's axis that a window op reads: ``start`` and ``width`` elements."""

    axis: int
    start: int
    width: int
    stride: int
    axis_size: int


def concat_axis(concat: Operation) -> int | None:
    """The concat's axis as a non-negative int, or None when unknown."""
    rank = concat.outputs[0].rank
    axis = concat.axis.val
    return None if axis is None else int(axis) % rank


def window_on_concat(op: Operation) -> Window | None:
    """The window a ``slice_by_index`` cuts on its concat input's axis, when it is known."""
    x = op.x
    producer = x.op
    if producer is None or producer.op_type != "concat" or op.op_type != "slice_by_index":
        return None
    axis = concat_axis(producer)
    size = x.shape[axis] if axis is not None else None
    params = [op.begin.val, op.end.val]
    if axis is None or is_symbolic(size) or any(p is None for p in params):
        return None
    shape = [1 if is_symbolic(d) else int(d) for d in x.shape]
    optional = lambda var: None if var is None else var.val  # noqa: E731
    index, squeezed = index_window(
        shape, params[0], params[1], optional(op.stride), optional(op.begin_mask),
        optional(op.end_mask), optional(op.squeeze_mask),
    )
    start, stop, stride = index[axis].indices(int(size))
    return Window(axis, start, len(range(start, stop, stride)), stride, int(size))


def _keeps_concat_axis(op: Operation, concat: Operation) -> bool:
    """A ``slice_by_size`` or ``split`` that reads the concat axis whole, in order: it cuts other
    axes only, no window of the concat axis (as a whole-axis ``slice_by_index``)."""
    axis = concat_axis(concat)
    if axis is None:
        return False
    if op.op_type == "split":
        split_axis = op.axis.val
        return split_axis is not None and int(split_axis) % op.x.rank != axis
    begin, size = op.begin.val, op.size.val
    if begin is None or size is None:
        return False
    dim = op.x.shape[axis]
    whole = None if is_symbolic(dim) else int(dim)
    start, width = int(begin[axis]), int(size[axis])
    return (start == 0 or (whole is not None and start == -whole)) and (
        width == -1 or (whole is not None and width == whole)
    )


def _joins(var) -> list[Operation]:
    return [c for c in var.child_ops if c.op_type in ("concat", "stack") and len(c.values) > 1]


def _ane_refused(op: Operation, window: Window) -> Operation | None:
    """The joining op when all four conditions of FIELD_NOTES §1 hold, else None."""
    last_axis = window.axis == op.x.rank - 1
    cut = window.width < window.axis_size
    misaligned = window.start % ANE_ALIGNMENT != 0
    bad_width = window.width % ANE_ALIGNMENT == 0 and window.width % ANE_BAD_WIDTH_PERIOD != 0
    joins = _joins(op.outputs[0])
    if last_axis and cut and misaligned and bad_width and joins:
        return joins[0]
    return None


def _window_findings(op: Operation) -> list[Finding]:
    producer = op.x.op
    if producer is None or producer.op_type != "concat":
        return []
    if op.op_type != "slice_by_index" and _keeps_concat_axis(op, producer):
        return []
    window = window_on_concat(op)
    if window is not None:
        join = _ane_refused(op, window)
        if join is not None:
            return [Finding(
                "ane-refused-slice-of-concat", "error", op.name,
                f"{op.op_type} '{op.name}' cuts [{window.start}:{window.start + window.width}] "
                f"(offset {window.start}, width {window.width}) from the last axis of concat "
                f"'{producer.name}', and {join.op_type} '{join.name}' joins it: the Neural Engine "
                "compiler refuses this and Core ML runs the whole model on the CPU "
                "(fix: webnn::concat_slice_to_slice_concat)",
            )]
        if window.width == window.axis_size and window.stride == 1:
            return []
    return [Finding(
        "slice-of-concat", "warning", op.name,
        f"{op.op_type} '{op.name}' cuts a window from the output of concat '{producer.name}' "
        "(fix: webnn::concat_slice_to_slice_concat)",
    )]


def _condition_findings(op: Operation) -> list[Finding]:
    if op.op_type == "select":
        conditions = [("cond", op.cond)]
    else:
        conditions = [(name, op.inputs[name]) for name in ("x", "y") if name in op.inputs]
    findings = []
    for name, var in conditions:
        producer = var.op
        if producer is not None and producer.op_type == "cast" and producer.dtype.val == "bool":
            findings.append(Finding(
                "non-bool-condition", "warning", op.name,
                f"{op.op_type} '{op.name}' reads {name} from cast '{producer.name}' of "
                f"{types.builtin_to_string(producer.x.dtype)} to bool "
                "(fix: webnn::canonicalize_uint8_select)",
            ))
    return findings


def _shape_findings(op: Operation) -> list[Finding]:
    symbolic = [f"{axis} ({dim})" for axis, dim in enumerate(op.x.shape) if is_symbolic(dim)]
    reason = (
        f"dims {', '.join(symbolic)} of '{op.x.name}' are known only at run time"
        if symbolic
        else f"'{op.x.name}' has a static shape (fold it: webnn::fold_shape_ops)"
    )
    return [Finding("runtime-shape", "info", op.name, f"shape '{op.name}' survives: {reason}")]


RULES = {
    **{op_type: _window_findings for op_type in WINDOW_OPS},
    "select": _condition_findings,
    **{op_type: _condition_findings for op_type in LOGICAL_OPS},
    "shape": _shape_findings,
}


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos; stable within each."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))


def lint(prog: Program) -> list[Finding]:
    """Every finding in ``prog`` (all functions, nested blocks included), errors first."""
    if not isinstance(prog, Program):
        raise TypeError(f"lint() needs a coremltools MIL Program, got {type(prog).__name__}")
    findings = []
    for op in iter_ops(prog):
        rule = RULES.get(op.op_type)
        if rule is not None:
            findings.extend(rule(op))
    return by_severity(findings)

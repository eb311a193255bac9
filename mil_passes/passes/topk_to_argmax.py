"""``webnn::topk_to_argmax``: a k=1 ``topk`` read for its index alone is a ``reduce_argmax``.

Given (greedy decoding written as ``torch.topk(logits, 1)``)::

    %values, %indices = topk(x=%logits, k=1, axis=-1)         # only %indices is read

Result::

    %indices = reduce_argmax(x=%logits, axis=-1, keep_dims=True)

Core ML runs ``topk`` on the CPU (roboflow/rf-detr#1495, M3 Pro; apple/coreai-torch#66: a fixed
1.75 ms on an iPhone 17 Pro); ane-guide measures ``reduce_argmax`` native on every family (for an
axis of at most 2048). Exact: both give the first position of the largest value, a NaN counting
as the largest as torch sorts it — the interpreter's stable topk and numpy's argmax agree on ties
and NaN. An ascending topk is left: it sorts a NaN last, where ``reduce_argmin`` picks the first
NaN. The int32 index dtype of the topk (``output_indices_dtype``) must be the argmax's. The values
are not rewritten: ``reduce_max`` of a row holding both ``-0.0`` and ``+0.0`` may return either,
where topk returns the first.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var

from ..ir import is_used
from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..declaration import PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="topk_to_argmax",
    summary="Rewrite every descending k=1 topk read for its index alone as a reduce_argmax.",
    slots=(Slot(80, "common::remove_symbolic_reshape", "a topk's k is a constant after const_elimination"),),
    fixes=("ane-topk-sort",),
)


def _flag(op: Operation, name: str, default: bool) -> bool | None:
    var = getattr(op, name, None)
    if var is None:
        return default
    return None if var.val is None else bool(var.val)


class IndexOfTopOne(RewritePattern[str]):
    """``topk(x, k=1)`` whose values nobody reads → ``reduce_argmax`` (``reduce_argmin`` ascending)."""

    op_types = ("topk",)
    rule = "ane-topk-sort"
    cause = "takes the index of the top 1: Core ML runs topk on the CPU/GPU; a reduce_argmax runs on the Neural Engine"

    def match(self, op: Operation) -> str | Declined | None:
        if op.k.val is None or int(op.k.val) != 1:
            return None
        if len(op.outputs) < 2 or _flag(op, "return_indices", True) is False:
            return Declined(op, "it returns no indices")
        if is_used(op.outputs[0]):
            return Declined(op, "its values are read (reduce_max may differ in the sign of a zero)")
        if op.axis is not None and op.axis.val is None:
            return Declined(op, "its axis is known only at run time")
        dtype = getattr(op, "output_indices_dtype", None)
        if dtype is not None and dtype.val not in (None, "int32"):
            return Declined(op, f"its indices are {dtype.val} (reduce_argmax gives int32)")
        ascending = _flag(op, "ascending", False)
        if ascending is None:
            return Declined(op, "its order is known only at run time")
        if ascending:
            return Declined(op, "it is ascending: topk sorts a NaN last, reduce_argmin would pick it")
        return "reduce_argmax"

    def rewrite(self, op: Operation, kind: str, rewriter: Rewriter) -> tuple[Var | None, ...]:
        axis = int(op.axis.val) if op.axis is not None else -1
        indices = op.outputs[1]
        return (None, rewriter.add(kind, indices.name, x=op.x, axis=axis, keep_dims=True))


@register(DECLARATION)
class TopkToArgmax(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [IndexOfTopOne()]

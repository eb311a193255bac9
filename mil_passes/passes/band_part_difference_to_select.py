"""``webnn::band_part_difference_to_select``: torch's ``triu``/``tril`` as a select, not a subtraction.

Given (coremltools 9.0's torch frontend, ``triu(x, diagonal=1)`` on transformers' causal mask)::

    %mask = fill(shape=%s, value=-3.4028234663852886e+38)            # torch.finfo(float32).min
    %kept = band_part(x=%mask, lower=-1, upper=0)
    %triu = sub(x=%mask, y=%kept)

Result::

    %triu_band = fill(shape=%s, value=True)
    %triu_inside = band_part(x=%triu_band, lower=-1, upper=0)       # True inside the band
    %triu = select(cond=%triu_inside, a=0.0, b=%mask)

coremltools converts ``triu(x, k)`` with ``k > 0`` as ``x - band_part(x, -1, k - 1)`` and
``tril(x, k)`` with ``k < 0`` as ``x - band_part(x, -k - 1, -1)`` (``def triu``/``def tril`` in
``coremltools/converters/mil/frontend/torch/ops.py``). At fp16 ``finfo(float32).min`` is -inf,
and inside the band ``-inf - -inf`` is NaN: a causal LM with a run-time sequence length outputs
NaN (a static mask is folded to a constant before the fp16 casts).

Exact: for finite ``v``, ``v - band_part(v)`` is ``v - v = +0`` inside the band and ``v - (+0) = v``
outside (−0 stays −0); the select gives ``+0`` and ``v``, bit for bit. For ±inf or NaN inside the
band the subtraction gives NaN and the select 0, which is what torch's ``triu``/``tril`` compute.

The mask's shape is ``v``'s: the ``fill``'s own ``shape`` input when ``v`` is a ``fill`` (so no
``shape`` op is added), a constant when ``v``'s shape is static, else ``shape(v)``. ``band_part``
and ``fill`` take bool (their op specs: T in fp16, fp32, i32, bool), so no cast is needed and
``common::add_fp16_cast`` leaves the mask alone.

Float ``v`` only: int32 subtraction is exact (no infinities), and the frontend's bool form,
``sub(cast(b, int32), cast(band_part(b), int32))``, subtracts two different vars. A ``band_part``
that other ops also read stays for them.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import any_symbolic

from ..rewriter import PatternPass, RewritePattern, Rewriter
from ..declaration import LintRule, PassDeclaration, Slot
from . import register

DECLARATION = PassDeclaration(
    name="band_part_difference_to_select",
    summary="Rewrite every float `v - band_part(v)` (torch's triu/tril) as a select of 0 and `v`.",
    slots=(
        Slot(
            60,
            "common::remove_symbolic_reshape",
            "long before common::add_fp16_cast turns torch.finfo(float32).min into -inf (-inf - -inf is NaN); "
            "after const_elimination, which folds a static mask whole, and after fold_shape_ops, which may give "
            "the mask's shape constants; before the next canonicalize_uint8_select, which turns "
            "select(band, 0, ones) of a constant v into a cast",
        ),
    ),
    rules=(
        LintRule(
            "fp16-band-part-difference",
            "warning",
            "an fp16 `sub(x=v, y=band_part(v))`: torch's `triu`/`tril` as coremltools converts them",
            "an infinite `v` makes the band NaN (`-inf - -inf`): transformers' causal mask, "
            "`torch.finfo(float32).min`, is -inf at fp16, and GPT-2 with a run-time sequence outputs NaN "
            "(coremltools 9.0 `frontend/torch/ops.py`, `def triu`/`def tril`)",
        ),
        LintRule(
            "band-part-difference",
            "info",
            "the same `sub(x=v, y=band_part(v))` on fp32",
            "exact at fp32 for finite `v`; converted at fp16 (coremltools' default), the mask above is NaN",
        ),
    ),
)


def _band(op: Operation) -> Operation | None:
    """The ``band_part`` that ``sub`` ``op`` subtracts from its own ``x``, or None."""
    producer = op.y.op
    if producer is None or producer.op_type != "band_part" or producer.x is not op.x:
        return None
    return producer


class BandPartDifference(RewritePattern[Operation]):
    """``sub(x=v, y=band_part(v))`` of fp32 ``v`` → ``select(inside band, 0, v)``."""

    op_types = ("sub",)
    rule = "band-part-difference"
    dtype = types.fp32

    def match(self, op: Operation) -> Operation | None:
        if op.x.dtype != self.dtype:
            return None
        return _band(op)

    def detail(self, op: Operation, match: Operation) -> str:
        v = op.x.name
        return (
            f"subtracts band_part '{match.name}' of '{v}' from '{v}' (torch's triu/tril): "
            f"it becomes select(inside the band, 0, '{v}'), which gives 0 in the band where an infinite "
            f"'{v}' makes the subtraction NaN (torch.finfo(float32).min is -inf at fp16)"
        )

    def rewrite(self, op: Operation, match: Operation, rewriter: Rewriter) -> Var:
        v, out = op.x, op.outputs[0]
        band = rewriter.add("fill", f"{out.name}_band", shape=_shape(v, rewriter), value=True)
        inside = rewriter.add("band_part", f"{out.name}_inside", x=band, lower=match.lower.val, upper=match.upper.val)
        zero = np.zeros((), dtype=types.nptype_from_builtin(v.dtype))
        return rewriter.add("select", f"{out.name}_select", cond=inside, a=zero, b=v)


class Fp16BandPartDifference(BandPartDifference):
    """The same on fp16 ``v``, where an infinite ``v`` is likely (a warning, not a tidy-up)."""

    rule = "fp16-band-part-difference"
    dtype = types.fp16


def _shape(v: Var, rewriter: Rewriter) -> Var | np.ndarray:
    """``v``'s shape: a ``fill``'s shape input, a constant, or ``shape(v)``."""
    if v.op is not None and v.op.op_type == "fill":
        return v.op.shape
    if not any_symbolic(v.shape):
        return np.array(v.shape, dtype=np.int32)
    return rewriter.add("shape", f"{v.name}_shape", x=v)


@register(DECLARATION)
class BandPartDifferenceToSelect(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [BandPartDifference(), Fp16BandPartDifference()]

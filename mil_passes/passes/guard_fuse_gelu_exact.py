"""webnn::guard_fuse_gelu_exact — the gelu pattern gets its own ``0.5 * x`` when another op reads it.

``common::fuse_gelu_exact`` turns ``(0.5 * x) * (1 + erf(x / sqrt(2)))`` (its third form: the
``mul(0.5, x)`` on a branch of its own) into one ``gelu`` and deletes the ``mul(0.5, x)`` without
checking that nothing else reads it: ``ValueError: Cannot delete op ... with active output``
(found by ``--pipeline mil_passes``; docs/coremltools-passes.md). This pass, right before the pass
in ``mil_passes.pipeline()``, gives such a final ``mul`` a copy of the shared ``mul(0.5, x)``; the
other readers keep the original. (If the pass then does not fire, DEFAULT's
``remove_redundant_ops`` merges the copy back.)

Given::

    %half: (1, fp32) = mul(x=0.5, y=%x)
    %one_plus_erf: (1, fp32) = add(x=erf(x=real_div(x=%x, y=1.4142135)), y=1.0)
    %y: (1, fp32) = mul(x=%one_plus_erf, y=%half)
    %other: (1, fp32) = reshape(x=%half, shape=[-1])

Result::

    %half_copy: (1, fp32) = mul(x=0.5, y=%x)
    %y: (1, fp32) = mul(x=%one_plus_erf, y=%half_copy)
    %other: (1, fp32) = reshape(x=%half, shape=[-1])      # %half stays for it

Matched: a ``mul`` of an ``add`` (which reads an ``erf``) and a ``mul`` by a scalar const
(0.5 in the pass's pattern) that another op or a block output also reads.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Var

from ..rewriter import PatternPass, Rewriter, RewritePattern
from . import register

RULE = "shared-gelu-half"


def _reads_erf(var: Var) -> bool:
    add = var.op
    return (
        add is not None
        and add.op_type == "add"
        and any(v.op is not None and v.op.op_type == "erf" for v in (add.x, add.y))
    )


def _scaled_by_const(var: Var) -> bool:
    mul = var.op
    return mul is not None and mul.op_type == "mul" and any(v.val is not None and v.rank == 0 for v in (mul.x, mul.y))


class SharedGeluHalf(RewritePattern[str]):
    """The gelu's final mul reading a shared ``mul(c, x)`` → it reads a copy."""

    op_types = ("mul",)
    rule = RULE

    def match(self, op: Operation) -> str | None:
        for side, other in (("x", "y"), ("y", "x")):
            half, erf_side = getattr(op, side), getattr(op, other)
            if not (_reads_erf(erf_side) and _scaled_by_const(half)):
                continue
            if half.consuming_blocks or any(reader is not op for reader in half.child_ops):
                return side
        return None

    def describe(self, op: Operation, match: str) -> str:
        return f"mul '{op.name}' reads '{getattr(op, match).name}', which others read too: it reads a copy"

    def rewrite(self, op: Operation, match: str, rewriter: Rewriter) -> None:
        half = getattr(op, match)
        copy = rewriter.emit(op, "mul", f"{half.name}_copy", **dict(half.op.inputs))
        out = op.outputs[0]
        inputs = {**dict(op.inputs), match: copy}
        rewriter.replace(out, rewriter.emit(op, "mul", out.name, **inputs))


@register("guard_fuse_gelu_exact")
class GuardFuseGeluExact(PatternPass):
    """Give each gelu pattern's final mul its own copy of a shared ``mul(0.5, x)``."""

    name = "webnn::guard_fuse_gelu_exact"

    def patterns(self) -> list[RewritePattern]:
        return [SharedGeluHalf()]

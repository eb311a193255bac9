"""The guards' shared rewrite: an op's result read through an ``identity``, so a coremltools pass
that matches the op's direct readers does not see them; DEFAULT's ``noop_elimination`` removes it."""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation

from ..rewriter import Rewriter


def read_through_identity(op: Operation, rewriter: Rewriter) -> None:
    """Rebuild single-output ``op`` as ``<name>_op`` and give its readers ``identity(<name>_op)``,
    named as ``op``'s output was."""
    out = op.outputs[0]
    rebuilt = rewriter.emit(op, op.op_type, f"{out.name}_op", **dict(op.inputs))
    rewriter.replace(out, rewriter.emit(op, "identity", out.name, x=rebuilt))

"""Helpers the pass tests share."""

from __future__ import annotations

from coremltools.converters.mil.mil import Program

from mil_passes.ir import iter_ops
from mil_passes.reference import UnsupportedOpError, evaluate
from mil_passes.runner import run_pass


def run_registered(prog: Program, pass_name: str):
    """Run the registered pass ``pass_name`` on ``prog``, check it validates, return the pass
    instance (``last_result``, ``renames``: what it did)."""
    instance = run_pass(prog, pass_name)
    prog.validate()
    return instance


def only_op(prog: Program, op_type: str):
    """The one op of ``op_type`` in ``prog`` (fails if there are none or several)."""
    (op,) = [op for op in iter_ops(prog) if op.op_type == op_type]
    return op


def evaluates(drawn) -> bool:
    """Whether a drawn random program itself runs in the reference interpreter. The few that do
    not (22 of 10,000 when written: a ``squeeze`` without axes of symbolic dims fed size 1) say
    nothing about a pass; the generator's own tests own them. Use with ``hypothesis.assume``, so
    a run where too few programs evaluate fails instead of passing empty."""
    prog = drawn.build()
    try:
        for inputs in drawn.feeds:
            evaluate(prog, inputs)
    except (ValueError, UnsupportedOpError):
        return False
    return True

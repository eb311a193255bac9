"""Helpers the pass tests share."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from coremltools.converters.mil.mil import Program

from mil_passes.ir import iter_ops
from mil_passes.reference import UnsupportedOpError, evaluate
from mil_passes.rewriter import Declined


def only_op(prog: Program, op_type: str):
    """The one op of ``op_type`` in ``prog`` (fails if there are none or several)."""
    (op,) = [op for op in iter_ops(prog) if op.op_type == op_type]
    return op


def would_rewrite(pattern, op) -> bool:
    """Whether ``pattern`` matches ``op`` (neither no candidate nor declined)."""
    match = pattern.match(op)
    return match is not None and not isinstance(match, Declined)


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


def without_placement(findings):
    """``findings`` without the Neural Engine placement rules' (tests/test_neural_engine_rules.py
    checks those): what a test of a pass's dry run or of the protobuf checks is about. A model-level
    rejection a pass fixes stays: it is what that pass answers."""
    from mil_passes.lint.placement import RULES

    placement = {rule.id for rule in RULES if not (rule.whole_model and rule.fix_passes)}
    return [f for f in findings if (f["rule"] if isinstance(f, dict) else f.rule) not in placement]


def pass_lint(prog: Program, **options):
    """lint's findings of the package's passes (:func:`without_placement`)."""
    from mil_passes.lint import lint

    return without_placement(lint(prog, **options))


def reproducer(path: Path) -> ModuleType:
    """The reproducer script at ``path`` (docs/reproducers/), imported: its ``program()`` builds the
    program that shows the bug, its ``FEEDS`` or ``X`` the inputs that show it."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

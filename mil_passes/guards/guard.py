"""What a guard is: the coremltools pass it protects, rules (op types, a match predicate, a remedy),
and the pass it registers as ``webnn::guard_<the protected pass's name>``.

A rule's ``finds`` returns something truthy for an op the protected pass would get wrong (handed to
the remedy), or ``None``/``False`` for an op the pass handles right. Its docstring states the bug
and what the remedy does; docs/guards.md is generated from those docstrings. The remedies here are
the common cases; a guard with a rewrite of its own gives a ``pass_class`` instead of rules.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.passes.pass_registry import register_pass

from ..declaration import NAMESPACE
from ..rewriter import PatternPass, Replacements, Rewriter, RewritePattern


#: A guard's remedy: what a pattern's ``rewrite`` is (it returns the op's new outputs).
Remedy = Callable[[Operation, Any, Rewriter], Replacements]


def rebuild(op: Operation, rewriter: Rewriter, **changed: Any) -> Replacements:
    """An op of ``op``'s type whose inputs ``changed`` are replaced: the new values of ``op``'s outputs."""
    name = op.outputs[0].name if len(op.outputs) == 1 else op.name
    new = rewriter.add(op.op_type, name, **{**dict(op.inputs), **changed})
    return tuple(new) if isinstance(new, (list, tuple)) else new


def read_through(op: Operation, match: Any, rewriter: Rewriter) -> Var:
    """``op``'s readers read it through an ``identity`` (DEFAULT's ``noop_elimination`` removes
    it): ``op`` is rebuilt as ``<out>_op`` and the identity takes ``<out>``, its output's name."""
    out = op.outputs[0]
    rebuilt = rewriter.add(op.op_type, f"{out.name}_op", **dict(op.inputs))
    return rewriter.add("identity", out.name, x=rebuilt)


def identity_before(suffix: str = "_kept", input_name: str | None = None) -> Remedy:
    """``op`` reads its input ``input_name`` (or the input the match names) through an
    ``identity`` named ``<input><suffix>`` (DEFAULT's ``noop_elimination`` removes it)."""

    def remedy(op: Operation, match: Any, rewriter: Rewriter) -> Replacements:
        name = input_name or match
        var = op.inputs[name]
        return rebuild(op, rewriter, **{name: rewriter.add("identity", f"{var.name}{suffix}", x=var)})

    remedy.__name__ = f"identity_before({suffix!r})"
    return remedy


def copy_inputs(op: Operation, shared: list[Var], rewriter: Rewriter) -> Replacements:
    """``op`` reads ``<var>_copy``, a copy of the op that makes each var of ``shared`` (an input
    other ops read too); the others keep the original (``remove_redundant_ops`` merges the copy back
    if the protected pass does not fire)."""

    def copy(var: Var) -> Var:
        if var not in shared:
            return var
        return rewriter.add(var.op.op_type, f"{var.name}_copy", **dict(var.op.inputs))

    changed = {}
    for name, value in op.inputs.items():
        if isinstance(value, (list, tuple)) and any(v in shared for v in value):
            changed[name] = tuple(copy(v) for v in value)
        elif isinstance(value, Var) and value in shared:
            changed[name] = copy(value)
    return rebuild(op, rewriter, **changed)


def const_input(op: Operation, match: tuple[str, np.ndarray], rewriter: Rewriter) -> Replacements:
    """``op`` reads the const ``match = (input, value)`` (named ``<out>_<input>`` if new) in that input's place."""
    name, value = match
    return rebuild(op, rewriter, **{name: rewriter.const(value, f"{op.outputs[0].name}_{name}")})


def is_shared(var: Var, reader: Operation) -> bool:
    """Whether another op than ``reader``, or a block output, reads ``var``."""
    return bool(var.consuming_blocks) or any(other is not reader for other in var.child_ops)


@dataclass(frozen=True)
class GuardRule(RewritePattern[Any]):
    """A pattern value: ops of ``op_types`` that ``finds`` picks out (its truthy result is the
    match) get ``remedy``."""

    op_types: tuple[str, ...] = field()  # required: the base class's () is no default here
    finds: Callable[[Operation], Any]
    remedy: Remedy = read_through

    def match(self, op: Operation) -> Any:
        return self.finds(op) or None

    def rewrite(self, op: Operation, match: Any, rewriter: Rewriter) -> Replacements:
        return self.remedy(op, match, rewriter)


@dataclass(frozen=True)
class Guard:
    """A guard of ``protects`` (``common::<name>``): its rules, or a pass of its own."""

    protects: str
    rules: tuple[GuardRule, ...] = ()
    pass_class: type[PatternPass] | None = None
    #: The guard takes the protected pass's options (``mil_passes.pipeline()`` hands them on).
    shares_options: bool = False

    @property
    def name(self) -> str:
        return f"{NAMESPACE}::guard_{self.protects.split('::')[1]}"

    @property
    def doc(self) -> str:
        """The bug and the remedy: the rules' docstrings (or the pass class's)."""
        sources = [rule.finds for rule in self.rules] if self.rules else [self.pass_class]
        return "\n\n".join(inspect.getdoc(source) or "" for source in sources)


class GuardPass(PatternPass):
    """The pass of a guard made of rules (``guard`` is set per registered subclass)."""

    guard: ClassVar[Guard]

    def patterns(self) -> list[RewritePattern]:
        return list(self.guard.rules)


def register(guard: Guard) -> Guard:
    """Register ``guard``'s pass under ``guard.name`` (idempotent: re-imports override)."""
    short = guard.name.split("::")[1]
    cls: type[PatternPass] = guard.pass_class or type(short, (GuardPass,), {"guard": guard, "__doc__": guard.doc})
    cls.name = guard.name
    register_pass(namespace=NAMESPACE, override=True, name=short)(cls)
    return guard

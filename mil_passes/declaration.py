"""What a pass of the package declares about itself, once, in its own module.

A pass module holds one :class:`PassDeclaration` named ``DECLARATION``: its name, a one-line summary,
where it goes in the pipeline and why (:class:`Slot`, or :class:`Replacement` for a corrected
coremltools pass), and the lint rules it answers (:class:`LintRule`). Registration, the pipeline
schedule (``mil_passes.schedule``), ``mil-passes list``, the lint catalogue, docs/passes.md,
docs/rules.md and the README's table are all read from it.

This module imports no coremltools: :func:`declared` reads the declarations from the pass modules'
source, so ``mil-passes list`` and the catalogue start fast; a test checks they equal the objects the
imported modules hold.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

#: The namespace of every pass and guard the package registers in coremltools' pass registry.
NAMESPACE = "webnn"


def qualified(name: str) -> str:
    """A registry name: ``name`` itself if it has a namespace (``common::const_elimination``), else
    the package's pass of that name (``fold_shape_ops`` is ``webnn::fold_shape_ops``)."""
    return name if "::" in name else f"{NAMESPACE}::{name}"


class UnknownPass(ValueError):
    """A pass name that is not registered."""


def resolve_pass(name: str) -> str:
    """The registered pass ``name`` means (:func:`qualified`); :class:`UnknownPass` if there is none."""
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

    full = qualified(name)
    if full not in PASS_REGISTRY:
        known = ", ".join(pass_names(declared()))
        raise UnknownPass(f"unknown pass '{name}' (the package's passes: {known}; coremltools' as common::NAME)")
    return full


@dataclass(frozen=True)
class Slot:
    """One run of a pass in the pipeline: right before the first ``before`` of the base pipeline
    (after the package's previous run when the base lacks it, or ``None``: first), ordered among
    the package's runs by ``rank``; ``why`` it sits there."""

    rank: int
    before: str | None
    why: str


@dataclass(frozen=True)
class Replacement:
    """A corrected coremltools pass: ``pipeline()`` runs it in place of ``of``; ``why`` that is safe."""

    of: str
    why: str


@dataclass(frozen=True)
class LintRule:
    """A lint rule a pass answers: lint reports, under ``id``, what the pass would rewrite or leave."""

    id: str
    severity: str
    finds: str
    evidence: str


@dataclass(frozen=True)
class PassDeclaration:
    """Everything the package derives about one pass (registered as ``webnn::<name>``)."""

    name: str
    summary: str
    slots: tuple[Slot, ...] = ()
    replaces: Replacement | None = None
    rules: tuple[LintRule, ...] = ()
    #: Neural Engine placement rules (``lint/placement``) whose op the pass rewrites exactly where it matches.
    fixes: tuple[str, ...] = ()
    #: The pass may make outputs that were NaN or infinite finite (verify's ``repaired``); the fuzz
    #: accepts that from it alone, every other value bit for bit (``testing/fuzz/repairs.py``).
    may_repair: bool = False

    @property
    def full_name(self) -> str:
        return qualified(self.name)


PASSES_DIR = Path(__file__).parent / "passes"
_TYPES = {cls.__name__: cls for cls in (PassDeclaration, Slot, Replacement, LintRule)}


def _value(node: ast.expr):
    """A literal, a tuple of values, or a call of one of this module's types with such arguments."""
    if isinstance(node, ast.Tuple):
        return tuple(_value(item) for item in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _TYPES:
        args = [_value(arg) for arg in node.args]
        return _TYPES[node.func.id](*args, **{k.arg: _value(k.value) for k in node.keywords if k.arg})
    return ast.literal_eval(node)


def _statement(source: str) -> str:
    """The ``DECLARATION = …`` statement alone when it ends at a ``)`` of its own line (as formatted),
    so only it is parsed; else the whole source."""
    start = source.find("DECLARATION = ")
    end = source.find("\n)\n", start)
    if start == -1 or (start > 0 and source[start - 1] != "\n") or end == -1:
        return source
    return source[start : end + 2]


def declaration_in(source: str) -> PassDeclaration | None:
    """The ``DECLARATION = PassDeclaration(...)`` of a module's source, or None."""
    try:
        body = ast.parse(_statement(source)).body
    except SyntaxError:
        body = ast.parse(source).body
    for node in body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["DECLARATION"]:
            value = _value(node.value)
            if not isinstance(value, PassDeclaration):
                raise TypeError(f"DECLARATION must be a PassDeclaration, got {type(value).__name__}")
            return value
    return None


@functools.cache
def declared() -> tuple[PassDeclaration, ...]:
    """Every pass module's declaration, in module order, read without importing the modules."""
    found = (declaration_in(path.read_text()) for path in sorted(PASSES_DIR.glob("[!_]*.py")))
    return tuple(d for d in found if d is not None)


def pipeline_order(declarations: tuple[PassDeclaration, ...]) -> tuple[tuple[str, Slot], ...]:
    """Every run of the declared passes as (registry name, slot), in rank order."""
    runs = sorted(((slot, d.full_name) for d in declarations for slot in d.slots), key=lambda run: run[0].rank)
    ranks = [slot.rank for slot, _ in runs]
    if len(set(ranks)) != len(ranks):
        clash = sorted({rank for rank in ranks if ranks.count(rank) > 1})
        raise ValueError(f"two runs share the rank {clash[0]}: give each slot a rank of its own")
    return tuple((name, slot) for slot, name in runs)


def pass_names(declarations: tuple[PassDeclaration, ...]) -> tuple[str, ...]:
    """The scheduled passes, each once, in the order of their first run."""
    return tuple(dict.fromkeys(name for name, _ in pipeline_order(declarations)))


@functools.cache
def fixing_passes() -> dict[str, tuple[str, ...]]:
    """Each Neural Engine placement rule some passes declare they fix (``fixes``) → those passes' registry
    names, in module order."""
    fixes: dict[str, tuple[str, ...]] = {}
    for d in declared():
        for rule in d.fixes:
            fixes[rule] = (*fixes.get(rule, ()), d.full_name)
    return fixes

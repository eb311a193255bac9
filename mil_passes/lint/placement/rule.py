"""A Neural Engine placement rule: what it finds in MIL, on which chips, what follows, and its source.

An op rule's ``check(op, seen)`` looks at one op (``seen``: its :class:`~.facts.OpView`) and returns a
:class:`Hit` (the op is affected on these chip families, and why), ``None`` (not affected), or
:data:`UNKNOWN` (the rule cannot judge it: a symbolic size it depends on); a program rule looks at a
function and returns :class:`ProgramHit` s. A rule whose consequence is :data:`WHOLE_MODEL` is a
model-level rejection: one hit takes every op of the function off the Neural Engine.
Severity follows lint's policy (:mod:`mil_passes.lint.catalog`): **error** where Core ML rejects the
model, runs the op elsewhere or computes something else and the evidence is Apple's or measured
through Core ML; **warning** where the evidence is weaker (measured only on the private compiler
path or through Core AI, conflicting, or conditional); **info** for costs, including where Core ML's
planner prefers the CPU by cost (counted off the Neural Engine, marked as cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Union

from coremltools.converters.mil.mil import Operation

from ...declaration import fixing_passes
from ..chips import ALL

#: What follows when a rule holds.
REJECTED = "rejected"  # Core ML rejects the model
ELSEWHERE = "elsewhere"  # the op runs on the CPU or GPU
WHOLE_MODEL = "whole-model"  # the Neural Engine compiler rejects the model: every op runs on the CPU/GPU
CPU_BY_COST = "cpu-by-cost"  # Core ML's planner prefers the CPU for it though the ANE supports it
WRONG = "wrong"  # the Neural Engine computes wrong numbers
COST = "cost"  # it stays, at a cost
CONSEQUENCES = {
    REJECTED: "Core ML rejects the model",
    ELSEWHERE: "Core ML runs it on the CPU/GPU",
    WHOLE_MODEL: "the Neural Engine compiler rejects the whole model and Core ML runs every op on the CPU/GPU",
    CPU_BY_COST: "Core ML's planner prefers the CPU for it (a cost decision)",
    WRONG: "the Neural Engine computes it wrong",
    COST: "it costs more on the Neural Engine",
}
#: Consequences that take an op off the Neural Engine (the placement summary's ``off_ane``).
OFF = frozenset({REJECTED, ELSEWHERE, WHOLE_MODEL, CPU_BY_COST})

#: How strong a source is, strongest first: what a prediction's confidence names.
MEASURED = "M"  # measured by a third party through Core ML: a compute plan (MLComputePlan, Xcode) or a run
APPLE = "A"  # Apple's docs, an Apple repository, an Apple engineer
CORE_AI = "C"  # measured through Apple's Core AI, which compiles for the Neural Engine without Core ML
DIRECT = "D"  # measured only on the private compiler path, which skips Core ML
UNSOURCED = ""  # no source: an op no rule takes off and no published plan shows
STRENGTH = (MEASURED, APPLE, CORE_AI, DIRECT, UNSOURCED)
CONFIDENCES = {
    MEASURED: "measured through Core ML",
    APPLE: "Apple-documented",
    CORE_AI: "measured through Core AI",
    DIRECT: "measured on the private compiler path only",
    UNSOURCED: "no published source",
}
#: A prediction's confidence as the summary and ``--json`` name it.
CONFIDENCE_KEYS = {
    MEASURED: "coreml",
    APPLE: "apple",
    CORE_AI: "coreai",
    DIRECT: "private-path",
    UNSOURCED: "unsourced",
}


@dataclass(frozen=True)
class Source:
    """A public source: ``ref`` is a URL or ``owner/repo#N``; ``says`` quotes or paraphrases it."""

    ref: str
    confidence: str
    says: str


@dataclass(frozen=True)
class Hit:
    """The op is affected on ``families`` (chip family numbers), because of ``why`` (a phrase that
    follows the op's name: ``"computes in fp32"``)."""

    why: str
    families: frozenset[int] = ALL
    shared: str = ""  # what every hit of the rule shares, for the grouped report (default: why and outcome)


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:
        return False


#: A rule's answer when it cannot judge the op.
UNKNOWN = _Unknown()
Verdict = Union[Hit, _Unknown, None]


@dataclass(frozen=True)
class ProgramHit:
    """A program rule's finding: about the ``kind`` (``input``, ``output``, ``state``, ``model``)
    called ``name``, and the ops it takes off the Neural Engine (none for a cost)."""

    kind: str
    name: str
    hit: Hit
    ops: tuple[Operation, ...] = ()

    @property
    def subject(self) -> str:
        return "the model" if self.kind == "model" else f"{self.kind} '{self.name}'"


@dataclass(frozen=True)
class PlacementRule:
    """One reason an op leaves the Neural Engine (or is computed wrong or dear there).

    An op rule's ``check(op)`` returns a :data:`Verdict` for each non-const op of ``op_types``
    (every non-const op when None); a program rule (``on_program``) has ``check(function, dims)``
    return :class:`ProgramHit` s, for what is about the model's inputs, outputs and states."""

    id: str
    finds: str  # what the rule matches, in MIL terms (docs)
    consequence: str
    sources: tuple[Source, ...]
    advice: str  # what the user can do
    check: Callable[..., Any]
    op_types: tuple[str, ...] | None = None  # None: every non-const op
    severity_override: str | None = None
    on_program: bool = False
    says: str = ""  # what follows, in the finding's words (default: the consequence's)
    chips: str = "every chip"  # the chips it holds on, for the docs (the check says it per op)
    reported: bool = True  # False: it shows in the placement (its summary line) only, not as a finding

    @property
    def fix_passes(self) -> tuple[str, ...]:
        """The webnn:: passes that rewrite it exactly where their patterns match: the passes whose
        declarations name this rule among their ``fixes``."""
        return fixing_passes().get(self.id, ())

    @property
    def outcome(self) -> str:
        return self.says or CONSEQUENCES[self.consequence]

    @property
    def confidence(self) -> str:
        """The strongest of the sources (:data:`STRENGTH`: Core ML over Apple over Core AI over D)."""
        return min((s.confidence for s in self.sources), key=STRENGTH.index)

    @property
    def severity(self) -> str:
        if self.severity_override is not None:
            return self.severity_override
        if self.consequence in (COST, CPU_BY_COST):
            return "info"
        return "warning" if self.confidence in (DIRECT, CORE_AI) else "error"

    @property
    def moves_off(self) -> bool:
        return self.consequence in OFF

    @property
    def by_cost(self) -> bool:
        """Off the Neural Engine by Core ML's cost decision, not for want of support."""
        return self.consequence == CPU_BY_COST

    @property
    def whole_model(self) -> bool:
        """A model-level rejection: one hit takes every op of the function off."""
        return self.consequence == WHOLE_MODEL

    def table_row(self) -> str:
        """The rule as a row of docs/neural-engine.md's table."""
        sources = "<br>".join(f"{s.ref} ({s.confidence}): {s.says}" for s in self.sources)
        passes = ", ".join(f"`{name}`" for name in self.fix_passes)
        fix = f"{passes} (exact, where it matches); {self.advice}" if passes else self.advice
        return (
            f"| `{self.id}` | {self.severity} | {self.finds} | {self.chips} | {CONSEQUENCES[self.consequence]} | "
            f"{sources} | {fix} |"
        )

    @property
    def evidence(self) -> str:
        """The sources in one line (docs/rules.md; docs/neural-engine.md quotes them)."""
        return "; ".join(f"{s.ref} ({CONFIDENCES[s.confidence]})" for s in self.sources) + " (docs/neural-engine.md)"

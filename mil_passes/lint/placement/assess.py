"""Apply the placement rules to a program: findings, and where each op is predicted to run.

The prediction covers each function's top-level non-const ops in program order (a ``cond`` or
``while_loop`` counts once, its bodies with it). An op is *off* the Neural Engine when a rule whose
consequence moves it off holds on a checked chip; *unknown* when a rule could not judge it (a
size known only at run time that the rule depends on), its op type is not coremltools', or its
output has no rank; else it is placed on the Neural Engine. A *segment* is a maximal run of
consecutive ops on one side; an unknown op joins the segment it stands in. Every boundary between
segments is a copy between compute units.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coremltools.converters.mil.mil import Function, Operation, Program
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from .. import chips as chip_families
from ..dims import DimNames
from ..findings import Finding
from .facts import added_for_interface, forget, is_weight_op, view
from .op_rules import OP_RULES
from .program_rules import PROGRAM_RULES
from .rule import OFF, UNKNOWN, WHOLE_MODEL, Hit, PlacementRule

ANE, OFF_ANE, UNJUDGED = "ane", "off", "unknown"


@dataclass
class Segment:
    """A maximal run of consecutive ops on one side: ``ane`` or ``off`` (CPU/GPU)."""

    side: str
    ops: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)  # why the ops of an off segment are off

    def as_dict(self) -> dict:
        return {
            "unit": "ane" if self.side == ANE else "cpu_gpu",
            "ops": len(self.ops),
            "first": self.ops[0],
            "last": self.ops[-1],
            "rules": self.rules,
        }


@dataclass
class Placement:
    """Where the ops are predicted to run, on the chip families checked."""

    chips: tuple[str, ...]
    ops: int = 0
    off_ane: int = 0
    unknown: int = 0
    segments: list[Segment] = field(default_factory=list)
    off_rules: dict[str, int] = field(default_factory=dict)  # rule id -> ops it takes off

    def as_dict(self) -> dict:
        return {
            "chips": list(self.chips),
            "ops": self.ops,
            "off_ane": self.off_ane,
            "unknown": self.unknown,
            "segments": len(self.segments),
            "boundaries": max(0, len(self.segments) - 1),
            "off_by_rule": dict(sorted(self.off_rules.items())),
            "runs": [segment.as_dict() for segment in self.segments],
        }


_KNOWN_OPS = frozenset(SSAOpRegistry.core_ops) | frozenset(SSAOpRegistry.dialect_ops)


def _dispatch() -> tuple[dict[str, list[PlacementRule]], list[PlacementRule]]:
    by_type: dict[str, list[PlacementRule]] = {}
    every: list[PlacementRule] = []
    for rule in OP_RULES:
        if rule.op_types is None:
            every.append(rule)
        else:
            for op_type in rule.op_types:
                by_type.setdefault(op_type, []).append(rule)
    return by_type, every


_BY_TYPE, _EVERY_OP = _dispatch()
_RULES_OF: dict[str, tuple[PlacementRule, ...]] = {}  # op type -> its rules and the every-op ones


def _rules_of(op_type: str) -> tuple[PlacementRule, ...]:
    rules = _RULES_OF.get(op_type)
    if rules is None:
        rules = _RULES_OF[op_type] = (*_BY_TYPE.get(op_type, ()), *_EVERY_OP)
    return rules


def _message(rule: PlacementRule, subject: str, hit: Hit, checked: frozenset[int]) -> tuple[str, str]:
    """The finding's message and its cause (the message without its subject)."""
    on = chip_families.describe(hit.families & checked, checked)
    cause = f"{hit.why}: {rule.outcome} on {on}"
    return f"{subject} {cause} ({rule.sources[0].ref}); {rule.advice}", cause


@dataclass
class _Judged:
    side: str = ANE
    rules: list[str] = field(default_factory=list)


class _Assessor:
    def __init__(self, checked: frozenset[int], dims: DimNames, reported: set[tuple[str, str]]) -> None:
        self.checked, self.dims, self.reported = checked, dims, reported
        self.findings: list[Finding] = []

    def finding(
        self, rule: PlacementRule, op_name: str, op_type: str, subject: str, hit: Hit, interface: str | None = None
    ) -> bool:
        """Record a finding if the hit holds on a checked chip; whether it did. ``interface``: why the
        op is one coremltools adds for the interface (:func:`~.facts.added_for_interface`): then
        the finding is an info, with that reason."""
        if not hit.families & self.checked:
            return False
        if (rule.id, op_name) not in self.reported:  # a pass's dry run may have said it already, with its fix
            message, cause = _message(rule, subject, hit, self.checked)
            severity = rule.severity if interface is None else "info"
            if interface is not None:
                message, cause = f"{message} ({interface})", f"{cause} ({interface})"
            self.findings.append(Finding(rule.id, severity, op_name, self.dims(message), None, op_type, cause))
        return True

    def judge(self, op: Operation) -> _Judged:
        judged = _Judged()
        op_type = op.op_type
        if op_type not in _KNOWN_OPS or view(op).max_rank < 0:
            judged.side = UNJUDGED
        interface = added_for_interface(op)
        for rule in _rules_of(op_type):
            verdict = rule.check(op)
            if verdict is None:
                continue
            if verdict is UNKNOWN:
                if judged.side == ANE:
                    judged.side = UNJUDGED
            elif (
                self.finding(rule, op.name, op_type, f"{op_type} '{op.name}'", verdict, interface)
                and rule.consequence in OFF
            ):
                judged.side = OFF_ANE
                judged.rules.append(rule.id)
        for block in op.blocks:  # bodies run where their op runs: their findings still count
            for inner in block.operations:  # judge() goes into the inner op's own blocks
                if not is_weight_op(inner.op_type):
                    self.judge(inner)
        return judged

    def function(self, func: Function, placement: Placement) -> None:
        judged = {op: self.judge(op) for op in func.operations if not is_weight_op(op.op_type)}
        for rule in PROGRAM_RULES:
            for found in rule.check(func, self.dims):
                if self.finding(rule, found.name, found.kind, found.subject, found.hit):
                    for op in found.ops:
                        top = _top_level(op, func)
                        if rule.moves_off and top in judged:
                            judged[top].side = OFF_ANE
                            judged[top].rules.append(rule.id)
        _summarize(list(judged.items()), placement)


def _top_level(op: Operation, func: Function) -> Operation:
    while op.enclosing_block is not func and op.enclosing_block is not None:
        op = op.enclosing_block.outer_op
    return op


def _summarize(judged: list[tuple[Operation, _Judged]], placement: Placement) -> None:
    segments: list[Segment] = []
    pending: list[str] = []  # unknown ops before the first judged one
    for op, verdict in judged:
        placement.ops += 1
        if verdict.side == UNJUDGED:
            placement.unknown += 1
            if segments:
                segments[-1].ops.append(op.name)
            else:
                pending.append(op.name)
            continue
        if verdict.side == OFF_ANE:
            placement.off_ane += 1
            for rule in dict.fromkeys(verdict.rules):
                placement.off_rules[rule] = placement.off_rules.get(rule, 0) + 1
        if not segments or segments[-1].side != verdict.side:
            segments.append(Segment(verdict.side, pending))
            pending = []
        segments[-1].ops.append(op.name)
        for rule in verdict.rules:
            if rule not in segments[-1].rules:
                segments[-1].rules.append(rule)
    if pending:  # every op unknown
        segments.append(Segment(ANE, pending))
    placement.segments.extend(segments)


def assess(
    prog: Program,
    *,
    checked: frozenset[int] = chip_families.ALL,
    dims: DimNames | None = None,
    reported: set[tuple[str, str]] | None = None,
    whole_model: Finding | None = None,
) -> tuple[list[Finding], Placement]:
    """The placement findings of ``prog`` on the chip families ``checked`` and the predicted
    placement. ``reported``: (rule, op) pairs another check already reported (not repeated);
    ``whole_model``: a finding whose consequence is that no op runs on the Neural Engine."""
    assessor = _Assessor(checked, dims or DimNames.of_program(prog), reported or set())
    placement = Placement(tuple(chip_families.from_number(n).label for n in sorted(checked)))
    try:
        for func in prog.functions.values():
            assessor.function(func, placement)
    finally:
        forget()
    if whole_model is not None and placement.ops:
        placement.off_ane, placement.unknown = placement.ops, 0
        placement.off_rules = {whole_model.rule: placement.ops}
        names = [name for segment in placement.segments for name in segment.ops]
        placement.segments = [Segment(OFF_ANE, names, [whole_model.rule])]
    return assessor.findings, placement


WHOLE_MODEL_RULES = frozenset({"ane-refused-slice-of-concat"})
assert all(rule.consequence != WHOLE_MODEL for rule in OP_RULES)  # whole-model refusals come from lint's dry run

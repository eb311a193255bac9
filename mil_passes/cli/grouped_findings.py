"""Findings as a person reads them: one line per problem, however many layers repeat it.

Errors and warnings of one rule with one cause (the message without what names the op: every
layer of a decoder has the same) are one line, with the count, the op types and the first op
names; infos are one line per rule. A line is at most :data:`WIDTH` characters. ``--all`` (and
``--json``) list every finding as it is.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from ..lint import RULES, Finding
from ..lint.placement import Placement

WIDTH = 200
FIRST_NAMES = 3
_PLACES = frozenset({"input", "output", "state", "model"})


def fit(line: str, width: int = WIDTH) -> str:
    """``line`` cut to ``width`` characters, ending in ``…`` when cut."""
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def _key(finding: Finding) -> tuple[str, str, str, str]:
    if finding.severity == "info":
        return finding.severity, finding.location, finding.rule, ""
    return finding.severity, finding.location, finding.rule, _cause(finding)


def _cause(finding: Finding) -> str:
    if finding.cause:
        return finding.cause
    rule = RULES.get(finding.rule)
    return rule.finds if rule is not None else finding.message


def _kinds(group: list[Finding]) -> str:
    counts = Counter(f.op_type or "op" for f in group)
    shown = [f"{n} {kind}" for kind, n in counts.most_common(3)]
    return ", ".join(shown) + (", …" if len(counts) > 3 else "")


def _plural(kind: str) -> str:
    """``ops``, ``inputs``, ``states``; an op type stays as it is (``24 slice_by_index``)."""
    return f"{kind}s" if kind in _PLACES or kind == "op" else kind


def _noun(group: list[Finding]) -> str:
    return "places" if all(f.op_type in _PLACES for f in group) else "ops"


def _fix(group: list[Finding]) -> str:
    fixes = sorted({f.fix for f in group if f.fix})
    return f" (fix: {', '.join(fixes)})" if fixes else ""


def _group_line(group: list[Finding]) -> str:
    first = group[0]
    if len(group) == 1:
        line = str(first)
        if len(line) > WIDTH:
            subject = f"{first.op_type} '{first.op}'" if first.op_type and first.op_type != "model" else first.op
            where = f"{first.location}: " if first.location else ""
            line = f"{first.severity}: [{first.rule}] {where}{subject}: {_cause(first)}{_fix(group)}"
        return fit(line)
    causes = {_cause(f) for f in group}
    rule = RULES.get(first.rule)
    cause = causes.pop() if len(causes) == 1 or rule is None else rule.finds
    kinds = {f.op_type or "op" for f in group}
    counted = (
        f"{len(group)} {_plural(kinds.pop())}" if len(kinds) == 1 else f"{len(group)} {_noun(group)} ({_kinds(group)})"
    )
    where = f"{first.location}: " if first.location else ""
    head = f"{first.severity}: [{first.rule}] {where}{counted}: "
    fix = _fix(group)
    shown = 0 if first.severity == "info" else FIRST_NAMES  # infos are a summary: no names
    while True:  # as many first names as fit after the whole cause, down to none
        names = ", ".join(f.op for f in group[:shown] if f.op) + (", …" if len(group) > shown else "")
        tail = f"{fix}; first: {names}" if shown and names else fix
        if len(head) + len(cause) + len(tail) <= WIDTH or shown == 0:
            break
        shown -= 1
    return fit(head + fit(cause, max(WIDTH - len(head) - len(tail), 40)) + tail)


def grouped(findings: Iterable[Finding]) -> list[str]:
    """One line per (severity, function or stage, rule, cause) for errors and warnings, per rule
    (and function or stage) for infos; in the findings' order (errors first)."""
    groups: dict[tuple[str, str, str, str], list[Finding]] = {}
    for finding in findings:
        groups.setdefault(_key(finding), []).append(finding)
    return [_group_line(group) for group in groups.values()]


def findings_lines(findings: list[Finding], *, every: bool = False) -> list[str]:
    """The lines lint prints: every finding (``every``), or grouped."""
    return [str(f) for f in findings] if every else grouped(findings)


def placement_line(placement: Placement) -> str:
    """The placement summary in one line (:meth:`Placement.summary`, fitted to the terminal)."""
    return fit(placement.summary())


def segment_lines(placement: Placement) -> list[str]:
    """``--segments``: each segment, its unit, size, first and last op, and why it is off."""
    lines = []
    for number, segment in enumerate(placement.segments, start=1):
        unit = "Neural Engine" if segment.side == "ane" else "CPU/GPU"
        span = segment.ops[0] if len(segment.ops) == 1 else f"{segment.ops[0]} … {segment.ops[-1]}"
        why = f" ({', '.join(segment.rules)})" if segment.rules else ""
        lines.append(fit(f"  segment {number}: {unit}, {len(segment.ops)} ops: {span}{why}"))
    return lines

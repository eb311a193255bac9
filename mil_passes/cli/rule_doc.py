"""``mil-passes rule ID`` and ``rule --all``: each rule's trigger, severity, chips, consequence,
confidence, public sources and fix, read from lint's catalogue and the placement rules.

A rule of the package's passes (:mod:`mil_passes.lint.catalog`) states its evidence in one line
and names no chips or confidence: those fields are ``None`` (``-`` in text).
"""

from __future__ import annotations

from typing import Any

from ..lint import RULES
from ..lint.placement import RULES as PLACEMENT_RULES
from ..lint.placement.rule import CONFIDENCES, CONSEQUENCES
from .selection import unknown_rule

_PLACEMENT = {rule.id: rule for rule in PLACEMENT_RULES}


def rule_facts(rule_id: str) -> dict[str, Any]:
    """The rule ``rule_id`` as ``rule --json`` prints it; :class:`~.config.ConfigError` for an unknown id."""
    rule = RULES.get(rule_id)
    if rule is None:
        raise unknown_rule(rule_id)
    placement = _PLACEMENT.get(rule_id)
    if placement is not None:
        return {
            "id": rule_id,
            "severity": placement.severity,
            "trigger": placement.finds,
            "chips": placement.chips,
            "consequence": CONSEQUENCES[placement.consequence],
            "confidence": CONFIDENCES[placement.confidence],
            "sources": [
                {"ref": s.ref, "confidence": CONFIDENCES[s.confidence], "says": s.says} for s in placement.sources
            ],
            "fix": {"pass": ", ".join(placement.fix_passes) or None, "advice": placement.advice},
        }
    fix_pass = rule.fix if rule.fix.startswith("webnn::") else None
    return {
        "id": rule_id,
        "severity": rule.severity,
        "trigger": rule.finds,
        "chips": None,
        "consequence": None,
        "confidence": None,
        "sources": [{"ref": None, "confidence": None, "says": rule.evidence}],
        "fix": {"pass": fix_pass, "advice": None if fix_pass else (rule.fix or None)},
    }


def all_rule_facts() -> list[dict[str, Any]]:
    """Every rule, in the catalogue's order."""
    return [rule_facts(rule_id) for rule_id in RULES]


def rule_text(facts: dict[str, Any]) -> list[str]:
    """The rule as lines of text."""
    fix = facts["fix"]
    fixes = [f"mil-passes optimize runs {fix['pass']}" if fix["pass"] else None, fix["advice"]]
    lines = [
        f"{facts['id']} ({facts['severity']})",
        f"  trigger:     {facts['trigger']}",
        f"  severity:    {facts['severity']}",
        f"  chips:       {facts['chips'] or '-'}",
        f"  consequence: {facts['consequence'] or '-'}",
        f"  confidence:  {facts['confidence'] or '-'}",
        "  sources:",
    ]
    for source in facts["sources"]:
        ref = f"{source['ref']} ({source['confidence']}): " if source["ref"] else ""
        lines.append(f"    - {ref}{source['says']}")
    lines.append(f"  fix:         {'; '.join(f for f in fixes if f) or 'none: no rewrite keeps the numbers'}")
    return lines

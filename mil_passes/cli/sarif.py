"""``--output-format sarif``: findings as one SARIF 2.1.0 log, for code scanning.

The rules reported on are in ``runs[0].tool.driver.rules`` (with their trigger, fix, chips,
consequence, confidence and sources in each rule's ``properties``); each result names its rule
(``ruleId``, ``ruleIndex``), its level (error, warning; info is ``note``), the model's path as
the artifact's URI and the op as a logical location (kind ``member``: a member of the program).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any, Iterable

from .._version import __version__
from ..lint import Finding
from .rule_doc import rule_facts

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def artifact_uri(path: str | Path) -> str:
    """``path`` as a URI reference: relative paths stay relative, absolute ones are ``file://``."""
    path = Path(path)
    quoted = urllib.parse.quote(path.as_posix())
    return f"file://{quoted}" if path.is_absolute() else quoted


def _rule(facts: dict[str, Any]) -> dict[str, Any]:
    fix = facts["fix"]
    runs = f"mil-passes optimize runs {fix['pass']}" if fix["pass"] else None
    help_text = "; ".join(text for text in (runs, fix["advice"]) if text)
    return {
        "id": facts["id"],
        "shortDescription": {"text": facts["trigger"]},
        "help": {"text": help_text or "no rewrite keeps the numbers"},
        "defaultConfiguration": {"level": LEVELS[facts["severity"]]},
        "properties": {
            key: facts[key] for key in ("chips", "consequence", "confidence", "sources") if facts[key] is not None
        },
    }


def _result(finding: Finding, path: str | Path, rule_index: int) -> dict[str, Any]:
    location: dict[str, Any] = {"physicalLocation": {"artifactLocation": {"uri": artifact_uri(path)}}}
    if finding.op:
        location["logicalLocations"] = [{"name": finding.op, "kind": "member"}]
    result: dict[str, Any] = {
        "ruleId": finding.rule,
        "ruleIndex": rule_index,
        "level": LEVELS[finding.severity],
        "message": {"text": finding.message + (f" (fix: {finding.fix})" if finding.fix else "")},
        "locations": [location],
    }
    return result


def sarif_log(reports: Iterable[tuple[str | Path, list[Finding]]]) -> dict[str, Any]:
    """One SARIF 2.1.0 log of the findings of each ``(model path, findings)``."""
    reports = list(reports)
    rule_ids = list(dict.fromkeys(f.rule for _, findings in reports for f in findings))
    index = {rule: number for number, rule in enumerate(rule_ids)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "mil-passes",
                        "version": __version__,
                        "rules": [_rule(rule_facts(rule)) for rule in rule_ids],
                    }
                },
                "results": [_result(f, path, index[f.rule]) for path, findings in reports for f in findings],
            }
        ],
    }

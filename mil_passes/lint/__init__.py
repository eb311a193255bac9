"""Lint: what Core ML would refuse or hide in a MIL program, as findings with stable rule ids.

``lint(prog)`` is a dry run of the package's passes (:mod:`.dry_run`) and the Neural Engine
placement rules (:mod:`.placement`, which also predicts where each op runs: ``lint_report``); the
rules, their severities and evidence are in :mod:`.catalog`; chip families in :mod:`.chips`.
"""

from .catalog import RULES, CatalogEntry
from .chips import UnknownChip
from .dims import DimNames
from .dry_run import lint, lint_report, pass_findings
from .findings import SEVERITIES, Finding, by_severity
from .placement import Placement

__all__ = [
    "RULES",
    "SEVERITIES",
    "DimNames",
    "Finding",
    "Placement",
    "CatalogEntry",
    "UnknownChip",
    "by_severity",
    "lint",
    "lint_report",
    "pass_findings",
]

"""Lint: what Core ML would refuse or hide in a MIL program, as findings with stable rule ids.

``lint(prog)`` is a dry run of the package's passes (:mod:`.dry_run`); the rules, their
severities and evidence are in :mod:`.catalog`; the Neural Engine refusal in :mod:`.ane`.
"""

from .catalog import RULES, Rule
from .dims import DimNames
from .dry_run import lint, pass_findings
from .findings import SEVERITIES, Finding, by_severity

__all__ = ["RULES", "SEVERITIES", "DimNames", "Finding", "Rule", "by_severity", "lint", "pass_findings"]

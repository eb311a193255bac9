"""Lint: what Core ML would refuse or hide in a MIL program, as findings with stable rule ids."""

from .rules import SEVERITIES, Finding, by_severity, lint

__all__ = ["SEVERITIES", "Finding", "by_severity", "lint"]

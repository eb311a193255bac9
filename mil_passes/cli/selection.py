"""Which findings a command reports, ruff's way: rules selected by id or prefix, severities
overridden, and the Neural Engine's rules only where the user deploys to it.

Selection is applied to the findings lint produced; it never changes how they are computed. Two
layers decide whether a rule is on: the configuration file's (``select``, ``extend-select``,
``ignore``), then the command line's (``--select``, ``--extend-select``, ``--ignore``). A layer's
``select`` replaces what came before it; within a layer the most specific matching entry
decides (``ignore = ["ane-"]`` with ``extend-select = ["ane-gather"]`` keeps ``ane-gather``), and
``ignore`` wins a tie. ``ALL`` matches every rule.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Iterable

from ..lint import RULES, Finding, by_severity
from ..lint.placement import RULES as PLACEMENT_RULES
from .choices import WITH_NEURAL_ENGINE
from .config import Config, ConfigError

EVERY = "ALL"
#: The rules about the Neural Engine: its placement rules, the refusals of its compiler among them.
NEURAL_ENGINE_RULES = frozenset(rule.id for rule in PLACEMENT_RULES)


def nearest_rules(text: str, count: int = 3) -> list[str]:
    """The rule ids closest to ``text``, for a message about an unknown one."""
    return difflib.get_close_matches(text, list(RULES), n=count, cutoff=0.5)


def unknown_rule(text: str, where: str = "") -> ConfigError:
    """The error for ``text``, not a rule id (nor a prefix of one) where ``where`` names it."""
    near = nearest_rules(text)
    hint = f"did you mean {', '.join(near)}?" if near else "mil-passes rule --all lists them"
    return ConfigError(f"{where}: " * bool(where) + f"unknown rule '{text}' ({hint})")


def _check(entries: Iterable[str], where: str) -> tuple[str, ...]:
    """``entries`` if each is ``ALL`` or the prefix of a rule id; else :class:`ConfigError`."""
    entries = tuple(entries)
    for entry in entries:
        if entry != EVERY and not any(rule.startswith(entry) for rule in RULES):
            raise unknown_rule(entry, where)
    return entries


@dataclass(frozen=True)
class Layer:
    """One source's ``select`` (None: keep what came before), ``extend-select`` and ``ignore``."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    def decide(self, rule: str, on: bool) -> bool:
        """Whether ``rule`` is on after this layer, given ``on`` before it."""
        base = on if self.select is None else _longest(rule, self.select) >= 0
        chosen = _longest(rule, (*(self.select or ()), *self.extend_select))
        dropped = _longest(rule, self.ignore)
        if chosen < 0 and dropped < 0:
            return base
        return chosen > dropped


def _longest(rule: str, entries: Iterable[str]) -> int:
    """The length of the longest entry matching ``rule`` (``ALL``: 0), -1 when none does."""
    lengths = [0 if entry == EVERY else len(entry) for entry in entries if entry == EVERY or rule.startswith(entry)]
    return max(lengths, default=-1)


@dataclass(frozen=True)
class Selection:
    """The rules a command reports on, their severities, and the compute units deployed to."""

    layers: tuple[Layer, ...] = ()
    severity: dict[str, str] = field(default_factory=dict)
    compute_units: str = "all"

    @property
    def neural_engine(self) -> bool:
        """Whether the compute units hold the Neural Engine (its rules apply only then)."""
        return self.compute_units in WITH_NEURAL_ENGINE

    def enabled(self, rule: str) -> bool:
        if rule in NEURAL_ENGINE_RULES and not self.neural_engine:
            return False
        on = True
        for layer in self.layers:
            on = layer.decide(rule, on)
        return on

    def apply(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings of enabled rules, each at its configured severity, errors first."""
        kept = []
        for finding in findings:
            if self.enabled(finding.rule):
                level = self.severity.get(finding.rule, finding.severity)
                kept.append(finding if level == finding.severity else replace(finding, severity=level))
        return by_severity(kept)

    def hidden_by_compute_units(self, findings: Iterable[Finding]) -> int:
        """How many of ``findings`` are the Neural Engine's, not reported for these compute units."""
        return 0 if self.neural_engine else sum(f.rule in NEURAL_ENGINE_RULES for f in findings)


def selection(
    config: Config,
    *,
    select: Iterable[str] | None = None,
    extend_select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    compute_units: str | None = None,
) -> Selection:
    """The configuration's selection with the command line's flags over it; rule ids checked."""
    file_layer = Layer(
        None if config.select is None else _check(config.select, config.where("select")),
        _check(config.extend_select, config.where("extend-select")),
        _check(config.ignore, config.where("ignore")),
    )
    flag_layer = Layer(
        None if select is None else _check(select, "--select"),
        _check(extend_select, "--extend-select"),
        _check(ignore, "--ignore"),
    )
    for rule in config.severity:
        if rule not in RULES:
            raise unknown_rule(rule, config.where("severity"))
    return Selection((file_layer, flag_layer), dict(config.severity), compute_units or config.compute_units or "all")

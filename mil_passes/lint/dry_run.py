"""Lint of a Program: a dry run of the package's passes, then the Neural Engine placement rules.

Each pass is asked what it would rewrite (its own matchers, run without rewriting) and each
answer becomes a finding whose ``fix`` names the pass; a candidate the pass leaves unchanged
becomes a finding with ``fix=None`` and the pass's reason. So a finding names a pass exactly
when that pass would change the program. The placement rules (:mod:`.placement`) add what no pass
rewrites, and predict where each op runs; where a placement rule names the pass that fixes an op (a
window of a concat the Neural Engine compiler refuses), its finding replaces the pass's.
"""

from __future__ import annotations

from typing import Callable

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from ..passes.rename_duplicate_temporaries import RenameDuplicateTemporaries, plan_renames
from ..schedule import PASS_NAMES
from ..rewriter import Match, PatternPass
from . import chips as chip_families
from .catalog import RULES, severity_of
from .dims import DimNames
from .findings import Finding, by_severity
from .placement import RULES as PLACEMENT_RULES
from .placement import Placement, assess
from .zero_times_inf import zero_times_inf_findings

PLACEMENT_RULE_IDS = frozenset(rule.id for rule in PLACEMENT_RULES)


def _finding(rule: str, op, message: str, fix: str | None, cause: str = "") -> Finding:
    """A finding about ``op`` (an Operation, or a name); ``cause`` defaults to what the rule finds."""
    name, op_type = (op, "") if isinstance(op, str) else (op.name, op.op_type)
    return Finding(rule, severity_of(rule), name, message, fix, op_type, cause or RULES[rule].finds)


def _match_finding(found: Match, pass_name: str, words: DimNames) -> Finding:
    op = found.op
    return _finding(found.pattern.rule, op, words(found.describe()), pass_name, found.cause)


def _declined_cause(declined: Match, words: DimNames) -> str:
    """Why the pass leaves a candidate, as the grouped report shares it."""
    shared = declined.pattern.declined_because
    if not shared:
        return words(declined.match.reason)
    flexible = words.flexible()
    return f"{shared}, from {flexible}: expected with flexible inputs" if flexible else shared


def _pattern_findings(instance: PatternPass, pass_name: str, prog: Program, words: DimNames) -> list[Finding]:
    matches, declined = instance.find_matches(prog)
    findings = [_match_finding(found, pass_name, words) for found in matches]
    for left in declined:
        message = f"{words(left.describe())}; {pass_name} leaves it"
        findings.append(_finding(left.pattern.rule, left.op, message, None, _declined_cause(left, words)))
    return findings


def _rename_findings(
    instance: RenameDuplicateTemporaries, pass_name: str, prog: Program, words: DimNames
) -> list[Finding]:
    try:
        planned = plan_renames(prog)
    except ValueError as clash:
        return [_finding("interface-name-clash", "", str(clash), None)]
    findings = []
    for item, rename in planned:
        defined_by = getattr(item, "op", None) if rename.kind == "var" else item
        where = defined_by.name if defined_by is not None else rename.old
        message = (
            f"{rename.kind} '{rename.old}' is defined again where an earlier definition is visible: "
            f"a saved model would read the wrong one; it becomes '{rename.new}'"
        )
        findings.append(_finding("duplicate-name", where, message, pass_name))
    return findings


# How each kind of pass answers "what would you change?" without changing anything.
DRY_RUNS: dict[type, Callable[..., list[Finding]]] = {
    PatternPass: _pattern_findings,
    RenameDuplicateTemporaries: _rename_findings,
}


def pass_findings(prog: Program, pass_name: str, words: DimNames | None = None) -> list[Finding]:
    """The findings of one registered pass's dry run on ``prog`` (``prog`` is not changed)."""
    instance = PASS_REGISTRY[pass_name]
    for kind, dry_run in DRY_RUNS.items():
        if isinstance(instance, kind):
            return dry_run(instance, pass_name, prog, words or DimNames.of_program(prog))
    raise TypeError(f"{pass_name} cannot say what it would change (no dry run for {type(instance).__name__})")


def lint(prog: Program, *, dims: DimNames | None = None, chip: str | None = None) -> list[Finding]:
    """Every finding in ``prog`` (all functions, nested blocks included), errors first.

    ``dims`` names run-time dims in the user's words (default: from ``prog``'s inputs); ``chip``
    (``"M1"``, ``"A17 Pro"``, ``"H16"``…) narrows the Neural Engine rules to that chip's family
    (default: every family from the M1 / A14 up). Raises ``ValueError`` for an unknown chip.
    """
    return lint_report(prog, dims=dims, chip=chip)[0]


def checked_families(chip: str | None) -> frozenset[int]:
    """The chip families ``chip`` names (every family for None); ``ValueError`` naming the known chips."""
    return chip_families.ALL if chip is None else frozenset({chip_families.family_of(chip).number})


def lint_report(
    prog: Program, *, dims: DimNames | None = None, chip: str | None = None
) -> tuple[list[Finding], Placement]:
    """:func:`lint`'s findings and the predicted Neural Engine placement of ``prog``'s ops."""
    if not isinstance(prog, Program):
        raise TypeError(f"lint() needs a coremltools MIL Program, got {type(prog).__name__}")
    checked = checked_families(chip)
    words = dims or DimNames.of_program(prog)
    findings: list[Finding] = []
    for pass_name in PASS_NAMES:
        findings.extend(pass_findings(prog, pass_name, words))
    findings.extend(zero_times_inf_findings(prog))
    # A placement rule's candidate its pass leaves is the placement rule's to report, with its consequence.
    findings = [f for f in findings if f.fix is not None or f.rule not in PLACEMENT_RULE_IDS]
    reported = {(f.rule, f.op) for f in findings}
    fixes: dict[str, set[str]] = {}
    for f in findings:
        if f.fix is not None:
            fixes.setdefault(f.op, set()).add(f.fix)
    placement_findings, placement = assess(prog, checked=checked, dims=words, reported=reported, fixes=fixes)
    # A placement finding that names a pass's fix says more than the pass's own finding on that op.
    claimed = {(f.op, f.fix) for f in placement_findings if f.fix is not None}
    findings = [f for f in findings if (f.op, f.fix) not in claimed]
    return by_severity(findings + placement_findings), placement

"""Lint of a Program: a dry run of the package's passes.

Each pass is asked what it would rewrite (its own matchers, run without rewriting) and each
answer becomes a finding whose ``fix`` names the pass; a candidate the pass leaves unchanged
becomes a finding with ``fix=None`` and the pass's reason. So a finding names a pass exactly
when that pass would change the program. The only rule no pass implements here, the Neural
Engine refusal, is applied to the windows the concat-slice pass matches (:mod:`.ane`).
"""

from __future__ import annotations

from typing import Callable

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from ..passes.concat_slice_to_slice_concat import WindowOfConcat
from ..passes.rename_duplicate_temporaries import RenameDuplicateTemporaries, plan_renames
from ..placement import PASS_NAMES
from ..rewriter import Match, PatternPass
from .ane import refusal_message, refused_join
from .catalog import severity_of
from .dims import DimNames
from .findings import Finding, by_severity

Words = Callable[[str], str]


def _finding(rule: str, op: str, message: str, fix: str | None) -> Finding:
    return Finding(rule, severity_of(rule), op, message, fix)


def _match_finding(found: Match, pass_name: str, words: Words) -> Finding:
    op = found.op
    if isinstance(found.pattern, WindowOfConcat):
        join = refused_join(op, found.match[0])
        if join is not None:
            message = refusal_message(op, found.match[0], join)
            return _finding("ane-refused-slice-of-concat", op.name, message, pass_name)
    return _finding(found.pattern.rule, op.name, words(found.describe()), pass_name)


def _pattern_findings(instance: PatternPass, pass_name: str, prog: Program, words: Words) -> list[Finding]:
    matches, refusals = instance.find_matches(prog)
    findings = [_match_finding(found, pass_name, words) for found in matches]
    for refused in refusals:
        message = f"{words(refused.describe())}; {pass_name} leaves it"
        findings.append(_finding(refused.pattern.rule, refused.op.name, message, None))
    return findings


def _rename_findings(
    instance: RenameDuplicateTemporaries, pass_name: str, prog: Program, words: Words
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


def pass_findings(prog: Program, pass_name: str, words: Words | None = None) -> list[Finding]:
    """The findings of one registered pass's dry run on ``prog`` (``prog`` is not changed)."""
    instance = PASS_REGISTRY[pass_name]
    for kind, dry_run in DRY_RUNS.items():
        if isinstance(instance, kind):
            return dry_run(instance, pass_name, prog, words or DimNames.of_program(prog))
    raise TypeError(f"{pass_name} cannot say what it would change (no dry run for {type(instance).__name__})")


def lint(prog: Program, *, dims: DimNames | None = None) -> list[Finding]:
    """Every finding in ``prog`` (all functions, nested blocks included), errors first.

    ``dims`` names run-time dims in the user's words (default: from ``prog``'s inputs).
    """
    if not isinstance(prog, Program):
        raise TypeError(f"lint() needs a coremltools MIL Program, got {type(prog).__name__}")
    words = dims or DimNames.of_program(prog)
    findings: list[Finding] = []
    for pass_name in PASS_NAMES:
        findings.extend(pass_findings(prog, pass_name, words))
    return by_severity(findings)

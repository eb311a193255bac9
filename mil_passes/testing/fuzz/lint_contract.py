"""Lint's contract with the passes, checked on a drawn program.

For every pass P of the package and program X: some finding of ``lint(X)`` names P as its fix
exactly when running P alone on X changes X (its ops, names or wiring, as printed). Refusals
(findings with ``fix=None``) are not changes.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from ...lint import lint
from ...schedule import PASS_NAMES
from ..programs.recipe import program_text
from ..strategies import DrawnProgram


def changes(prog: Program, pass_name: str) -> bool:
    """Does running ``pass_name`` alone change ``prog``? (``prog`` is changed by the run.) A pass
    that refuses the whole program with ``ValueError`` changes nothing."""
    before = program_text(prog)
    try:
        PASS_REGISTRY[pass_name](prog)
    except ValueError:
        return False
    return program_text(prog) != before


def disagreements(drawn: DrawnProgram, named: set[str | None] | None = None) -> list[str]:
    """The passes on which lint and the pass disagree about ``drawn``, each with what each said;
    ``named``: the fixes lint names (computed when not given)."""
    if named is None:
        named = {finding.fix for finding in lint(drawn.build())}
    found = []
    for pass_name in PASS_NAMES:
        changed = changes(drawn.build(), pass_name)
        if changed != (pass_name in named):
            said = "names it" if pass_name in named else "does not name it"
            did = "changes the program" if changed else "changes nothing"
            found.append(f"{pass_name} {did} but lint {said}")
    return found


def check_lint_contract(drawn: DrawnProgram) -> bool:
    """Raise ``AssertionError`` on any disagreement; True when some pass changes the program."""
    named = {finding.fix for finding in lint(drawn.build())}
    problems = disagreements(drawn, named)
    if problems:
        raise AssertionError("; ".join(problems))
    return any(fix is not None for fix in named)

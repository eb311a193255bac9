"""Lint is a dry run of the passes: it names a pass exactly when that pass changes the program."""

from __future__ import annotations

from hypothesis import given, settings

from mil_passes.testing.fuzz.fuzzer import fuzz
from mil_passes.testing.fuzz.lint_contract import check_lint_contract, disagreements
from mil_passes.testing.strategies import programs


@settings(max_examples=60)
@given(programs())
def test_lint_names_a_pass_exactly_when_it_changes_the_program(drawn):
    assert disagreements(drawn) == []


def test_the_fuzzer_has_a_lint_target_and_it_holds():
    report = fuzz("lint", "lint", examples=15, at=3)
    assert (report.programs, report.failures) == (15, 0) and report.rewritten > 0


def test_a_lint_that_misses_a_rewrite_is_caught(monkeypatch):
    """The check can fail: with one pass's findings dropped, the contract breaks."""
    import mil_passes.testing.fuzz.lint_contract as contract

    real = contract.lint
    monkeypatch.setattr(contract, "lint", lambda prog: [f for f in real(prog) if f.fix != "webnn::fold_shape_ops"])
    found = []

    @settings(max_examples=40, database=None)
    @given(programs())
    def probe(drawn):
        try:
            check_lint_contract(drawn)
        except AssertionError as error:
            found.append(str(error))

    probe()
    assert any("webnn::fold_shape_ops changes the program but lint does not name it" in f for f in found)

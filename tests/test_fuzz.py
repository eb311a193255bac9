"""The fuzzer catches a broken pass and shrinks its failure; a correct pass gets 0 failures."""

from __future__ import annotations

import os
import re

import pytest
from coremltools.converters.mil.mil.passes.pass_registry import register_pass
from hypothesis import settings

import mil_passes
import mil_passes.testing.fuzz.fuzzer as fuzz_module
from mil_passes.rewriter import PatternPass, Declined, RewritePattern
from mil_passes.testing.fuzz.fuzzer import Failure, FuzzReport, default_targets, fuzz, main, select_targets
from mil_passes.testing.strategies import programs

BROKEN = "webnn_test::swap_concat_inputs"
CORRECT = "webnn_test::order_commutative_operands"


class SwapFirstTwo(RewritePattern):
    """Deliberately wrong: ``concat(values=(a, b, …))`` → ``concat(values=(b, a, …))``."""

    op_types = ("concat",)

    def match(self, op):
        values = op.values
        if op.name.endswith("_swapped") or len(values) < 2 or values[0] is values[1]:
            return Declined(op, "nothing to swap")
        return values

    def rewrite(self, op, values, rewriter):
        swapped = (values[1], values[0], *values[2:])
        return rewriter.add("concat", op.name + "_swapped", values=swapped, axis=op.axis, interleave=op.interleave)


class OrderOperands(RewritePattern):
    """Correct: operands of ``add``/``mul``/``logical_and``/``logical_or`` sorted by name (these
    commute bit for bit; maximum/minimum do not: ``max(-0.0, 0.0)`` keeps the first zero)."""

    op_types = ("add", "mul", "logical_and", "logical_or")

    def match(self, op):
        if op.x.name <= op.y.name:
            return Declined(op, "already in order")
        return True

    def rewrite(self, op, match, rewriter):
        return rewriter.add(op.op_type, op.name, x=op.y, y=op.x)


@register_pass(namespace="webnn_test", override=True, name="swap_concat_inputs")
class SwapConcatInputs(PatternPass):
    name = BROKEN

    def patterns(self):
        return [SwapFirstTwo()]


@register_pass(namespace="webnn_test", override=True, name="order_commutative_operands")
class OrderCommutativeOperands(PatternPass):
    name = CORRECT

    def patterns(self):
        return [OrderOperands()]


def test_a_broken_pass_is_caught_and_shrunk_to_a_small_program():
    # Shrinking as long as hypothesis itself allows: the default bound (SHRINK_SECONDS) is for the command,
    # and a loaded machine can reach it before this program is down to 3 ops.
    # The CI profile plants only the concat window (the pattern the broken pass rewrites) in the drawn
    # programs: every other pass's plant made them larger, and their shrink took 30-150 s of the suite.
    # HYPOTHESIS_PROFILE=deep (make fuzz) draws what the fuzzer draws for a package pass: every plant.
    deep = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
    strategy = None if deep else programs(plant=["webnn::concat_slice_to_slice_concat"])
    report = fuzz(BROKEN, BROKEN, examples=20, at=0, strategy=strategy, shrink_seconds=600)
    assert report.shrink_stopped is None
    assert report.failures > 0
    assert report.minimal, "a failure was counted but none was shrunk"
    smallest = min(report.minimal, key=lambda f: f.program.op_count)
    assert smallest.program.op_count <= 3, repr(smallest.program)
    text = str(smallest)
    assert "concat(values=" in text and "feeds[0]:" in text
    assert "differs" in smallest.error or "changed" in smallest.error


def test_a_correct_pass_has_no_failures_and_rewrites_some_programs():
    report = fuzz(CORRECT, CORRECT, examples=25, at=1)
    assert (report.programs, report.failures) == (25, 0)
    assert report.rewritten > 0
    assert re.fullmatch(rf"{CORRECT}: 25 programs, 0 failures, \d+% rewritten", report.line())


def test_a_seed_fixes_the_run():
    first, again = (fuzz(CORRECT, CORRECT, examples=6, at=5) for _ in range(2))
    assert (first.programs, first.rewritten) == (again.programs, again.rewritten) == (6, first.rewritten)


def test_report_line_format():
    report = FuzzReport("webnn::x", programs=8, failures=0, rewritten=3)
    assert report.line() == "webnn::x: 8 programs, 0 failures, 38% rewritten"
    report = FuzzReport("common::x", programs=8, failures=3, rewritten=3, unchecked=2)
    report.classes.update(crash=1, precision=1)
    assert report.line() == (
        "common::x: 8 programs, 3 failures, 38% rewritten: 1 miscompiles, 1 crashes, 1 precision; 2 unchecked"
    )
    assert report.serious and not FuzzReport("y", 8, 1, 0, classes={"precision": 1}).serious


def test_targets_are_every_registered_pass_the_pipeline_and_lint():
    assert list(default_targets()) == [*mil_passes.PASS_NAMES, "pipeline", "lint"]
    assert list(select_targets(["lint"])) == ["lint"]
    assert list(select_targets(["pipeline", BROKEN])) == ["pipeline", BROKEN]
    for name in mil_passes.PASS_NAMES:
        assert list(select_targets([name.split("::")[1]])) == [name]
    with pytest.raises(ValueError, match="unknown pass 'no_such_pass'"):
        select_targets(["no_such_pass"])


def test_cli_exit_codes_and_output(capsys, monkeypatch):
    assert main(["--pass", CORRECT, "--examples", "5", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(rf"{CORRECT}: 5 programs, 0 failures, \d+% rewritten\n", out)

    class Shown:  # stands in for a shrunk DrawnProgram (the broken-pass test shrinks real ones)
        def __repr__(self):
            return "main[CoreML7](...)"

    def failing(name, target, *, examples, at, **options):
        return FuzzReport(name, examples, 2, 1, [Failure("AssertionError: differs", Shown())])

    monkeypatch.setattr(fuzz_module, "fuzz", failing)
    assert main(["--pass", BROKEN, "--examples", "20"]) == 1
    assert capsys.readouterr().out == (
        f"{BROKEN}: 20 programs, 2 failures, 5% rewritten: 2 miscompiles, 0 crashes, 0 precision\n"
        f"--- {BROKEN}: minimal failing program 1 of 1 (miscompile)\nAssertionError: differs\nmain[CoreML7](...)\n\n"
    )

    def precision_only(name, target, *, examples, at, **options):
        report = FuzzReport(name, examples, 2, 1, [Failure("Fp16Changed: differs", Shown(), "precision")])
        report.classes["precision"] = 2
        return report

    monkeypatch.setattr(fuzz_module, "fuzz", precision_only)
    assert main(["--pass", BROKEN, "--examples", "20"]) == 0  # precision alone does not fail the run
    assert capsys.readouterr().out.startswith(
        f"{BROKEN}: 20 programs, 2 failures, 5% rewritten: 0 miscompiles, 0 crashes, 2 precision\n"
        f"--- {BROKEN}: minimal failing program 1 of 1 (precision)\n"
    )

    with pytest.raises(SystemExit) as stop:
        main(["--pass", "no_such_pass"])
    assert stop.value.code == 2
    assert "unknown pass 'no_such_pass'" in capsys.readouterr().err


def test_progress_goes_to_stderr_at_every_tenth(capsys):
    assert main(["--pass", CORRECT, "--examples", "20", "--seed", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"{CORRECT}: {n} of 20 programs, 0 failures so far" for n in range(2, 20, 2)]
    assert captured.out.startswith(f"{CORRECT}: 20 programs, 0 failures")


def test_jobs_fuzz_targets_in_workers_with_the_same_output(capsys, monkeypatch):
    argv = ["--pass", CORRECT, "--pass", "rename_duplicate_temporaries", "--examples", "4", "--seed", "2"]
    assert main(argv) == 0
    alone = capsys.readouterr().out
    assert main([*argv, "--jobs", "2"]) == 0
    assert capsys.readouterr().out == alone and alone.count("\n") == 2

    def failing(name, target, *, examples, at, **options):
        return FuzzReport(name, examples, 1 if name == BROKEN else 0, 0)

    monkeypatch.setattr(fuzz_module, "fuzz", failing)  # forked workers inherit the patch
    assert main(["--pass", CORRECT, "--pass", BROKEN, "--examples", "3", "--jobs", "2"]) == 1
    assert capsys.readouterr().out == (
        f"{CORRECT}: 3 programs, 0 failures, 0% rewritten\n"
        f"{BROKEN}: 3 programs, 1 failures, 0% rewritten: 1 miscompiles, 0 crashes, 0 precision\n"
    )
    with pytest.raises(SystemExit) as stop:
        main(["--jobs", "0"])
    assert stop.value.code == 2 and "--jobs must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", [*mil_passes.PASS_NAMES, "pipeline"])
def test_the_package_passes_survive_a_bounded_fuzz(name):
    """``make test``'s bounded run; the profile sizes it (ci: 25 programs, deep: 2,000)."""
    report = fuzz(name, default_targets()[name], examples=settings.default.max_examples, at=0)
    assert report.failures == 0, "\n\n".join([report.line(), *map(str, report.minimal)])


def _draws(name: str, examples: int = 12) -> tuple[list[str], str]:
    """The programs the target ``name`` draws (printed) and its report line."""
    drawn: list[str] = []
    real = fuzz_module.checker(name)

    def record(program, target):
        drawn.append(repr(program))
        return real(program, target)

    return drawn, fuzz(name, default_targets()[name], examples=examples, at=3, check=record).line()


def test_running_another_target_or_loading_a_module_first_leaves_a_targets_draws(tmp_path, monkeypatch):
    """Hypothesis mixes the constants of every loaded local module into its draws; the fuzzer
    leaves them out (seed_draws.py), so what ran or was imported before changes nothing."""
    target = "webnn::fold_shape_ops"
    first, line = _draws(target)
    fuzz(CORRECT, CORRECT, examples=6, at=0)  # another target first
    module = tmp_path / "fuzz_constants_module.py"
    module.write_text("".join(f"C{i} = {value}\n" for i, value in enumerate(range(-40, 400, 3))))
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("fuzz_constants_module")  # a local module with constants hypothesis would draw
    assert _draws(target) == (first, line)


def test_states_targets_are_named_and_drawn_as_stateful_programs():
    package = [name for name in default_targets() if name != "lint"]
    assert list(select_targets(None, states=True)) == [f"states:{name}" for name in package]
    assert list(select_targets(["lint", "fold_shape_ops"], ["mil_passes"], states=True)) == [
        "states:webnn::fold_shape_ops",
        "states:pipeline:mil_passes",
    ]
    mixed = select_targets(["states:common::canonicalize_inplace_pattern", "fold_shape_ops"], ["states:default"])
    assert list(mixed) == [
        "states:common::canonicalize_inplace_pattern",
        "webnn::fold_shape_ops",
        "states:pipeline:default",
    ]
    assert fuzz_module.checker("states:pipeline:default") is fuzz_module.check_stateful
    assert fuzz_module._target_named("states:pipeline:mil_passes").passes == mil_passes.pipeline().passes


def test_cli_states_fuzzes_stateful_programs(capsys):
    argv = ["--states", "--pass", "concat_slice_to_slice_concat", "--pass", "common::prefer_state_in_downstream"]
    assert main([*argv, "--examples", "15", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[:4] for line in lines] == [
        ["states", "webnn", "", "concat_slice_to_slice_concat"],
        ["states", "common", "", "prefer_state_in_downstream"],
    ]
    assert all(re.search(r": 15 programs, 0 failures, [1-9]\d*% rewritten$", line) for line in lines), lines

"""The fuzzer survives its own defects: a target whose programs cannot be drawn gets a row of its
own with the command that reproduces it and exit status 4, and the other targets still run;
shrinking stops in time, keeping the smallest failing program so far."""

from __future__ import annotations

import re

from hypothesis import strategies as st

import mil_passes.testing.fuzz.fuzzer as fuzz_module
from mil_passes.testing.programs.ops import OpEntry
from mil_passes.testing.programs.type_domains import held_dtypes
from mil_passes.testing.strategies import programs
from mil_passes.testing.fuzz.fuzzer import (
    FOUND_BUG,
    GENERATOR_ERROR,
    FuzzReport,
    fuzz,
    main,
    reproduce_command,
    shrink,
)

GOOD = "webnn::rename_duplicate_temporaries"
BAD = "webnn::fold_shape_ops"


def _drawn_badly(i: int) -> int:
    if i > 3:
        raise ValueError(f"op 'shape_9' cannot take uint8 (draw {i})")
    return i


BROKEN_DRAWS = st.integers(0, 10).map(_drawn_badly)


def test_an_exception_while_drawing_is_the_targets_generator_error():
    report = fuzz(BAD, BAD, examples=30, strategy=BROKEN_DRAWS, check=lambda drawn, target: False)
    assert report.generator_error is not None and report.generator_error.startswith("ValueError: op 'shape_9'")
    assert report.status == GENERATOR_ERROR and not report.serious
    assert re.fullmatch(
        rf"{BAD}: \d+ programs, 0 failures, 0% rewritten; generator error after \d+ programs: "
        r"ValueError: op 'shape_9' cannot take uint8 \(draw \d+\)",
        report.line(),
    )


def test_an_op_drawn_outside_its_type_domain_is_a_generator_error_naming_where(monkeypatch):
    """The issue's defect, put back: entries that take every dtype draw ``shape`` of a uint8."""
    monkeypatch.setattr(OpEntry, "dtypes", lambda entry, g: held_dtypes(g.opset))
    strategy = programs(ops=["cast", "shape"], plant=False, nested=False)
    report = fuzz(BAD, BAD, examples=100, strategy=strategy, check=lambda drawn, target: False)
    assert report.generator_error is not None, report.line()
    assert "expects tensor or scalar of dtype from type domain" in report.generator_error
    assert re.search(r"\(at testing/programs/ops_elementwise\.py:\d+ in add_unary\)$", report.generator_error)


def test_the_other_targets_still_run_and_the_exit_status_says_which(capsys, monkeypatch):
    real = fuzz_module.strategy_for
    never_drawn = st.integers(4, 10).map(_drawn_badly)
    monkeypatch.setattr(fuzz_module, "strategy_for", lambda name: never_drawn if name == BAD else real(name))
    for jobs in ("1", "2"):
        status = main(["--pass", BAD, "--pass", GOOD, "--examples", "6", "--seed", "3", "--jobs", jobs])
        lines = capsys.readouterr().out.splitlines()
        assert status == GENERATOR_ERROR == 4
        assert lines[0].startswith(f"{BAD}: 0 programs, 0 failures, 0% rewritten; generator error after 0 programs: ")
        assert lines[1] == f"--- {BAD}: reproduce: python -m mil_passes.testing.fuzz --pass {BAD} --examples 6 --seed 3"
        assert re.fullmatch(rf"{GOOD}: 6 programs, 0 failures, \d+% rewritten", lines[2])

    def bug_and_error(name, target, *, examples, at, **options):
        return FuzzReport(name, examples, 1, 0, generator_error="ValueError: x" if name == BAD else None)

    monkeypatch.setattr(fuzz_module, "fuzz", bug_and_error)
    assert main(["--pass", BAD, "--pass", GOOD, "--examples", "2"]) == FOUND_BUG | GENERATOR_ERROR == 5
    capsys.readouterr()

    def dies(name, target, *, examples, at, **options):
        raise MemoryError("worker gone")

    monkeypatch.setattr(fuzz_module, "fuzz", dies)
    assert main(["--pass", GOOD, "--examples", "2"]) == GENERATOR_ERROR
    assert capsys.readouterr().out.startswith(f"{GOOD}: generator error: MemoryError: worker gone")


def test_reproduce_commands_name_the_target_as_the_command_line_takes_it():
    assert reproduce_command("common::add_fp16_cast", 10, 7) == (
        "python -m mil_passes.testing.fuzz --pass common::add_fp16_cast --examples 10 --seed 7"
    )
    assert reproduce_command("pipeline:default", 4, 0).endswith("--pipeline default --examples 4 --seed 0")
    assert reproduce_command("states:pipeline:mil_passes", 4, 0).endswith(
        "--pipeline states:mil_passes --examples 4 --seed 0"
    )
    assert reproduce_command("states:webnn::x", 4, 0).endswith("--pass states:webnn::x --examples 4 --seed 0")


def test_shrinking_out_of_time_keeps_the_smallest_failing_program_so_far():
    def fails_above_two(drawn, target):
        assert drawn <= 2, f"{drawn} is too big"

    found, stopped = shrink(None, st.integers(0, 1000), 50, 0, fails_above_two, seconds=0.0)
    assert stopped == 0.0 and len(found) == 1 and found[0].program > 2
    found, stopped = shrink(None, st.integers(0, 1000), 50, 0, fails_above_two)
    assert stopped is None and [f.program for f in found] == [3]  # shrunk all the way

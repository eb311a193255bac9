"""Shrinking a program on which a coremltools pass fails, and the standalone reproducer script."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from mil_passes.testing.fuzz.fuzzer import (
    check_drawn,
    check_verified,
    checker,
    culprit_error,
    program_before_pass,
    select_targets,
)
from mil_passes.testing.fuzz.minimize import minimize
from mil_passes.testing.programs.recipe import InputDecl, Recipe, Ref, Step, program_text
from mil_passes.testing.fuzz.reproducer import reproducer_script, write_reproducer

FEEDS = {"x0": np.array([1, -2], np.float32), "x1": np.array([3, 4], np.float32)}


def hidden_bug(consumer: bool = False) -> Recipe:
    """The const_elimination bug (slice of a concat's const part) among ops that do not matter."""
    steps = [
        Step("relu", "r1", {"x": Ref(0)}),
        Step("concat", "c1", {"values": (Ref(2), np.array([-10.5, 0.25, 3.0], np.float32)), "axis": np.int32(0)}),
        Step("slice_by_index", "s1", {"x": Ref(3), "begin": np.array([2], np.int32), "end": np.array([4], np.int32)}),
        Step("add", "a1", {"x": Ref(0), "y": Ref(1)}),
        Step("mul", "m1", {"x": Ref(5), "y": Ref(5)}),
    ]
    outputs = [Ref(4), Ref(6)]
    if consumer:
        steps.append(Step("add", "a2", {"x": Ref(4), "y": Ref(6)}))
        outputs = [Ref(7)]
    inputs = (InputDecl("fp32", (2,), "x0"), InputDecl("fp32", (2,), "x1"))
    return Recipe(ct.target.iOS17, inputs, steps, outputs)


def run_script(path):
    return subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)


def test_minimize_keeps_the_failure_and_drops_the_rest():
    minimized = minimize(hidden_bug(), "default", [FEEDS])
    assert minimized.passes == ["common::const_elimination"]  # the passes before it do not matter
    assert minimized.signature.pass_name == "common::const_elimination"
    assert minimized.signature.kinds == {"dtype"}
    assert minimized.non_const_ops <= 2
    ops = [op.op_type for op in minimized.recipe.build().functions["main"].operations if op.op_type != "const"]
    assert ops == ["concat", "slice_by_index"]


def test_minimize_out_of_time_keeps_the_failing_program_and_says_it_stopped_early():
    minimized = minimize(hidden_bug(), "default", [FEEDS], seconds=0.0)
    assert minimized.stopped_early and minimized.checks == 0
    assert minimized.signature.pass_name == "common::const_elimination"
    assert minimized.non_const_ops == 5  # relu, concat, slice, add, mul: the program as found
    assert not minimize(hidden_bug(), "default", [FEEDS]).stopped_early


def test_minimize_of_a_program_that_does_not_fail():
    recipe = hidden_bug()
    recipe.outputs = [Ref(6)]
    assert minimize(recipe, "default", [FEEDS]) is None


def test_reproducer_shows_the_bug_and_turns_0_when_fixed(tmp_path):
    path = write_reproducer(minimize(hidden_bug(), "default", [FEEDS]), tmp_path / "repro.py")
    result = run_script(path)
    assert result.returncode == 1, result.stderr
    assert "before fp32[2] = [0.25, 3.0]; after int32[2] = [0, 3]" in result.stdout
    fixed = tmp_path / "fixed.py"  # as if the pass were fixed: one that changes nothing
    fixed.write_text(
        path.read_text().replace("PASSES = ['common::const_elimination']", "PASSES = ['common::noop_elimination']")
    )
    result = run_script(fixed)
    assert result.returncode == 0 and "fixed" in result.stdout


def test_reproducer_of_the_raising_variant(tmp_path):
    minimized = minimize(hidden_bug(consumer=True), "default", [FEEDS])
    assert minimized.signature.status == "raised" and minimized.signature.kinds == {"ValueError"}
    assert minimized.non_const_ops <= 5
    script = reproducer_script(minimized)
    assert "import mil_passes" not in script and "from mil_passes" not in script
    result = run_script(write_reproducer(minimized, tmp_path / "raised.py"))
    assert result.returncode == 1 and "common::const_elimination raises ValueError" in result.stdout


def test_fuzz_targets_of_pipelines_and_their_passes():
    targets = select_targets(None, ["default"], ["cleanup"])
    assert isinstance(targets["pipeline:default"], PassPipeline)
    assert [name for name in targets if name != "pipeline:default"] == list(dict.fromkeys(PassPipeline.CLEANUP.passes))
    assert checker("common::const_elimination") is check_verified
    assert checker("webnn::fold_shape_ops") is check_drawn and checker("pipeline") is check_drawn
    assert checker("webnn_test::a_pass") is check_drawn and checker("pipeline:default") is check_verified
    with pytest.raises(ValueError, match="unknown pipeline 'fast'"):
        select_targets(None, ["fast"])


def test_culprits_raise_their_own_error_types():
    changed = culprit_error("common::const_elimination", "changed")
    assert issubclass(changed, AssertionError) and changed.__name__ == "CommonConstEliminationChanged"
    assert changed is culprit_error("common::const_elimination", "changed")
    assert changed is not culprit_error("common::const_elimination", "raised")
    assert changed is not culprit_error("common::cast_optimization", "changed")


def test_reproducer_of_a_value_change_known_only_at_run_time_says_so(tmp_path):
    """cast_optimization fuses fp32 -> uint8 -> bool into fp32 -> bool: 0.5 was False, becomes True."""
    steps = [
        Step("cast", "to_uint8", {"x": Ref(0), "dtype": "uint8"}),
        Step("cast", "to_bool", {"x": Ref(1), "dtype": "bool"}),
        Step(
            "select",
            "picked",
            {"cond": Ref(2), "a": np.array([-30, -29, -28], np.float16), "b": np.array([-40], np.float16)},
        ),
    ]
    recipe = Recipe(ct.target.iOS17, (InputDecl("fp32", (3,), "x0"),), steps, [Ref(3)])
    feeds = {"x0": np.array([0, -10, 0.5], np.float32)}
    minimized = minimize(recipe, ["common::cast_optimization"], [feeds])
    assert minimized.signature.kinds == {"values"} and minimized.row.outputs["picked"].max_abs == 12
    result = run_script(write_reproducer(minimized, tmp_path / "cast.py"))
    assert result.returncode == 2 and "cannot tell without Core ML" in result.stdout


def test_check_verified_says_whether_the_program_changed():
    from mil_passes.testing.programs.recipe import DrawnProgram

    unchanged = DrawnProgram(hidden_bug(), [FEEDS])
    unchanged.recipe.outputs = [Ref(6)]
    assert check_verified(unchanged, "common::lower_complex_dialect_ops") is False
    assert check_verified(unchanged, "common::dead_code_elimination") is True  # the unread ops go
    with pytest.raises(AssertionError, match="common::const_elimination changed: output 's1' became int32"):
        check_verified(DrawnProgram(hidden_bug(), [FEEDS]), "common::const_elimination")


def test_program_before_pass_is_what_the_culprit_pass_was_given():
    from mil_passes.testing.programs.recipe import DrawnProgram

    drawn = DrawnProgram(hidden_bug(), [FEEDS])
    drawn.recipe.outputs = [Ref(6)]  # r1, c1 and s1 are dead code
    target = ["common::dead_code_elimination", "common::const_elimination"]
    assert program_text(program_before_pass(drawn, target, 1)) == program_text(drawn.build())
    expected = drawn.build()
    PASS_REGISTRY["common::dead_code_elimination"](expected)
    assert program_text(program_before_pass(drawn, target, 2)) == program_text(expected) != program_text(drawn.build())


DOCS = Path(__file__).resolve().parent.parent / "docs" / "reproducers"


@pytest.mark.parametrize(
    "script, status, words",
    [
        ("const_elimination_raises.py", 1, "common::const_elimination raises ValueError"),
        ("cast_optimization_float_int_bool.py", 2, "= cast(x=%x0, dtype=bool"),  # the fused cast, printed
        ("add_fp16_cast_overflow.py", 1, "-inf"),
        ("remove_symbolic_reshape_output.py", 1, "raises ValueError: cannot delete op gather_2"),
        ("add_int16_cast_gather_data.py", 2, 'cast(x=%x0, dtype="int16"'),
    ],
)
def test_the_documented_reproducers_say_what_the_docs_say(script, status, words):
    """docs/coremltools-passes.md describes these (coremltools 9.0); update both when one changes."""
    result = run_script(DOCS / script)
    assert result.returncode == status, result.stdout + result.stderr
    assert words in result.stdout

"""The fuzz accepts a repair (NaN or infinite outputs made finite) from a pass that declares it may
repair, and from no other: the same rewrite from an undeclared pass is a miscompile."""

from __future__ import annotations

import re

import coremltools as ct
import numpy as np
import pytest
from hypothesis.strategies import just
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import register_pass

import mil_passes.testing.fuzz.fuzzer as fuzz_module
from mil_passes.passes.finite_mask_sentinels import DECLARATION, InfiniteMaskSentinel
from mil_passes.rewriter import PatternPass
from mil_passes.testing.fuzz.fuzzer import FuzzReport, check_drawn, classify, main
from mil_passes.testing.fuzz.repairs import check_repairs, may_repair
from mil_passes.testing.programs.recipe import DrawnProgram, InputDecl, Recipe, Ref, Step
import test_equivalence  # noqa: F401 - registers test_harness::append_relu_each_run

DECLARING = DECLARATION.full_name  # webnn::finite_mask_sentinels
UNDECLARED = "webnn_test::undeclared_mask_sentinels"
INF = np.float16(np.inf)
APPEND_RELU = "test_harness::append_relu_each_run"  # exact on a softmax's output, not idempotent on purpose


@register_pass(namespace="webnn_test", override=True, name="undeclared_mask_sentinels")
class UndeclaredMaskSentinels(PatternPass):
    """finite_mask_sentinels' rewrite, from a pass that does not declare it may repair."""

    name = UNDECLARED

    def patterns(self):
        return [InfiniteMaskSentinel()]


def masked_softmax(*rows: list[float]) -> DrawnProgram:
    """``softmax(x + [[0, 0, -inf]])`` of an fp16 ``x`` fed ``rows``::

    %scores = add(x=%x, y=[[0.0, 0.0, -inf]])
    %probs = softmax(x=%scores, axis=-1)
    """
    steps = [
        Step("add", "scores", {"x": Ref(0), "y": np.array([[0, 0, -INF]], np.float16)}),
        Step("softmax", "probs", {"x": Ref(1), "axis": -1}),
    ]
    recipe = Recipe(ct.target.iOS17, (InputDecl("fp16", (len(rows), 3), "x"),), steps, [Ref(2)])
    return DrawnProgram(recipe, [{"x": np.array(rows, np.float16)}])


# Row 0 keeps only -inf logits: NaN with the -inf sentinel, [0, 0, 1] with -40000. Row 1 is the same either way.
REPAIRABLE = masked_softmax([-INF, -INF, 1], [1, 2, 3])


def test_the_declaring_pass_may_repair_and_the_same_rewrite_undeclared_may_not():
    assert may_repair(DECLARING) and not may_repair(UNDECLARED)
    statuses: set[str] = set()
    assert check_drawn(REPAIRABLE, DECLARING, statuses) and statuses == {"repaired"}
    after, repaired = check_repairs(REPAIRABLE, DECLARING)
    assert repaired == 3 and "-40000.0" in str(after)  # the whole row, once a NaN each

    with pytest.raises(AssertionError, match=r"before np.float16\(nan\), after np.float16\(0.0\)") as error:
        check_drawn(REPAIRABLE, UNDECLARED, set())
    assert classify(error.value) == "miscompile"


def test_a_repair_moves_no_other_value():
    # Row 1's masked logit 60000 - 40000 outweighs the kept ones: a finite value changed, a miscompile.
    outweighed = masked_softmax([-INF, -INF, 1], [1, 2, 60000])
    with pytest.raises(AssertionError, match=f"{DECLARING}: output 'probs' differs at 3 of 6 elements"):
        check_drawn(outweighed, DECLARING, set())


def test_a_pipeline_accepts_a_repair_only_from_the_pass_that_declares_it():
    declaring_first = PassPipeline(pass_names=[DECLARING, UNDECLARED], pipeline_name="custom")
    statuses: set[str] = set()
    assert check_drawn(REPAIRABLE, declaring_first, statuses) and statuses == {"repaired"}
    undeclared_first = PassPipeline(pass_names=[UNDECLARED, DECLARING], pipeline_name="custom")
    with pytest.raises(AssertionError, match=f"^{re.escape(UNDECLARED)}: output 'probs' differs"):
        check_drawn(REPAIRABLE, undeclared_first, set())


def test_repaired_programs_are_counted_apart_and_pass_the_run(capsys, monkeypatch):
    report = FuzzReport(DECLARING, programs=8, failures=0, rewritten=3, repaired=2, unchecked=1)
    assert report.line() == f"{DECLARING}: 8 programs, 0 failures, 38% rewritten; 2 repaired; 1 unchecked"
    assert not report.serious

    def repairing(name, target, *, examples, at, **options):
        return FuzzReport(name, examples, 0, 1, repaired=1)

    monkeypatch.setattr(fuzz_module, "fuzz", repairing)
    assert main(["--pass", DECLARING, "--examples", "5"]) == 0
    assert capsys.readouterr().out == f"{DECLARING}: 5 programs, 0 failures, 20% rewritten; 1 repaired\n"


def test_the_fuzz_counts_the_repairs_it_accepts():
    """``fuzz`` itself: the repairable program through the real checker."""
    report = fuzz_module.fuzz(DECLARING, DECLARING, examples=1, strategy=just(REPAIRABLE))
    assert (report.programs, report.failures, report.repaired) == (1, 0, 1)


def test_a_repairing_pipeline_must_still_be_idempotent():
    pipeline = PassPipeline(pass_names=[DECLARING, APPEND_RELU], pipeline_name="custom")
    with pytest.raises(AssertionError, match="is not idempotent: a second run changed"):
        check_drawn(REPAIRABLE, pipeline, set())

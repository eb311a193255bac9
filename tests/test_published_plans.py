"""lint's placement held against published Core ML compute plans (the truth table), and the forms
those plans taught it: cost decisions, glue joining its island, model-level rejections, confidence."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.lint import lint_report
from mil_passes.testing.models import published
from mil_passes.testing.models.published import CASES, compare, truth_table

#: Cases where lint and the published plan differ, each with its reason in the case's note.
DISAGREEING = {"RNN-T joint, English (4 MB)"}
PAGE = Path(__file__).resolve().parent.parent / "docs" / "neural-engine.md"


@pytest.fixture(scope="module")
def results():
    return [compare(case) for case in CASES]


def test_each_case_agrees_with_its_published_plan_or_says_why_not(results):
    for result in results:
        if result.case.case in DISAGREEING:
            assert not result.agrees and result.case.note, result.case.case
        else:
            assert result.agrees, (result.case.case, result.agreeing, result.compared)


def test_the_table_has_ten_cases_from_five_sources_and_the_agreement_the_issue_asks(results):
    owners = {case.url.split("github.com/")[1].split("/")[0] for case in CASES}
    assert len(results) >= 10 and len(owners) >= 5, owners
    assert sum(r.agrees for r in results) >= 0.9 * len(results)
    per_op = [r for r in results if not r.case.by_type_count]
    assert sum(r.agreeing for r in per_op) >= 0.95 * sum(r.compared for r in per_op)


def test_the_docs_show_the_truth_table_as_lint_predicts_it(results):
    assert truth_table(results) in PAGE.read_text()


def test_the_encoder_plans_every_published_op_type_and_count_on_the_neural_engine(results):
    (encoder,) = [r for r in results if r.case.case == "ANE-idiom encoder, 6 x 384"]
    by_type = Counter(place.op_type for place in encoder.placement.places if place.side == "ane")
    runtime_plan = {"add": 25, "conv": 36, "gelu": 6, "mul": 31, "reduce_mean": 26, "reduce_sum": 12}
    runtime_plan |= {"reshape": 24, "rsqrt": 13, "softmax": 6, "square": 13, "sub": 13, "transpose": 12}
    assert by_type == runtime_plan and len(encoder.placement.segments) == 1
    assert encoder.placement.confidence == {"coreml": 217}


def test_a_cost_decision_counts_where_it_runs_and_says_so(results):
    (small,) = [r for r in results if r.case.case == "fp16 matmul 384 x 384"]
    placement = small.placement
    assert placement.off_ane == placement.by_cost == 4 and placement.segments[0].cost
    assert "[4 by cost]" in placement.summary() and placement.as_dict()["by_cost"] == 4


def test_glue_joins_the_island_it_feeds_or_that_feeds_it(results):
    (joint,) = [r for r in results if r.case.case == "RNN-T decoder_joint (Nemotron)"]
    placement = joint.placement
    glue = {place.op_type for place in placement.places if place.why == "glue"}
    assert glue == {"cast", "split", "squeeze", "stack"}
    assert [segment.side for segment in placement.segments] == ["off", "ane"] and placement.copies == 1
    (detector,) = [r for r in results if r.case.case.startswith("DETR")]
    assert [segment.side for segment in detector.placement.segments] == ["ane", "off", "ane"]


def test_a_state_written_at_run_time_positions_rejects_the_whole_model():
    findings, placement = lint_report(published.stateful_decoder(layers=1))
    rejections = [f for f in findings if f.rule == "ane-dynamic-state-update"]
    assert rejections and {f.severity for f in rejections} == {"error"}
    assert placement.off_ane == placement.ops and placement.rejected_by == ["ane-dynamic-state-update"]
    assert "rejects the model" in placement.summary() and placement.as_dict()["leaves_neural_engine"] is True
    assert len(placement.segments) == 1 and placement.confidence == {"coreml": placement.ops}


def test_a_case_holds_the_placement_of_another_model_and_names_the_ops_that_differ():
    (decode,) = [case for case in CASES if case.case.startswith("stateful decode")]
    smaller = compare(decode, lint_report(published.stateful_decoder(layers=1))[1])
    assert smaller.agrees and smaller.compared == smaller.placement.ops and smaller.differing == ()
    (detr,) = [case for case in CASES if case.case.startswith("DETR")]
    held = compare(detr, smaller.placement)  # the rejected decoder's linears and adds, on the ANE in DETR's plan
    assert not held.agrees and held.agreeing == held.compared - len(held.differing)
    assert {(place.op_type, place.why) for place in held.differing} == {("add", "model"), ("linear", "model")}


def test_a_state_not_a_multiple_of_32_wide_takes_the_model_off_its_reads_writes_and_updates_too():
    specs = [mb.StateTensorSpec((1, 4, 270), dtype=types.fp16), mb.TensorSpec((1, 4, 64), dtype=types.fp16)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(cache, x):
        updated = mb.slice_update(x=mb.read_state(input=cache), update=x, begin=[0, 0, 0], end=[1, 4, 64])
        mb.coreml_update_state(state=cache, value=updated)
        return mb.matmul(x=updated, y=np.ones((270, 2048), np.float16))

    findings, placement = lint_report(prog)
    assert [f.op for f in findings if f.rule == "ane-state-width"] == ["cache"]
    units = {place.op_type: (place.side, tuple(place.rules)) for place in placement.places}
    assert set(units) == {"read_state", "slice_update", "coreml_update_state", "matmul"}
    assert set(units.values()) == {("off", ("ane-state-width",))} and placement.rejected_by == ["ane-state-width"]


def test_every_prediction_says_what_it_rests_on(results):
    for result in results:
        document = result.placement.as_dict()
        assert sum(document["confidence"].values()) == result.placement.ops
        assert all(
            run["confidence"] in ("coreml", "apple", "coreai", "private-path", "unsourced") for run in document["runs"]
        )
        assert "; confidence: " in result.placement.summary()


def test_the_placement_cost_benchmark_builds_its_program_and_times_both_halves():
    from benchmarks import placement_cost

    prog = placement_cost.program(1200)  # 146 blocks, 5 topk islands; weights over 1 MiB: no whole-graph cost
    _, placement = lint_report(prog)
    assert placement.ops >= 1200 and placement.by_cost == 0 and placement.off_rules["ane-topk-sort"] == 5
    dry, placed = placement_cost.split_time(prog, repeats=1)
    assert dry > 0 and placed > 0

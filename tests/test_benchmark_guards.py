"""benchmarks/guards.py: the unguarded pipeline it compares against, and one measured row."""

import importlib.util

import pytest

from benchmarks.guards import HEADER, GuardCost, guard_cost, unguarded
from mil_passes.schedule import GUARD_NAMES, INT16_NARROWING, REPLACEMENTS

import mil_passes


def test_unguarded_is_the_pipeline_without_its_guards():
    guarded, plain = mil_passes.pipeline(), unguarded()
    original = {new: old for old, new in REPLACEMENTS}
    assert list(plain.passes) == [original.get(name, name) for name in guarded.passes if name not in GUARD_NAMES]
    assert len(plain.passes) < len(guarded.passes)
    assert plain.get_options(INT16_NARROWING) is None


def test_a_row_has_the_header_columns():
    row = GuardCost("m", True, (10, 12), (1e-3, 2e-3), (1.0, 1.5)).row()
    assert row.count("|") == HEADER.splitlines()[0].count("|")
    assert "fp16" in row and "10 → 12" in row and "1.50x" in row


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the models extra")
def test_guard_cost_measures_a_real_model():
    cost = guard_cost("attention_head_split", fp16=True, repeats=1)
    assert cost.ops[0] > 0 and cost.ops[1] > 0 and min(cost.seconds) > 0
    assert cost.error[1] <= cost.error[0]  # the guards never make the model worse here

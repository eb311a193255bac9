"""Properties every pattern pass keeps on random programs with its pattern planted: exact (``check_pass``:
the interface, bit-identical outputs, a second run changes nothing) and complete (nothing it would
rewrite is left after it)."""

from __future__ import annotations

import pytest
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from hypothesis import assume, given
from hypothesis import strategies as st

from mil_passes.testing import check_pass
from mil_passes.testing.strategies import OPSETS, programs
from pass_helpers import evaluates

PLANTED = (
    "webnn::band_part_difference_to_select",
    "webnn::data_movement_rank5_to_rank4",
    "webnn::gather_to_one_hot_matmul",
    "webnn::gather_to_slice",
    "webnn::matmul_rank5_to_rank4",
    "webnn::scatter_rank5_to_rank4",
    "webnn::share_runtime_shapes",
    "webnn::topk_to_argmax",
)


@pytest.mark.parametrize("pass_name", PLANTED)
@given(data=st.data())
def test_random_programs_with_the_plant_stay_exact(pass_name, data):
    drawn = data.draw(st.sampled_from(OPSETS).flatmap(lambda opset: programs(opset, plant=[pass_name])))
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, pass_name, inputs=inputs)
    matches, _ = PASS_REGISTRY[pass_name].find_matches(after)
    assert matches == []

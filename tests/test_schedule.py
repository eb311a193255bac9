"""The schedule: ``mil_passes.pipeline()`` lists exactly the pinned passes (tests/fixtures/pipeline_passes.json,
first written from the hand-kept table the declarations replaced; a pass's new slot is added to it by hand)."""

import json
from pathlib import Path

import coremltools as ct
import pytest

import mil_passes

PINNED = json.loads((Path(__file__).parent / "fixtures" / "pipeline_passes.json").read_text())


@pytest.mark.parametrize("base", sorted(PINNED))
def test_pipeline_lists_the_pinned_passes(base):
    assert list(mil_passes.pipeline(getattr(ct.PassPipeline, base.upper())).passes) == PINNED[base]

"""The schedule: ``mil_passes.pipeline()`` lists exactly the passes it listed before the passes declared
their own slots (tests/fixtures/pipeline_passes.json, written from the hand-kept table they replaced)."""

import json
from pathlib import Path

import coremltools as ct
import pytest

import mil_passes

PINNED = json.loads((Path(__file__).parent / "fixtures" / "pipeline_passes.json").read_text())


@pytest.mark.parametrize("base", sorted(PINNED))
def test_pipeline_lists_the_pinned_passes(base):
    assert list(mil_passes.pipeline(getattr(ct.PassPipeline, base.upper())).passes) == PINNED[base]

"""pipeline() against DEFAULT on the extra real models of docs/neural-engine.md's table (fp16,
iOS17): the five models DEFAULT turns to NaN agree with torch, pipeline() never predicts more ops
off the Neural Engine or more segments, and the placement targets of issue 42 hold."""

import functools
import importlib.util

import numpy as np
import pytest

MISSING = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
if MISSING:
    pytest.skip(
        f"needs the models extra (pip install -e '.[models]'): no {', '.join(MISSING)}", allow_module_level=True
    )

from mil_passes.lint import lint_report  # noqa: E402
from mil_passes.testing.models.placement_models import BY_NAME  # noqa: E402
from mil_passes.testing.models.real import TOLERANCE, convert, max_error, pass_pipeline, prepare  # noqa: E402

# (1 - mask) * finfo(float32).min is (1 - mask) * -inf at fp16; Qwen2 and Phi-3 multiply a fill(-inf)
# causal mask by 0 with a run-time sequence.
NAN_UNDER_DEFAULT = ("electra", "mobilebert", "t5_encoder", "qwen2_flexible", "phi3_flexible")
# At most this many ops off the Neural Engine under pipeline() (issue 42: a fixed-length prefill keeps
# at most its embedding gather, an int32-mask encoder and the topk detector head at most 3).
TARGETS = {"llama_prefill": 1, "electra": 3, "detector_head": 3}


@functools.lru_cache(maxsize=None)
def prepared(name):
    return prepare(BY_NAME[name])


@functools.lru_cache(maxsize=None)
def measured(name: str, pipeline: str) -> tuple[int, int, float]:
    """Ops off the Neural Engine but for the whole-graph cost decision, segments, and the largest error
    against torch, at fp16."""
    ready = prepared(name)
    mlmodel = convert(ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=pass_pipeline(pipeline))
    _, placement = lint_report(mlmodel._mil_program)
    # What the rules take off: these small configs fall under ane-small-graph (weights under 1 MiB), the
    # planner's whole-graph cost decision, which puts every op on the CPU under either pipeline.
    return placement.off_by_rules, len(placement.segments), max_error(mlmodel, ready.trials[:1])  # the example shape


@pytest.mark.parametrize("name", NAN_UNDER_DEFAULT)
def test_the_nan_models_agree_with_torch_under_the_pipeline(name):
    assert np.isnan(measured(name, "DEFAULT")[2])
    assert measured(name, "pipeline")[2] <= TOLERANCE[True]


@pytest.mark.parametrize("name", [*NAN_UNDER_DEFAULT, *TARGETS])
def test_the_pipeline_is_never_worse_than_default(name):
    (off_default, segments_default, _), (off, segments, _) = measured(name, "DEFAULT"), measured(name, "pipeline")
    assert off <= off_default and segments <= segments_default


@pytest.mark.parametrize("name, most", sorted(TARGETS.items()))
def test_placement_targets(name, most):
    assert measured(name, "pipeline")[0] <= most

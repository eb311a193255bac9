"""Real architectures (tiny configs, random weights) through coremltools and the package.

Each model is converted under DEFAULT and ``mil_passes.pipeline()``, at FLOAT32 and FLOAT16
(iOS17), predicted by the reference interpreter and compared with torch; its fp32 lint findings
are checked, and it goes through the command (save, ``optimize``, ``lint``, predict the result).
"""

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest

MISSING = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
if MISSING:
    pytest.skip(
        f"needs the models extra (pip install -e '.[models]'): no {', '.join(MISSING)}", allow_module_level=True
    )
from mil_passes.testing.models.real import torchvision_available  # noqa: E402

if not torchvision_available():
    pytest.skip("needs torchvision (make test installs it in .venv/torchvision-models)", allow_module_level=True)

from mil_passes.lint import lint, lint_report  # noqa: E402
from pass_helpers import without_placement  # noqa: E402
from mil_passes.testing.models.real import convert as convert_or_raise  # noqa: E402
from mil_passes.testing.models.real import (  # noqa: E402
    BY_NAME,
    MODELS,
    PIPELINES,
    TOLERANCE,
    FrontendLimitation,
    max_error,
    pass_pipeline,
    prepare,
    round_trip,
)

NAMES = [model.name for model in MODELS]
REFUSED_WINDOW = "ane-refused-slice-of-concat"


def convert(*args, **kwargs):
    """The conversion; a test the installed coremltools cannot convert for skips with its one-line reason."""
    try:
        return convert_or_raise(*args, **kwargs)
    except FrontendLimitation as limitation:
        pytest.skip(str(limitation))


@functools.lru_cache(maxsize=None)
def prepared(name: str):
    return prepare(BY_NAME[name])


@functools.lru_cache(maxsize=None)
def fp32_conversion(name: str, pipeline: str):
    """The FLOAT32 conversion, kept for the lint and command tests (fp16 ones are not kept)."""
    ready = prepared(name)
    return convert(ready.model, ready.traced, ready.inputs, pass_pipeline=pass_pipeline(pipeline))


@functools.lru_cache(maxsize=None)
def fp16_conversion(name: str, pipeline: str):
    """The FLOAT16 conversion, kept for the placement test."""
    ready = prepared(name)
    return convert(ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=pass_pipeline(pipeline))


# transformers builds GPT-2's causal mask from torch.finfo(float32).min and triu; coremltools converts
# the triu as x - band_part(x), which at fp16 is -inf - -inf = NaN. The fixed-length model's mask is
# folded to a constant before the fp16 casts; with a run-time sequence it is computed. DEFAULT keeps
# the NaN; the pipeline's webnn::band_part_difference_to_select makes the triu a select.
FP16_MASK_NAN = pytest.mark.xfail(
    strict=True, reason="coremltools' fp16 triu of a finfo(fp32).min mask is NaN (-inf - -inf)"
)
NAN_UNDER_DEFAULT = ("gpt2_flexible", "DEFAULT", "fp16")
CONVERSIONS = [
    pytest.param(
        name, pipeline, precision, marks=FP16_MASK_NAN if (name, pipeline, precision) == NAN_UNDER_DEFAULT else ()
    )
    for name in NAMES
    for pipeline in PIPELINES
    for precision in ("fp32", "fp16")
]


@pytest.mark.parametrize("name, pipeline, precision", CONVERSIONS)
def test_converts_and_agrees_with_torch(name, pipeline, precision):
    ready = prepared(name)
    fp16 = precision == "fp16"
    if fp16:
        mlmodel = fp16_conversion(name, pipeline)
    else:
        mlmodel = fp32_conversion(name, pipeline)
    assert max_error(mlmodel, ready.trials) <= TOLERANCE[fp16]


@pytest.mark.parametrize("name", NAMES)
def test_the_pipeline_never_predicts_more_off_the_neural_engine_than_default(name):
    """At fp16 (what runs on the Neural Engine): ops off it and segments, by lint's prediction."""
    placements = [lint_report(fp16_conversion(name, p)._mil_program)[1] for p in PIPELINES]
    # What the rules take off: the tiny configs fall under ane-small-graph, the planner's whole-graph cost
    # decision, which puts every op on the CPU under either pipeline.
    (before, after) = [(p.off_by_rules, p.rule_segments) for p in placements]
    assert after[0] <= before[0] and after[1] <= before[1], (before, after)


# BERT's attention mask is `select(cast(mask, bool), …)` under DEFAULT: valid MIL, so at most info.
LINT_CASES = [(name, pipeline) for name in NAMES for pipeline in PIPELINES]


@pytest.mark.parametrize("name, pipeline", LINT_CASES)
def test_lint_on_fp32_models_finds_only_the_streaming_windows(name, pipeline):
    findings = without_placement(lint(fp32_conversion(name, pipeline)._mil_program))  # the ANE's: fp32, …
    loud = [f for f in findings if f.severity in ("warning", "error")]
    expected = BY_NAME[name].streaming_windows if pipeline == "DEFAULT" else 0
    assert [f.rule for f in loud] == [REFUSED_WINDOW] * expected, [str(f) for f in loud]
    assert all(f.severity == "error" for f in loud)


def test_streaming_windows_stay_errors_until_the_pipeline_rewrites_them():
    for name in ("streaming_k40", "streaming_k72"):
        before = [f for f in lint(fp32_conversion(name, "DEFAULT")._mil_program) if f.rule == REFUSED_WINDOW]
        after = [f for f in lint(fp32_conversion(name, "pipeline")._mil_program) if f.rule == REFUSED_WINDOW]
        assert [f.severity for f in before] == ["error"] * BY_NAME[name].streaming_windows
        assert after == []


@pytest.mark.parametrize("name", NAMES)
def test_command_round_trip(name, tmp_path):
    trip = round_trip(fp32_conversion(name, "DEFAULT"), str(tmp_path), prepared(name).trials)
    assert without_placement([{"rule": rule} for rule in trip.errors_left]) == []  # fp32 stays off the ANE
    assert trip.optimize_status == trip.lint_status == (1 if trip.errors_left else 0)
    assert trip.error <= TOLERANCE[False]


def test_gpt2_with_a_flexible_sequence_keeps_11_of_17_shape_ops():
    """Folded: every reshape whose run-time dims x has (torch's scalar dims joined by concat).
    Kept: targets x holds only as a product (Conv1D's flatten-matmul-unflatten), slice ends and
    range/fill/tile sizes that are the run-time sequence length; of those, two that read vars of the
    same run-time dims become one (share_runtime_shapes)."""
    from mil_passes.ir import op_counts

    counts = [op_counts(fp32_conversion("gpt2_flexible", p)._mil_program).get("shape", 0) for p in PIPELINES]
    assert counts == [17, 11]


def test_trial_inputs_add_the_smallest_and_a_larger_size_on_flexible_axes():
    from mil_passes.testing.models.real import trial_inputs

    model = BY_NAME["gpt2_flexible"]
    trials = trial_inputs(model, {"input_ids": np.arange(9, dtype=np.int32).reshape(1, 9)})
    assert [t["input_ids"].shape for t in trials] == [(1, 9), (1, 1), (1, 20)]
    assert all(t["input_ids"].dtype == np.int32 for t in trials)
    assert len(trial_inputs(BY_NAME["gpt2"], {"input_ids": np.zeros((1, 9), np.int32)})) == 1


def test_relative_error_is_scaled_by_the_largest_reference_value():
    from mil_passes.testing.models.real import relative_error

    assert relative_error(np.array([1.0, 2.5]), np.array([1.0, 2.0])) == pytest.approx(0.25)
    assert relative_error(np.zeros(0), np.zeros(0)) == 0.0


def test_docs_table_lists_every_model_converted():
    page = (Path(__file__).resolve().parent.parent / "docs" / "real-models.md").read_text()
    table = page.split("<!-- real-models:begin -->")[1].split("<!-- real-models:end -->")[0]
    rows = [line.split("|")[1:-1] for line in table.strip().splitlines()[2:]]
    assert [cells[0].strip() for cells in rows] == NAMES
    assert all(cells[1].strip() == "yes" for cells in rows)


def test_optimize_fixes_the_nan_of_a_gpt2_package_already_converted_at_fp16(tmp_path):
    """A package converted at fp16 under DEFAULT holds the -inf mask; optimize rewrites its triu."""
    ready = prepared("gpt2_flexible")
    nan_model = convert(ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=pass_pipeline("DEFAULT"))
    assert np.isnan(max_error(nan_model, ready.trials))
    warned = [f.rule for f in without_placement(lint(nan_model._mil_program)) if f.severity == "warning"]
    assert warned == ["fp16-band-part-difference"]
    trip = round_trip(nan_model, str(tmp_path), ready.trials)
    assert without_placement([{"rule": rule} for rule in trip.errors_left]) == []
    assert trip.error <= TOLERANCE[True]

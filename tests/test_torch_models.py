"""Whole models: torch modules converted by coremltools, evaluated by the interpreter, vs torch."""

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is the oracle of these tests")

import coremltools as ct  # noqa: E402

from mil_passes.reference import evaluate  # noqa: E402
from mil_passes.testing.models.torch_modules import CASES, convert, torch_outputs  # noqa: E402

PIPELINES = {"DEFAULT": lambda: ct.PassPipeline.DEFAULT, "EMPTY": lambda: ct.PassPipeline.EMPTY}


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale if want.size else 0.0


def evaluate_model(mlmodel, examples):
    prog = mlmodel._mil_program
    feeds = {f"input_{i}": x for i, x in enumerate(examples)}
    outputs = evaluate(prog, feeds)
    names = [out.name for out in mlmodel.get_spec().description.output]
    return [outputs[name] for name in names]


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_interpreter_matches_torch_on_converted_model(case, pipeline):
    rng = np.random.default_rng(0)
    module = case.instantiate()
    examples = case.example_inputs(rng)
    mlmodel = convert(case, module, examples, pass_pipeline=PIPELINES[pipeline]())
    trials = [examples]
    if case.flexible:
        # Run-time sizes other than the traced one, including the smallest allowed.
        for size in (2, 17):
            trials.append([np.resize(x, x.shape[:2] + (size,)).astype(x.dtype) for x in examples])
    for feeds in trials:
        got = evaluate_model(mlmodel, feeds)
        want = torch_outputs(module, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            if np.issubdtype(w.dtype, np.integer) or w.dtype == np.bool_:
                np.testing.assert_array_equal(g, w)
            else:
                assert relative_error(g, w) <= 1e-5, f"relative error {relative_error(g, w):.2e}"

"""The attention head split converts: coremltools 9.0's torch frontend needs numpy<2.4 (pinned).

``B, T, D = x.shape; x.reshape(B, T, H, D // H)`` traces to ``int(size)`` of a size-1 array in the
frontend's ``_cast``, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted to
Python scalars"); with the pin it converts and agrees with torch.
"""

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is the model and the oracle")

import coremltools as ct  # noqa: E402

import mil_passes  # noqa: E402
from mil_passes.reference import predict  # noqa: E402
from mil_passes.testing.models.real import BY_NAME, convert, relative_error, torch_outputs, trace  # noqa: E402


def test_numpy_is_below_2_4():
    major, minor = (int(part) for part in np.__version__.split(".")[:2])
    assert (major, minor) < (2, 4), np.__version__


@pytest.mark.parametrize("pipeline", ["DEFAULT", "mil_passes"])
def test_attention_head_split_converts_and_agrees_with_torch(pipeline):
    model = BY_NAME["attention_head_split"]
    module = model.instantiate()
    inputs = model.example_inputs(np.random.default_rng(0))
    passes = ct.PassPipeline.DEFAULT if pipeline == "DEFAULT" else mil_passes.pipeline()
    mlmodel = convert(model, trace(module, inputs), inputs, pass_pipeline=passes)
    got = predict(mlmodel, inputs)
    (want,) = torch_outputs(module, inputs)
    (name,) = got
    assert got[name].shape == want.shape
    assert relative_error(got[name], want) <= 1e-5

"""One small model of each kind users ship, built with coremltools' public APIs and saved to a folder.

- :func:`multifunction`: two iOS18 functions (``prefill`` over 4 rows, ``decode`` over 1) that share
  one weight, default function ``decode``, no function named ``main``
  (``ct.utils.MultiFunctionDescriptor`` + ``ct.utils.save_multifunction``).
- :func:`stateful_multifunction`: ``prefill`` and ``decode`` over one fp16 state ``kv``.
- :func:`classifier`: a linear layer and a softmax with ``ct.ClassifierConfig`` (``classify`` added
  by coremltools), fp16.
- :func:`image_input`: an RGB ``ct.ImageType`` input with scale and bias (fp32 preprocessing added by
  coremltools), fp16.
- :func:`optional_input`: an input declared with a ``default_value`` (torch, traced).
- :func:`pipeline`, :func:`pipeline_classifier`, :func:`pipeline_regressor`: two ML Program stages
  (``ct.utils.make_pipeline``; its pipeline typed as Model.proto's ``pipelineClassifier`` /
  ``pipelineRegressor``, the types ``ct.models.pipeline.PipelineClassifier`` / ``PipelineRegressor`` write).
- :func:`neural_network_pipeline`: a neural-network stage followed by an ML Program stage.

Every builder writes ``<folder>/<name>.mlpackage`` and returns its path; each takes well under a
second but :func:`optional_input` (torch's tracing).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

FEATURES = 8
LABELS = ("cat", "dog", "bird")
SHARED_WEIGHT = np.random.default_rng(0).standard_normal((FEATURES, FEATURES)).astype(np.float32)


def _ct():
    import coremltools as ct

    return ct


def _convert(prog, target=None, *, fp16: bool = False, **options):
    """``prog`` as an ML Program: as written (``PassPipeline.EMPTY``), or with DEFAULT at fp16
    (``fp16``: an fp16 model, fp32 only at its edges and in what coremltools adds)."""
    ct = _ct()
    return ct.convert(
        prog,
        convert_to="mlprogram",
        minimum_deployment_target=target or ct.target.iOS17,
        pass_pipeline=ct.PassPipeline.DEFAULT if fp16 else ct.PassPipeline.EMPTY,
        compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        skip_model_load=True,
        **options,
    )


def _linear_relu(rows: int, target, weight: np.ndarray = SHARED_WEIGHT):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec((rows, weight.shape[1]))], opset_version=target)
    def prog(x):
        return mb.relu(x=mb.linear(x=x, weight=weight), name="y")

    return prog


def _save(model, folder: str | Path, name: str) -> Path:
    path = Path(folder) / f"{name}.mlpackage"
    if path.exists():
        shutil.rmtree(path)
    model.save(str(path))
    return path


def _combine(folder: str | Path, name: str, functions: dict[str, Callable[[], object]], default: str) -> Path:
    """Save each function's model alone, then join them with ``save_multifunction``."""
    ct = _ct()
    path = Path(folder) / f"{name}.mlpackage"
    if path.exists():
        shutil.rmtree(path)
    with tempfile.TemporaryDirectory() as scratch:
        descriptor = ct.utils.MultiFunctionDescriptor()
        for function_name, build in functions.items():
            single = _save(build(), scratch, function_name)
            descriptor.add_function(str(single), "main", function_name)
        descriptor.default_function_name = default
        ct.utils.save_multifunction(descriptor, str(path))
    return path


def multifunction(folder: str | Path) -> Path:
    """``prefill`` (x ``[4, 8]``) and ``decode`` (x ``[1, 8]``) computing ``relu(linear(x, W))``
    with one shared ``W``; default ``decode``."""
    ios18 = _ct().target.iOS18
    return _combine(
        folder,
        "multifunction",
        {
            "prefill": lambda: _convert(_linear_relu(4, ios18), ios18),
            "decode": lambda: _convert(_linear_relu(1, ios18), ios18),
        },
        default="decode",
    )


def _state_step(prefill: bool):
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    ct = _ct()
    specs = [mb.StateTensorSpec((1, FEATURES), dtype=types.fp16), mb.TensorSpec((1, FEATURES), dtype=types.fp16)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(kv, x):
        before = mb.read_state(input=kv)
        new = x if prefill else mb.add(x=before, y=x)
        mb.coreml_update_state(state=kv, value=new)
        return mb.mul(x=new, y=np.float16(2.0), name="y")

    return _convert(prog, ct.target.iOS18)


def stateful_multifunction(folder: str | Path) -> Path:
    """``prefill`` writes ``x`` into the state ``kv``; ``decode`` adds ``x`` to it; both return
    twice the new state. Default ``prefill``."""
    return _combine(
        folder,
        "stateful_multifunction",
        {"prefill": lambda: _state_step(True), "decode": lambda: _state_step(False)},
        default="prefill",
    )


def _classifier_model(target=None):
    from coremltools.converters.mil import Builder as mb

    ct = _ct()
    weight = np.random.default_rng(1).standard_normal((len(LABELS), FEATURES)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((1, FEATURES))], opset_version=target or ct.target.iOS17)
    def prog(x):
        return mb.softmax(x=mb.linear(x=x, weight=weight), axis=-1, name="probs")

    return _convert(prog, target, fp16=True, classifier_config=ct.ClassifierConfig(list(LABELS)))


def classifier(folder: str | Path) -> Path:
    """Three labels (:data:`LABELS`) from ``softmax(linear(x))``; outputs ``classLabel`` and ``probs``."""
    return _save(_classifier_model(), folder, "classifier")


def image_input(folder: str | Path) -> Path:
    """An RGB 8x8 image, scaled by 1/255 and shifted by -0.5 per channel, then a 1x1 conv."""
    from coremltools.converters.mil import Builder as mb

    ct = _ct()
    weight = np.random.default_rng(2).standard_normal((2, 3, 1, 1)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((1, 3, 8, 8))], opset_version=ct.target.iOS17)
    def prog(image):
        return mb.conv(x=image, weight=weight, name="y")

    image = ct.ImageType(name="image", shape=(1, 3, 8, 8), scale=1 / 255, bias=[-0.5] * 3)
    model = _convert(prog, fp16=True, inputs=[image])
    return _save(model, folder, "image_input")


def optional_input(folder: str | Path) -> Path:
    """``y = x * scale`` where ``scale`` (``[1, 4]``) is optional with default 0.5 everywhere."""
    import torch

    ct = _ct()

    class Scale(torch.nn.Module):
        def forward(self, x, scale):
            return x * scale

    example = (torch.ones(1, 4), torch.ones(1, 4))
    traced = torch.jit.trace(Scale().eval(), example)
    model = ct.convert(
        traced,
        convert_to="mlprogram",
        inputs=[
            ct.TensorType(name="x", shape=(1, 4)),
            ct.TensorType(name="scale", shape=(1, 4), default_value=np.full((1, 4), 0.5, np.float32)),
        ],
        outputs=[ct.TensorType(name="y")],
        minimum_deployment_target=ct.target.iOS17,
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    return _save(model, folder, "optional_input")


def _stage(name_in: str, name_out: str, seed: int):
    """An ML Program ``name_out = relu(linear(name_in))`` (``name_in``: ``x`` or ``hidden``)."""
    from coremltools.converters.mil import Builder as mb

    ct = _ct()
    weight = np.random.default_rng(seed).standard_normal((FEATURES, FEATURES)).astype(np.float32)
    spec = [mb.TensorSpec((1, FEATURES))]

    def body(value):
        return mb.relu(x=mb.linear(x=value, weight=weight), name=name_out)

    if name_in == "x":

        @mb.program(input_specs=spec, opset_version=ct.target.iOS17)
        def prog(x):
            return body(x)

    else:

        @mb.program(input_specs=spec, opset_version=ct.target.iOS17)
        def prog(hidden):
            return body(hidden)

    return _convert(prog)


def pipeline(folder: str | Path) -> Path:
    """Two ML Program stages: ``x -> hidden`` then ``hidden -> y`` (``ct.utils.make_pipeline``)."""
    ct = _ct()
    model = ct.utils.make_pipeline(_stage("x", "hidden", 3), _stage("hidden", "y", 4))
    return _save(model, folder, "pipeline")


def _pipeline_of(kind: str, stages, folder: str | Path, name: str) -> Path:
    """Stages joined by ``make_pipeline`` (which lays out their weights), its pipeline typed as
    ``kind`` (``pipelineClassifier`` or ``pipelineRegressor``, as coremltools' ``PipelineClassifier``
    and ``PipelineRegressor`` write them; those builders take no ML Program weights)."""
    ct = _ct()
    joined = ct.utils.make_pipeline(*stages)  # writes each stage's weights as weights/<i>-weight.bin
    spec = joined.get_spec()
    built = ct.proto.Model_pb2.Model()
    built.specificationVersion = spec.specificationVersion
    built.description.CopyFrom(spec.description)
    getattr(built, kind).pipeline.CopyFrom(spec.pipeline)
    if kind == "pipelineClassifier":
        built.description.predictedFeatureName = "classLabel"
        built.description.predictedProbabilitiesName = "probs"
    model = ct.models.MLModel(built, weights_dir=joined.weights_dir, skip_model_load=True)
    return _save(model, folder, name)


def pipeline_classifier(folder: str | Path) -> Path:
    """An ML Program stage (``x -> hidden``) then a classifier stage (:data:`LABELS`)."""
    from coremltools.converters.mil import Builder as mb

    ct = _ct()
    weight = np.random.default_rng(5).standard_normal((len(LABELS), FEATURES)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec((1, FEATURES))], opset_version=ct.target.iOS17)
    def head(hidden):
        return mb.softmax(x=mb.linear(x=hidden, weight=weight), axis=-1, name="probs")

    classify = _convert(
        head,
        inputs=[ct.TensorType(name="hidden", shape=(1, FEATURES))],
        classifier_config=ct.ClassifierConfig(list(LABELS)),
    )
    return _pipeline_of("pipelineClassifier", [_stage("x", "hidden", 3), classify], folder, "pipeline_classifier")


def pipeline_regressor(folder: str | Path) -> Path:
    """Two ML Program stages whose last output ``y`` is the regression's."""
    return _pipeline_of(
        "pipelineRegressor", [_stage("x", "hidden", 3), _stage("hidden", "y", 4)], folder, "pipeline_regressor"
    )


def neural_network_pipeline(folder: str | Path) -> Path:
    """A neural-network stage (``NeuralNetworkBuilder``: ``x -> hidden``, an inner product) then an
    ML Program stage (``hidden -> y``)."""
    ct = _ct()
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    weight = np.random.default_rng(6).standard_normal((FEATURES, FEATURES)).astype(np.float32)
    builder = NeuralNetworkBuilder(
        [("x", datatypes.Array(1, FEATURES))],
        [("hidden", datatypes.Array(1, FEATURES))],
        disable_rank5_shape_mapping=True,
    )
    builder.add_inner_product(
        "fc", weight, None, FEATURES, FEATURES, has_bias=False, input_name="x", output_name="hidden"
    )
    network = ct.models.MLModel(builder.spec, skip_model_load=True)
    model = ct.utils.make_pipeline(network, _stage("hidden", "y", 4))
    return _save(model, folder, "neural_network_pipeline")


#: Every builder, by the fixture's name.
BUILDERS: dict[str, Callable[[str | Path], Path]] = {
    "multifunction": multifunction,
    "stateful_multifunction": stateful_multifunction,
    "classifier": classifier,
    "image_input": image_input,
    "optional_input": optional_input,
    "pipeline": pipeline,
    "pipeline_classifier": pipeline_classifier,
    "pipeline_regressor": pipeline_regressor,
    "neural_network_pipeline": neural_network_pipeline,
}

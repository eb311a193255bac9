"""The oracle's real-model set at full size: torchvision classifiers at 224x224, GPT-2 124M and
BERT-base at sequence 128, random weights (nothing is downloaded), converted once and cached.

Each model is converted by coremltools with ``PassPipeline.EMPTY`` and saved as a package (what
``mil-passes verify --pipeline default`` and ``mil-passes optimize`` read); the programs the
interpreter runs are that program after coremltools' DEFAULT pipeline, without the fp16 casts
(what ``ct.convert`` makes at FLOAT32) and with them (at FLOAT16).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from mil_passes.testing.models import real as real_models

SEQUENCE = 128


@dataclass(frozen=True)
class OracleModel:
    """A full-size module builder and its named example inputs."""

    name: str
    build: Callable[[], Any]
    example_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]

    def instantiate(self):
        import torch

        torch.manual_seed(0)
        return self.build().eval()


def _gpt2():
    transformers = real_models._transformers()
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config())  # 124M: 12 layers, 768 wide
    return real_models.tensors_only(model, ("input_ids",), use_cache=False)


def _bert():
    transformers = real_models._transformers()
    model = transformers.BertModel(transformers.BertConfig(), add_pooling_layer=False)  # BERT-base
    return real_models.tensors_only(model, ("input_ids", "attention_mask"), use_cache=False)


def _image(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"image": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def _tokens(vocabulary: int, with_mask: bool) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    def draw(rng: np.random.Generator) -> dict[str, np.ndarray]:
        inputs = {"input_ids": rng.integers(0, vocabulary, (1, SEQUENCE)).astype(np.int32)}
        if with_mask:
            inputs["attention_mask"] = np.ones((1, SEQUENCE), np.int32)
        return inputs

    return draw


def _classifier(name: str) -> Callable[[], Any]:
    return lambda: real_models._randomize_norms(getattr(real_models.torchvision_models(), name)(weights=None))


MODELS: tuple[OracleModel, ...] = (
    OracleModel("resnet18", _classifier("resnet18"), _image),
    OracleModel("mobilenet_v3_small", _classifier("mobilenet_v3_small"), _image),
    OracleModel("gpt2_124m", _gpt2, _tokens(50257, False)),
    OracleModel("bert_base", _bert, _tokens(30522, True)),
)
BY_NAME = {model.name: model for model in MODELS}


@dataclass
class Prepared:
    """A model's torch module, inputs, EMPTY-pipeline package, and its fp32 and fp16 programs."""

    model: OracleModel
    module: Any
    inputs: dict[str, np.ndarray]
    package: Path
    programs: dict[str, Any]  # "fp32" / "fp16" -> Program


def _converted_package(model: OracleModel, module, inputs: dict[str, np.ndarray], cache: Path) -> Path:
    import coremltools as ct

    package = cache / f"{model.name}.mlpackage"
    if not package.exists():
        traced = real_models.trace(module, inputs)
        mlmodel = real_models.convert(
            real_models.RealModel(model.name, model.build, model.example_inputs),
            traced,
            inputs,
            pass_pipeline=ct.PassPipeline.EMPTY,
        )
        cache.mkdir(parents=True, exist_ok=True)
        mlmodel.save(str(package))
    return package


def default_program(package: Path, fp16: bool):
    """The package's program after coremltools' DEFAULT, as ``ct.convert`` runs it at FLOAT32
    (without the fp16 casts) or FLOAT16."""
    import coremltools as ct
    from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipelineManager

    from mil_passes.package.io import read

    prog = read(package).program
    pipeline = ct.PassPipeline.DEFAULT
    if not fp16:
        pipeline.remove_passes({"common::add_fp16_cast", "common::add_int16_cast"})
    PassPipelineManager.apply_pipeline(prog, pipeline)
    return prog


def prepare(model: OracleModel, cache: Path, precisions: tuple[str, ...] = ("fp32", "fp16")) -> Prepared:
    """Build, trace and convert ``model`` (the package is cached under ``cache``)."""
    module = model.instantiate()
    inputs = model.example_inputs(np.random.default_rng(0))
    package = _converted_package(model, module, inputs, cache)
    programs = {precision: default_program(package, precision == "fp16") for precision in precisions}
    return Prepared(model, module, inputs, package, programs)

"""Pipelines (``pipeline``, ``pipelineClassifier``, ``pipelineRegressor``): models run one after another.

``ct.utils.make_pipeline`` writes each stage's protobuf into the pipeline's and its weights as
``weights/<i>-weight.bin`` in the one weights folder. Each ML Program stage is read as a model of
its own (:class:`Stage`, its :class:`~mil_passes.package.io.Package`), linted, optimized and
verified alone, and written back in its place; a stage of another type (a neural network) has no
MIL program: lint names it with what the user can do, optimize keeps it as it is, verify skips it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Protocol, TypeVar

from coremltools.converters.mil.mil import Program

from ..lint import Finding, by_severity
from ..lint.placement import Placement
from .files import ModelFiles, blob_values, pipeline_stages
from .functions import merged_placement

__all__ = ["Stage", "read_stages", "lint_stages", "write_stages", "STAGE_RULE"]

#: The finding of a stage that is not an ML Program (in lint's catalogue).
STAGE_RULE = "not-ml-program-stage"
WEIGHT_PREFIX = "@model_path/weights/"


class StagePackage(Protocol):
    """What an ML Program stage is read as (:class:`mil_passes.package.io.Package`), as this module
    uses it."""

    spec: Any
    program: Program
    findings: list[Finding]
    op_changes: Counter

    def lint_report(self, chip: str | None = None) -> tuple[list[Finding], Placement]: ...


P = TypeVar("P", bound=StagePackage)


@dataclass
class Stage(Generic[P]):
    """One model of a pipeline: its place (from 0), its protobuf, and, for an ML Program, the
    stage read as a package."""

    index: int
    spec: Any
    package: P | None = None

    @property
    def kind(self) -> str:
        return str(self.spec.WhichOneof("Type"))

    @property
    def label(self) -> str:
        """How findings and rows name the stage: its index (``"1"``)."""
        return str(self.index)


def read_stages(files: ModelFiles, spec, read_program: Callable[[ModelFiles, Any, str], P]) -> list[Stage[P]]:
    """The stages of the pipeline ``spec`` at ``files``, ML Program stages read with
    ``read_program`` (their findings name the stage)."""
    stages = []
    for index, stage_spec in enumerate(pipeline_stages(spec)):
        stage: Stage[P] = Stage(index, stage_spec)
        if stage.kind == "mlProgram":
            stage.package = read_program(files, stage_spec, f"{files.path}: stage {index}")
            stage.package.findings = [f.located(stage=stage.label) for f in stage.package.findings]
        stages.append(stage)
    return stages


def lint_stages(stages: list[Stage[P]], chip: str | None) -> tuple[list[Finding], Placement]:
    """Each ML Program stage's findings (naming the stage) and one placement of them all; a stage
    of another type is one ``not-ml-program-stage`` finding."""
    findings, placements = [], []
    for stage in stages:
        if stage.package is None:
            findings.append(_not_ml_program(stage))
            continue
        found, placement = stage.package.lint_report(chip)
        findings += [f.located(stage=stage.label) for f in found]
        placements.append(placement)
    return by_severity(findings), merged_placement(placements)


def _not_ml_program(stage: Stage[Any]) -> Finding:
    message = (
        f"a {stage.kind} model, not an ML Program: lint, optimize and verify leave it as it is; "
        "reconvert its source with convert_to='mlprogram' to check it"
    )
    cause = f"a {stage.kind} model, not an ML Program"
    return Finding(STAGE_RULE, "warning", f"stage {stage.index}", message, None, "model", cause, stage=stage.label)


def write_stages(spec, stages: list[Stage[P]], weights: Path, export: Callable[[P, str], Any]) -> Any:
    """A copy of the pipeline ``spec`` with each ML Program stage written by ``export(package,
    folder)`` (which writes ``weight.bin`` into ``folder`` and returns the stage's protobuf); the
    stage's weights go to ``weights/<index>-weight.bin`` as ``make_pipeline`` lays them out."""
    written = type(spec)()
    written.CopyFrom(spec)
    models = _models_of(written)
    for stage in stages:
        if stage.package is None:
            continue
        folder = weights / f".stage-{stage.index}"
        folder.mkdir()
        model = export(stage.package, str(folder))
        blob = folder / "weight.bin"
        if blob.exists():
            name = f"{stage.index}-weight.bin"
            blob.rename(weights / name)
            _rename_blobs(model.mlProgram, f"{WEIGHT_PREFIX}weight.bin", f"{WEIGHT_PREFIX}{name}")
        shutil.rmtree(folder)
        models[stage.index].CopyFrom(model)
    return written


def _models_of(spec):
    kind = spec.WhichOneof("Type")
    return (spec.pipeline if kind == "pipeline" else getattr(spec, kind).pipeline).models


def _rename_blobs(program, old: str, new: str) -> None:
    """Point every ``blobFileValue`` of ``program`` (an ML Program protobuf) at ``new`` instead of ``old``."""
    for _, value in blob_values(program):
        if value.blobFileValue.fileName == old:
            value.blobFileValue.fileName = new

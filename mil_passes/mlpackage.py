"""Reading and writing ``.mlpackage`` files."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import coremltools as ct
from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline


def save_program(prog: Program, path: str | Path, *, target=ct.target.iOS17) -> Path:
    """Save ``prog`` as an ML Program package at ``path``, exactly as written (EMPTY pipeline).

    Writes next to ``path`` first and renames at the end: no partial package on failure.
    ``ct.convert`` mutates the program it is given, so pass one you no longer need.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = ct.convert(
        prog,
        convert_to="mlprogram",
        pass_pipeline=PassPipeline.EMPTY,
        minimum_deployment_target=target,
        skip_model_load=True,
    )
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=path.parent))
    try:
        model.save(str(staging / path.name))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging / path.name, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path

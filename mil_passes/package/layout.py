"""An ``.mlpackage`` folder laid out as coremltools lays it out, written from Python.

coremltools writes a package in the system's temporary folder (``tmp*.mlpackage``, left there
when the process is killed) and copies it in C++, whose errors lose the OS's reason ("Input/output
error" for a full disk). Here the weights are written once, by coremltools' weight writer, in
their place inside the package, and the rest (the model protobuf, ``Manifest.json`` in
libmodelpackage's format) by Python, so every error of the write is an ``OSError`` with the
OS's reason::

    NAME.mlpackage/
      Manifest.json                          # two items: the model (the root) and its weights
      Data/com.apple.CoreML/model.mlmodel
      Data/com.apple.CoreML/weights/         # weight.bin when the program has large constants
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable

from .atomic import probe_refusal

AUTHOR = "com.apple.CoreML"
MODEL_FILE = "model.mlmodel"
WEIGHTS_FOLDER = "weights"
MANIFEST = "Manifest.json"


def write_package(path: Path, export: Callable[[str], Any]) -> Any:
    """Make the package folder ``path`` (it must not exist) and return the Model protobuf
    ``export(weights_folder)`` returns after writing the weights into that folder.

    When ``export`` fails and the file system refuses a probe write (full, read-only, over
    quota), that ``OSError`` is raised instead of the writer's own error.
    """
    data = Path(path) / "Data" / AUTHOR
    weights = data / WEIGHTS_FOLDER
    weights.mkdir(parents=True)
    try:
        model = export(str(weights))
    except Exception:
        refusal = probe_refusal(path)
        if refusal is not None:
            raise refusal from None
        raise
    (data / MODEL_FILE).write_bytes(model.SerializeToString())
    (Path(path) / MANIFEST).write_text(manifest_text())
    return model


def manifest_text() -> str:
    """``Manifest.json`` as libmodelpackage writes it (sorted keys, 4-space indent, a newline)."""
    model_id, weights_id = str(uuid.uuid4()), str(uuid.uuid4())
    entries = {
        model_id: {
            "author": AUTHOR,
            "description": "CoreML Model Specification",
            "name": MODEL_FILE,
            "path": f"{AUTHOR}/{MODEL_FILE}",
        },
        weights_id: {
            "author": AUTHOR,
            "description": "CoreML Model Weights",
            "name": WEIGHTS_FOLDER,
            "path": f"{AUTHOR}/{WEIGHTS_FOLDER}",
        },
    }
    manifest = {"fileFormatVersion": "1.0.0", "itemInfoEntries": entries, "rootModelIdentifier": model_id}
    return json.dumps(manifest, indent=4, sort_keys=True) + "\n"

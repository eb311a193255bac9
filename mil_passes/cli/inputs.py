"""The models the command's paths name: packages, ``.mlmodel`` files, and those found below folders.

A path inside a package (``model.mlpackage/Manifest.json``, as pre-commit passes changed files)
stands for its package; each model is counted once, in the order first named. A folder that is
not a package is searched for ``*.mlpackage`` folders (not entered) and ``*.mlmodel`` files
outside packages. Any other path is kept as given, for the reader to say what is wrong with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..package.errors import PackageError

MODEL_SUFFIXES = (".mlpackage", ".mlmodel")


def _is_model(path: Path) -> bool:
    return path.name.lower().endswith(MODEL_SUFFIXES)


def _package_holding(path: Path) -> Path | None:
    """The ``*.mlpackage`` folder ``path`` lies in, if any."""
    return next((parent for parent in path.parents if parent.name.lower().endswith(".mlpackage")), None)


def _below(folder: Path) -> list[Path]:
    """The models below ``folder``, sorted; a package is not entered, hidden folders are skipped."""
    found = []
    for root, folders, files in os.walk(folder):
        here = Path(root)
        found += [here / name for name in folders if name.lower().endswith(".mlpackage")]
        folders[:] = sorted(name for name in folders if not name.startswith(".") and not _is_model(Path(name)))
        found += [here / name for name in files if name.lower().endswith(".mlmodel")]
    return sorted(found)


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """The models ``paths`` name, each once; :class:`PackageError` for a folder holding none."""
    models: dict[str, Path] = {}
    for given in map(Path, paths):
        if (package := _package_holding(given)) is not None:
            found = [package]
        elif _is_model(given):
            found = [given]
        elif given.is_dir():
            found = _below(given)
            if not found:
                raise PackageError(f"{given}: no .mlpackage or .mlmodel below this folder")
        else:
            found = [given]
        for model in found:
            models.setdefault(os.path.normpath(os.path.abspath(model)), model)
    return list(models.values())

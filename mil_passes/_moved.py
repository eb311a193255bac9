"""Old import paths of modules that moved when the package was laid out by layer (0.2.0).

``import mil_passes.mlpackage`` still works: the module is imported under its new name and
registered under the old one too (same module object), with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

MOVED = {
    "mil_passes.mlpackage": "mil_passes.package.io",
    "mil_passes.package_files": "mil_passes.package.files",
    "mil_passes.package_run": "mil_passes.package.optimize",
    "mil_passes.protobuf_check": "mil_passes.package.duplicate_names",
    "mil_passes.declared_types": "mil_passes.package.declared_types",
    "mil_passes.json_output": "mil_passes.cli.json_output",
    "mil_passes.demo": "mil_passes.cli.demo",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.new}", DeprecationWarning, stacklevel=3)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Already executed under its new name."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Alias(new)) if new else None


def install() -> None:
    """Make the old names importable (idempotent)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())

"""The package's graph passes, one module each; importing this package registers them all."""

from __future__ import annotations

import importlib
import pkgutil

from coremltools.converters.mil.mil.passes.pass_registry import register_pass

NAMESPACE = "webnn"


def register(name: str):
    """Register a pass class as ``webnn::<name>`` (idempotent: re-imports override)."""
    return register_pass(namespace=NAMESPACE, override=True, name=name)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

"""Run a callback right after a module is first imported, without importing it."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader that finds ``name`` so ``callback`` runs after it."""

    def __init__(self, name: str, callback: Callable[[], object]) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module, callback = loader.exec_module, self.callback

        def exec_then_call(module) -> None:  # type: ignore[no-untyped-def]
            exec_module(module)
            callback()

        loader.exec_module = exec_then_call
        return spec


def when_imported(name: str, callback: Callable[[], object]) -> None:
    """``callback()`` now if ``name`` is imported, else right after its first import."""
    if name in sys.modules:
        callback()
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))

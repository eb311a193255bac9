"""Run a callback once a module is imported, at the first moment the package is not mid-import.

``import mil_passes`` must not import coremltools (the command chooses how it starts), yet the
passes must be registered in coremltools' pass registry as soon as coremltools is there. Importing
the passes right when coremltools finishes is not safe when one of the package's own modules
imported coremltools (it is half-initialized, and the passes import it): the callback waits until
no module of the package is mid-import, checking as each module watched here finishes.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Callable


def _initializing(module) -> bool:
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _WhenSettled(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loaders of ``trigger`` and of the package's modules."""

    def __init__(self, trigger: str, package: str, callback: Callable[[], object]) -> None:
        self.trigger, self.package, self.callback = trigger, package, callback
        self.armed = self.done = self.finding = False

    def _watched(self, fullname: str) -> bool:
        return fullname == self.trigger or fullname.startswith(self.package + ".")

    def find_spec(self, fullname, path=None, target=None):
        if self.done or self.finding or not self._watched(fullname):
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        loader = getattr(spec, "loader", None)
        if not isinstance(loader, importlib.machinery.SourceFileLoader):  # one loader per module
            return spec
        exec_module = loader.exec_module

        def exec_then_settle(module) -> None:
            exec_module(module)
            self.armed = self.armed or fullname == self.trigger
            self.settle(finished=fullname)

        loader.exec_module = exec_then_settle
        return spec

    def settle(self, finished: str | None = None) -> None:
        """Run the callback if the trigger is imported and no module of the package is mid-import."""
        if self.done or not self.armed:
            return
        prefix = self.package + "."
        if any(
            _initializing(module)
            for name, module in list(sys.modules.items())
            if (name == self.package or name.startswith(prefix)) and name != finished
        ):
            return
        self.done = True
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.callback()


def when_imported(trigger: str, package: str, callback: Callable[[], object]) -> None:
    """``callback()`` once ``trigger`` is imported and no module of ``package`` is mid-import: at
    once if that holds now (``package`` itself may be initializing), else as soon as it does."""
    if trigger in sys.modules:
        callback()
        return
    if not any(isinstance(f, _WhenSettled) and f.trigger == trigger for f in sys.meta_path):
        sys.meta_path.insert(0, _WhenSettled(trigger, package, callback))

"""The reference interpreter standing in for Core ML where the framework is absent.

Under ``with stand_in_for_coreml():`` on a machine without Core ML (Linux, Windows),

- ``MLModel.predict`` answers through :func:`~mil_passes.reference.predict.predict`, and
  ``MLModel.make_state`` through :func:`~mil_passes.reference.state.make_state` (stateful models);
- coremltools' test utilities that return before comparing numbers when they are not on macOS
  12+ (``convert_and_compare`` in the torch frontend's ``test/testing_utils.py``; the MIL op
  tests' ``testing_utils.py``) see ``_IS_MACOS`` true and, through their own ``coremltoolsutils``
  name only, a macOS version of :data:`STAND_IN_MACOS_VERSION`. Everything else keeps seeing the
  real platform: ``coremltools.models.utils._macos_version`` itself is not touched.
- coremltools' state tests (iOS18) ask for more: :data:`APPLE_SILICON_MODULES` see an ``arm64``
  machine through their own ``platform`` name (``test_states.py`` marks its stress tests xfail on
  x86_64 for an Intel-Mac Core ML bug, rdar://149313013, and never runs them there), and
  :func:`macos_while_importing` makes :data:`MACOS_15_AT_IMPORT` see macOS 15 through ``ct.utils``
  while pytest imports them (``test_torch_stateful_model.py`` skips its class at import otherwise);
  the pytest plugin does both.

Those utility modules are patched when already imported; :meth:`StandIn.refresh` patches any
imported since (the pytest plugin calls it before each test). Everything is restored on exit.
Where Core ML is present (macOS, or a loaded ``libcoremlpython``) nothing is patched and the
yielded :class:`StandIn` has ``active`` false.
"""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .errors import UnsupportedOpError

__all__ = [
    "stand_in_for_coreml",
    "coreml_present",
    "macos_while_importing",
    "StandIn",
    "GATED_MODULES",
    "APPLE_SILICON_MODULES",
    "MACOS_15_AT_IMPORT",
    "STAND_IN_MACOS_VERSION",
]

# coremltools' test utilities that skip the numeric comparison off macOS.
GATED_MODULES = (
    "coremltools.converters.mil.frontend.torch.test.testing_utils",
    "coremltools.converters.mil.testing_utils",
)

# The macOS those utilities are told they run on: new enough for every ML Program target.
STAND_IN_MACOS_VERSION = (15, 0)

# coremltools' test modules that ask ``platform.machine()`` at run time (Core ML on Apple silicon).
APPLE_SILICON_MODULES = ("coremltools.converters.mil.mil.ops.tests.iOS18.test_states",)

# Test files (below coremltools' package) that read ``ct.utils._macos_version()`` when imported.
MACOS_15_AT_IMPORT = ("converters/mil/frontend/torch/test/test_torch_stateful_model.py",)

_MISSING = object()


def coreml_present() -> bool:
    """True on macOS or where coremltools loaded its Core ML bindings."""
    from coremltools.models import model as model_module

    return sys.platform == "darwin" or getattr(model_module, "_MLModelProxy", None) is not None


class _Overlay(types.ModuleType):
    """A module that is ``real`` but for what a subclass defines."""

    def __init__(self, real: types.ModuleType):
        super().__init__(real.__name__, real.__doc__)
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _AppleSilicon(_Overlay):
    """``platform`` as an Apple-silicon Mac shows it: the real module, but for the machine."""

    @staticmethod
    def machine() -> str:
        return "arm64"


class _MacOSUtils(_Overlay):
    """``coremltools.models.utils`` as a gated module sees it: the real module, but for the
    macOS version."""

    @staticmethod
    def _macos_version() -> tuple[int, ...]:
        return STAND_IN_MACOS_VERSION


@dataclass
class StandIn:
    """What is patched, how many predictions the interpreter answered (a result, or Core ML's own
    prediction error), and how many it declined (``UnsupportedOpError``: an op it cannot predict)."""

    active: bool
    predictions: int = 0
    declined: int = 0
    patched_modules: list[str] = field(default_factory=list)
    _undo: list[tuple[Any, str, Any]] = field(default_factory=list, repr=False)

    def _set(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def refresh(self) -> None:
        """Patch the gated modules imported since the stand-in was entered."""
        if not self.active:
            return
        for module_name in GATED_MODULES:
            module = sys.modules.get(module_name)
            if module is None or module_name in self.patched_modules:
                continue
            self._set(module, "_IS_MACOS", True)
            real_utils = module.__dict__.get("coremltoolsutils")
            if real_utils is not None:
                self._set(module, "coremltoolsutils", _MacOSUtils(real_utils))
            self.patched_modules.append(module_name)
        for module_name in APPLE_SILICON_MODULES:
            module = sys.modules.get(module_name)
            if module is None or module_name in self.patched_modules:
                continue
            if isinstance(module.__dict__.get("platform"), types.ModuleType):
                self._set(module, "platform", _AppleSilicon(module.__dict__["platform"]))
            self.patched_modules.append(module_name)

    def _restore(self) -> None:
        while self._undo:
            owner, name, old = self._undo.pop()
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self.patched_modules.clear()


@contextmanager
def macos_while_importing(path: str) -> Iterator[None]:
    """While the block runs, ``coremltools.utils`` reports macOS :data:`STAND_IN_MACOS_VERSION`
    if ``path`` is one of :data:`MACOS_15_AT_IMPORT` and Core ML is absent; else nothing changes."""
    import coremltools

    wanted = str(path).replace("\\", "/")
    if coreml_present() or not any(wanted.endswith(name) for name in MACOS_15_AT_IMPORT):
        yield
        return
    real = coremltools.utils
    coremltools.utils = _MacOSUtils(real)
    try:
        yield
    finally:
        coremltools.utils = real


@contextmanager
def stand_in_for_coreml() -> Iterator[StandIn]:
    """Make ``MLModel.predict`` and coremltools' test utilities run on the reference
    interpreter while the block runs, where Core ML is absent; restore everything after."""
    if coreml_present():
        yield StandIn(active=False)
        return
    from coremltools.models.model import MLModel

    from .predict import predict
    from .state import make_state

    stand_in = StandIn(active=True)
    core_ml_predict = MLModel.__dict__["predict"]

    @functools.wraps(core_ml_predict)
    def reference_predict(self, data, state=None):
        try:
            outputs = predict(self, data, state=state)
        except UnsupportedOpError:
            stand_in.declined += 1
            raise
        except BaseException:
            stand_in.predictions += 1  # answered with an error: Core ML's, or the interpreter's to explain
            raise
        stand_in.predictions += 1
        return outputs

    @functools.wraps(MLModel.__dict__["make_state"])
    def reference_make_state(self):
        return make_state(self)

    stand_in._set(MLModel, "predict", reference_predict)
    stand_in._set(MLModel, "make_state", reference_make_state)
    try:
        stand_in.refresh()
        yield stand_in
    finally:
        stand_in._restore()

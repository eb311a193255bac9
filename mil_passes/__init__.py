"""Graph passes for coremltools' MIL, registered under the ``webnn::`` namespace.

``import mil_passes`` registers every pass in coremltools' pass registry as soon as coremltools
is imported (at once if it already is); ``mil_passes.pipeline()`` returns a coremltools
``PassPipeline`` with them in place. Importing the package itself imports neither coremltools nor
any framework, so the ``mil-passes`` command can choose how coremltools starts.
"""

# First: in the ``mil-passes`` command's process, its SIGINT handler is in place before any import
# (an interrupt Python would lose in an import is recorded); elsewhere this does nothing.
from . import _sigint_record

_sigint_record.install_if_command()

import importlib as _importlib  # noqa: E402
import logging as _logging  # noqa: E402
from typing import TYPE_CHECKING as _TYPE_CHECKING  # noqa: E402

# coremltools warns at import that Core ML's runtime is missing (always, off macOS) and that torch is
# newer than it tested; neither is about this package. Other coremltools warnings still show.
_NOISE = ("Failed to load _ML", "has not been tested with coremltools")
_logging.getLogger("coremltools").addFilter(lambda record: not any(n in str(record.msg) for n in _NOISE))

from ._registration import when_imported  # noqa: E402
from ._version import __version__  # noqa: E402

if _TYPE_CHECKING:  # for type checkers only: at run time __getattr__ imports these on first use
    from .schedule import PASS_NAMES, pipeline

__all__ = ["__version__", "PASS_NAMES", "pipeline"]
_LAZY = ("PASS_NAMES", "pipeline")  # from mil_passes/schedule.py, which imports coremltools (PEP 562)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'mil_passes' has no attribute '{name}'")
    module = _importlib.import_module(".schedule", __name__)
    for lazy in _LAZY:
        globals()[lazy] = getattr(module, lazy)
    return getattr(module, name)


when_imported("coremltools", __name__, lambda: [_importlib.import_module(m, __name__) for m in (".passes", ".guards")])

"""Graph passes for coremltools' MIL, registered under the ``webnn::`` namespace.

``import mil_passes`` registers every pass; ``mil_passes.pipeline()`` returns a coremltools
``PassPipeline`` with them in place.
"""

import logging as _logging

# coremltools warns at import that Core ML's runtime is missing (always, off macOS) and that torch is
# newer than it tested; neither is about this package. Other coremltools warnings still show.
_NOISE = ("Failed to load _ML", "has not been tested with coremltools")
_logging.getLogger("coremltools").addFilter(lambda record: not any(n in str(record.msg) for n in _NOISE))

from . import _moved  # noqa: E402
from ._version import __version__  # noqa: E402
from .pipeline import PASS_NAMES, pipeline  # noqa: E402

_moved.install()

__all__ = ["__version__", "PASS_NAMES", "pipeline"]

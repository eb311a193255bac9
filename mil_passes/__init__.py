"""Graph passes for coremltools' MIL, registered under the ``webnn::`` namespace.

``import mil_passes`` registers every pass; ``mil_passes.pipeline()`` returns a coremltools
``PassPipeline`` with them in place.
"""

from ._version import __version__
from .pipeline import PASS_NAMES, pipeline

__all__ = ["__version__", "PASS_NAMES", "pipeline"]

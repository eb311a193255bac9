"""The ``mil-passes`` command line: ``lint``, ``optimize``, ``list``, ``demo``."""

from .exit_status import EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK
from .main import build_parser, main
from .progress import progress_enabled

__all__ = ["EXIT_ERROR", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "build_parser", "main", "progress_enabled"]

"""A numpy reference interpreter for MIL programs: Core ML's numbers, on any platform."""

from .errors import UnsupportedOpError
from .interpreter import describe_type, evaluate
from .support import SUPPORTED_OPS

__all__ = ["evaluate", "UnsupportedOpError", "SUPPORTED_OPS", "describe_type"]

"""A numpy reference interpreter for MIL programs: Core ML's numbers, on any platform."""

from .errors import UnsupportedOpError
from .interpreter import describe_type, evaluate
from .predict import predict
from .state import State, evaluate_step, evaluate_steps, make_state
from .stand_in import stand_in_for_coreml
from .support import SUPPORTED_OPS

__all__ = [
    "evaluate",
    "evaluate_step",
    "evaluate_steps",
    "make_state",
    "State",
    "predict",
    "stand_in_for_coreml",
    "UnsupportedOpError",
    "SUPPORTED_OPS",
    "describe_type",
]

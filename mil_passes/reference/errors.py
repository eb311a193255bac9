"""Errors raised by the reference interpreter."""

from __future__ import annotations


class UnsupportedOpError(NotImplementedError):
    """The interpreter has no kernel for this op."""

    def __init__(self, op_type: str, op_name: str, detail: str = ""):
        self.op_type = op_type
        self.op_name = op_name
        message = f"reference interpreter cannot evaluate op '{op_name}' of type '{op_type}'"
        super().__init__(message + (f": {detail}" if detail else ""))


class PredictionError(ValueError):
    """The model fails at prediction time on Core ML (an invalid index, for example):
    :func:`~mil_passes.reference.predict.predict` reports it as Core ML's ``predict`` does, with a
    ``RuntimeError``."""

"""Which op types the reference interpreter evaluates."""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry

from .kernels import KERNELS, load_families

CONTROL_FLOW = frozenset({"const", "cond", "while_loop"})


def _ops_with_value_inference() -> set[str]:
    found = set()
    for op_type, by_opset in SSAOpRegistry.core_ops.items():
        if op_type.startswith("_"):
            continue
        for cls in by_opset.values():
            if cls.value_inference is not Operation.value_inference:
                found.add(op_type)
    return found


def supported_ops() -> frozenset[str]:
    """Op types with a hand-written kernel, a coremltools value_inference, or control flow."""
    load_families()
    return frozenset(KERNELS) | frozenset(_ops_with_value_inference()) | CONTROL_FLOW


SUPPORTED_OPS: frozenset[str] = supported_ops()

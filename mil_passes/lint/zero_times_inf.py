"""lint rule ``nan-zero-times-inf``: a ``mul`` of an infinite constant by a value that can be 0.

``0 * inf`` is NaN in IEEE arithmetic, so on the CPU, the GPU and the Neural Engine alike. The
usual source is a mask sentinel: transformers' ``(1 - mask) * torch.finfo(torch.float32).min``,
finite in fp32, is ``(1 - mask) * -inf`` once coremltools casts it to fp16, and every kept
position becomes NaN; Qwen2 and Phi-3 multiply a ``fill(-inf)`` causal mask by 0 with a run-time
sequence. The constant is followed through data movement, fills and fp16/fp32 casts; the other
factor can be 0 unless it is a constant without a zero. Only ops whose result is used count
(a dead ``mul`` computes nothing).
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation, Program, Var, types
import numpy as np

from ..ir import is_used, iter_ops
from ..passes.finite_mask_sentinels import InfiniteMaskSentinel, fp16_value
from .findings import Finding

RULE = "nan-zero-times-inf"
# Ops an infinite constant passes through unchanged in value (a fill spreads it).
_CARRIERS = frozenset(
    {"reshape", "expand_dims", "squeeze", "transpose", "tile", "slice_by_index", "slice_by_size", "identity", "fill"}
)


def _infinite_source(var: Var) -> Operation | None:
    """The const (or cast of a const to fp16) holding ±inf whose values ``var`` carries, or None."""
    seen = 0
    while var.op is not None and seen < 16:
        op = var.op
        if op.op_type == "const":
            value = np.asarray(var.val, np.float64) if var.val is not None else np.zeros(0)
            return op if types.is_float(var.dtype) and np.isinf(value).any() else None
        value16 = fp16_value(op)
        if value16 is not None:
            return op if np.isinf(value16).any() else None
        if op.op_type == "cast" and types.is_float(var.dtype):
            var = op.x
        elif op.op_type == "fill":
            var = op.value
        elif op.op_type in _CARRIERS:
            var = op.x
        else:
            return None
        seen += 1
    return None


def _can_be_zero(var: Var) -> bool:
    if var.val is None:
        return True
    return bool((np.asarray(var.val) == 0).any())


def _fixable(prog: Program) -> set[Operation]:
    """The sentinels ``webnn::finite_mask_sentinels`` replaces."""
    pattern = InfiniteMaskSentinel()
    fixed: set[Operation] = set()
    for op in iter_ops(prog):
        if op.op_type in pattern.op_types:
            match = pattern.match(op)
            if isinstance(match, tuple):
                fixed.update(match)
    return fixed


def zero_times_inf_findings(prog: Program) -> list[Finding]:
    """An error for every used ``mul`` of an infinite constant by a factor that can be 0."""
    findings: list[Finding] = []
    fixable: set[Operation] | None = None
    for op in iter_ops(prog):
        if op.op_type != "mul" or not any(map(is_used, op.outputs)):
            continue
        for infinite, other in ((op.x, op.y), (op.y, op.x)):
            source = _infinite_source(infinite)
            if source is None or not _can_be_zero(other):
                continue
            fixable = _fixable(prog) if fixable is None else fixable
            message = (
                f"mul '{op.name}' multiplies '{source.name}', which is infinite"
                f"{' at fp16' if source.op_type != 'const' or source.outputs[0].dtype == types.fp16 else ''}, "
                f"by '{other.name}', which can be 0: 0 * inf is NaN on every device (CPU, GPU and Neural Engine), "
                "and the NaN spreads to the outputs"
            )
            fix = "webnn::finite_mask_sentinels" if source in fixable else None
            cause = "multiplies an infinite constant by a value that can be 0: NaN on every device"
            findings.append(Finding(RULE, "error", op.name, message, fix, op.op_type, cause))
            break
    return findings

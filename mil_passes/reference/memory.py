"""Whether a model fits in this machine's memory, said before anything large is allocated.

A model too big for the machine would otherwise fail halfway through with a ``MemoryError``, or be
killed by the kernel's OOM killer with no word. Before a model is read, and before it is first
interpreted, what it will need is compared with what the machine has available: ``MemAvailable``
of ``/proc/meminfo`` (the kernel's estimate of what can be allocated without swapping), and the
cgroup's limit when one is set (a container's ``memory.max``). Where neither can be read (macOS),
nothing is checked. ``MIL_PASSES_MEMORY_CHECK=0`` turns the check off.

What is counted is a floor, not a forecast: the weights as loaded, the compressed weights decoded
(once per op, :mod:`.decoded`; when ``predict`` loads a package, in place of the compressed ones),
the states and the copies of them kept, and the largest fp16 weight widened to fp32 (a prompt of
several tokens widens each ``linear`` weight whole, :mod:`.fp16_matmul`). Intermediate values are
not counted.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Mapping

from coremltools import proto
from coremltools.converters.mil.mil import Program, types

from ..ir import iter_ops, iter_proto_ops
from .interpreter import numpy_dtype, state_inputs

__all__ = [
    "NotEnoughMemoryError",
    "available_bytes",
    "require",
    "interpretation_bytes",
    "weight_file_bytes",
    "decoded_bytes",
    "loaded_bytes",
    "tensor_elements_and_bits",
    "size_text",
]

CHECK_VARIABLE = "MIL_PASSES_MEMORY_CHECK"
_CGROUP_FILES = (  # (limit, usage): cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


# Bits per element of each MIL DataType a weight blob or a tensor type can hold.
DTYPE_BITS = {
    "FLOAT16": 16,
    "BFLOAT16": 16,
    "FLOAT32": 32,
    "FLOAT64": 64,
    "FLOAT8E4M3FN": 8,
    "FLOAT8E5M2": 8,
    "INT4": 4,
    "INT8": 8,
    "INT16": 16,
    "INT32": 32,
    "INT64": 64,
    "UINT1": 1,
    "UINT2": 2,
    "UINT3": 3,
    "UINT4": 4,
    "UINT6": 6,
    "UINT8": 8,
    "UINT16": 16,
    "UINT32": 32,
    "UINT64": 64,
    "BOOL": 8,
}


class NotEnoughMemoryError(MemoryError):
    """A model needs more memory than the machine has available (one line: how much, and why)."""


def available_bytes() -> int | None:
    """Bytes this process can allocate without swapping, or None where that cannot be read."""
    candidates = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                candidates.append(int(line.split()[1]) << 10)
                break
    except (OSError, ValueError):
        pass
    for limit_file, usage_file in _CGROUP_FILES:
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:  # "max" or v1's huge number: none
            candidates.append(max(int(limit) - int(usage), 0))
        break
    return min(candidates) if candidates else None


def size_text(count: int) -> str:
    """Bytes for a person: ``2.4 GiB``, ``512 MiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{count} bytes"


def require(parts: Mapping[str, int], doing: str, label: str) -> None:
    """Raise :class:`NotEnoughMemoryError` when the sum of ``parts`` (what, bytes) is more than is
    available: ``"{label}: {doing} needs at least …; this machine has … available"``."""
    if os.environ.get(CHECK_VARIABLE, "1") == "0":
        return
    needed = sum(parts.values())
    available = available_bytes()
    if available is None or needed <= available:
        return
    listed = ", ".join(f"{what} {size_text(count)}" for what, count in parts.items() if count)
    raise NotEnoughMemoryError(
        f"{label}: {doing} needs at least {size_text(needed)} ({listed}); this machine has "
        f"{size_text(available)} available ({CHECK_VARIABLE}=0 skips this check)"
    )


def _tensor_bytes(var, itemsize: int | None = None) -> int:
    shape = var.shape
    if not all(isinstance(dim, int) for dim in shape):
        return 0
    return math.prod(shape) * (itemsize or numpy_dtype(var).itemsize)


def weight_file_bytes(weights_dir: str | Path | None) -> int:
    """The bytes of the weight files in ``weights_dir``: what loading a model reads into memory."""
    if not weights_dir:
        return 0
    try:
        return sum(entry.stat().st_size for entry in Path(weights_dir).iterdir() if entry.is_file())
    except OSError:
        return 0


def tensor_elements_and_bits(value_type) -> tuple[int | None, int | None]:
    """A protobuf ``ValueType``'s element count (None unless a tensor of constant dims) and bits
    per element (None for a dtype this coremltools does not know)."""
    if value_type.WhichOneof("type") != "tensorType":
        return None, None
    tensor = value_type.tensorType
    try:
        bits = DTYPE_BITS.get(proto.MIL_pb2.DataType.Name(tensor.dataType))
    except ValueError:  # a dtype this coremltools does not know; its loader will say so
        return None, None
    dims = [d.constant.size for d in tensor.dimensions if d.WhichOneof("dimension") == "constant"]
    if len(dims) != len(tensor.dimensions):
        return None, bits
    return math.prod(dims), bits


def loaded_bytes(value_type) -> int:
    """The bytes coremltools' loader allocates for a value of a protobuf ``ValueType``: a tensor of
    constant dims, sub-byte types at one byte an element as it unpacks them; 0 for anything else."""
    elements, bits = tensor_elements_and_bits(value_type)
    return 0 if elements is None or bits is None else elements * max(1, math.ceil(bits / 8))


def decoded_bytes(spec) -> int:
    """The bytes of every ``constexpr_*`` op's outputs in an ML Program's protobuf: what decoding
    its compressed weights allocates."""
    return sum(
        loaded_bytes(output.type)
        for op in iter_proto_ops(spec)
        if op.type.startswith("constexpr_")
        for output in op.outputs
    )


def interpretation_bytes(prog: Program, state_copies: int = 1) -> dict[str, int]:
    """What interpreting ``prog`` allocates beyond its loaded consts: the decoded compressed weights,
    ``state_copies`` copies of its states, and its largest fp16 weight widened to fp32."""
    decoded = widened = 0
    for op in iter_ops(prog):
        if op.op_type != "const" and not op.op_type.startswith("constexpr_"):
            continue
        for var in op.outputs:
            if not types.is_tensor(var.sym_type):
                continue
            if op.op_type != "const":
                decoded += _tensor_bytes(var)
            if var.dtype == types.fp16:
                widened = max(widened, _tensor_bytes(var, 4))
    states = 0
    if "main" in prog.functions:
        for var in state_inputs(prog.functions["main"]).values():
            states += math.prod(int(dim) for dim in var.shape) * numpy_dtype(var).itemsize
    return {
        "compressed weights decoded": decoded,
        f"states{f' x{state_copies}' if state_copies > 1 else ''}": states * state_copies,
        "the largest fp16 weight widened": widened,
    }

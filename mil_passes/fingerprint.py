"""A structural fingerprint of a MIL function: equal fingerprints compute equal values.

The fingerprint covers what the reference interpreter reads: each op's class (its type and
opset), its inputs (which var feeds which input, by position of definition, not by name), the
declared dtype and shape of each output, constant values (hashed by their bytes), nested blocks,
and the function's inputs and outputs. Names are left out: renaming vars changes no value.

Each op also gets a *chained* digest that covers every op before it in its block, so the first
op whose chained digest differs between two versions of a function is where they start to
differ: the ops before it compute the same values.

A const's bytes are hashed once per array object (``blake2b``); while that object lives, its
digest is reused, checked against a sample of 4,096 evenly spaced elements. An array changed in
place (rather than replaced, as passes do) is seen where the sample sees it.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Block, Function, Operation, Program, Var, types

SAMPLE = 4096


@dataclass(frozen=True)
class FunctionPrint:
    """A function's digest, and the chained digest of each op of its top-level block."""

    digest: bytes
    op_digests: tuple[bytes, ...]

    def common_prefix(self, other: FunctionPrint) -> int:
        """How many top-level ops, from the first, the two functions share."""
        count = 0
        for mine, theirs in zip(self.op_digests, other.op_digests):
            if mine != theirs:
                break
            count += 1
        return count


def _hash(*parts: bytes | memoryview) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


class Fingerprinter:
    """Fingerprints functions; remembers the digests of the const arrays it has hashed."""

    def __init__(self) -> None:
        self._arrays: dict[int, tuple[weakref.ref, bytes, bytes]] = {}

    def program(self, prog: Program, function: str = "main") -> FunctionPrint:
        """The fingerprint of ``function`` of ``prog``."""
        return self.function(prog.functions[function])

    def function(self, func: Function) -> FunctionPrint:
        ids: dict[Var, int] = {}
        inputs = []
        for var in func.inputs.values():
            ids[var] = len(ids)
            inputs.append(_type_text(var).encode())
        op_digests = self._block_ops(func, ids)
        outputs = ",".join(str(ids.get(var, -1)) for var in func.outputs).encode()
        last = op_digests[-1] if op_digests else b""
        return FunctionPrint(_hash(b"function", *inputs, last, outputs), tuple(op_digests))

    def _block_ops(self, block: Block, ids: dict[Var, int]) -> list[bytes]:
        chained: list[bytes] = []
        previous = b""
        for op in block.operations:
            previous = _hash(previous, self._op(op, ids))
            chained.append(previous)
        return chained

    def _op(self, op: Operation, ids: dict[Var, int]) -> bytes:
        cls = type(op)
        parts = [f"{cls.__module__}.{cls.__qualname__}:{op.op_type}".encode()]
        if op.op_type == "const":
            parts.append(self._value(op.outputs[0]))
        for name, value in op.inputs.items():
            parts.append(f"{name}={_reference(value, ids)}".encode())
        for block in op.blocks:
            parts.append(self._block(block, ids))
        for var in op.outputs:
            ids[var] = len(ids)
            parts.append(_type_text(var).encode())
        return _hash(*parts)

    def _block(self, block: Block, ids: dict[Var, int]) -> bytes:
        inputs = []
        for var in block.inputs:
            ids[var] = len(ids)
            inputs.append(_type_text(var).encode())
        ops = self._block_ops(block, ids)
        outputs = ",".join(str(ids.get(var, -1)) for var in block.outputs).encode()
        return _hash(b"block", *inputs, ops[-1] if ops else b"", outputs)

    def _value(self, var: Var) -> bytes:
        val = var.val
        if isinstance(val, np.ndarray) and val.dtype != object:
            return self._array(val)
        if isinstance(val, (np.generic, bool, int, float)):
            array = np.asarray(val)
            return _hash(array.dtype.str.encode(), array.tobytes())
        return _hash(repr(val).encode())

    def _array(self, array: np.ndarray) -> bytes:
        header = f"{array.dtype.str}{array.shape}".encode()
        if not array.flags.c_contiguous:
            return _hash(header, np.ascontiguousarray(array).tobytes())
        flat = array.reshape(-1)
        sample = flat[:: max(1, flat.size // SAMPLE)].tobytes()
        known = self._arrays.get(id(array))
        if known is not None and known[0]() is array and known[2] == sample:
            return known[1]
        digest = _hash(header, flat.view(np.uint8).data)
        try:
            self._arrays[id(array)] = (weakref.ref(array), digest, sample)
        except TypeError:  # an array that takes no weak reference: hashed every time
            pass
        return digest


def _reference(value: Any, ids: dict[Var, int]) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_reference(v, ids) for v in value) + ")"
    return str(ids.get(value, f"outer:{value.name}"))


def _type_text(var: Var) -> str:
    sym_type = var.sym_type
    if sym_type is None:
        return "unknown"
    if types.is_tensor(sym_type):
        return f"tensor<{types.builtin_to_string(var.dtype)},{tuple(str(d) for d in var.shape)}>"
    if types.is_scalar(sym_type) or sym_type in (types.str, types.bool):
        return types.builtin_to_string(sym_type)
    type_info = getattr(sym_type, "__type_info__", None)  # list[tensor[2,3,fp32]], state[...], tuple
    return str(type_info()) if type_info is not None else repr(sym_type)

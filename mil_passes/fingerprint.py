"""A structural fingerprint of a MIL function: equal fingerprints compute equal outputs.

The fingerprint is a Merkle hash of what the function's outputs are computed from: each var's
digest covers the op that makes it (its class: type and opset), that op's inputs' digests by input
name, its constant value (hashed by its bytes), the declared dtype and shape of its outputs, and
its nested blocks. Function inputs count by position and type. Names do not count (renaming
changes no value), nor does the order of independent ops, nor an op whose result no output
reads (dead code), except an op that reads or writes a state, which counts where it stands.

A const's bytes are hashed once per array object (``blake2b``); while that object lives, its
digest is reused, checked against a sample of 4,096 evenly spaced elements. An array changed in
place (rather than replaced, as passes do) is seen where the sample sees it.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Block, Function, Operation, Program, Var, types

SAMPLE = 4096


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

    def program(self, prog: Program, function: str = "main") -> bytes:
        """The fingerprint of ``function`` of ``prog``."""
        return self.function(prog.functions[function])

    def function(self, func: Function) -> bytes:
        digests: dict[Var, bytes] = {}
        inputs = []
        for position, var in enumerate(func.inputs.values()):
            digests[var] = _hash(b"input", str(position).encode(), _type_text(var).encode())
            inputs.append(digests[var])
        return _hash(b"function", *inputs, self._block_digest(func, digests, depth=0))

    def _block_digest(self, block: Block, digests: dict[Var, bytes], depth: int) -> bytes:
        """The digest of ``block``'s outputs and of its state-touching ops, in block order."""
        effects = []
        for op in block.operations:
            op_digest = self._op(op, digests, depth)
            for index, var in enumerate(op.outputs):
                digests[var] = _hash(op_digest, str(index).encode())
            if _touches_state(op):
                effects.append(op_digest)
        outputs = [digests.get(var) or _free(var) for var in block.outputs]
        return _hash(b"outputs", *outputs, b"effects", *effects)

    def _op(self, op: Operation, digests: dict[Var, bytes], depth: int) -> bytes:
        cls = type(op)
        parts: list[bytes] = [f"{cls.__module__}.{cls.__qualname__}:{op.op_type}".encode()]
        if op.op_type == "const":
            parts.append(self._value(op.outputs[0]))
        for name, value in op.inputs.items():
            parts.append(name.encode())
            for var in value if isinstance(value, (list, tuple)) else (value,):
                parts.append(digests.get(var) or _free(var))
        for block in op.blocks:
            for position, var in enumerate(block.inputs):
                digests[var] = _hash(b"block input", f"{depth}.{position}".encode(), _type_text(var).encode())
            parts.append(self._block_digest(block, digests, depth + 1))
        parts.extend(_type_text(var).encode() for var in op.outputs)
        return _hash(*parts)

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


def _free(var: Var) -> bytes:
    """A var defined nowhere this walk has seen (not in a valid program): its name stands for it."""
    return _hash(b"free", var.name.encode())


def _touches_state(op: Operation) -> bool:
    for value in op.inputs.values():
        for var in value if isinstance(value, (list, tuple)) else (value,):
            if var.sym_type is not None and types.is_state(var.sym_type):
                return True
    return False


def _type_text(var: Var) -> str:
    sym_type: Any = var.sym_type
    if sym_type is None:
        return "unknown"
    if types.is_tensor(sym_type):
        return f"tensor<{types.builtin_to_string(var.dtype)},{tuple(str(d) for d in var.shape)}>"
    if types.is_scalar(sym_type) or sym_type in (types.str, types.bool):
        return types.builtin_to_string(sym_type)
    type_info = getattr(sym_type, "__type_info__", None)  # list[tensor[2,3,fp32]], state[...], tuple
    return str(type_info()) if type_info is not None else repr(sym_type)

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
            digests[var] = _hash(b"input", str(position).encode(), _type_text(var.sym_type))
            inputs.append(digests[var])
        return _hash(b"function", *inputs, self._block_digest(func, digests, depth=0))

    def _block_digest(self, block: Block, digests: dict[Var, bytes], depth: int) -> bytes:
        """The digest of ``block``'s outputs and of its state-touching ops, in block order."""
        effects = []
        for op in block.operations:
            op_digest, touches_state = self._op(op, digests, depth)
            for index, var in enumerate(op.outputs):
                digests[var] = op_digest + index.to_bytes(4, "little")
            if touches_state:
                effects.append(op_digest)
        outputs = [digests.get(var) or _free(var) for var in block.outputs]
        return _hash(b"outputs", *outputs, b"effects", *effects)

    def _op(self, op: Operation, digests: dict[Var, bytes], depth: int) -> tuple[bytes, bool]:
        """The op's digest, and whether it reads or writes a state."""
        cls = type(op)
        parts: list[bytes] = [_class_text(cls)]
        if cls.__name__ == "const":
            parts.append(self._value(op.outputs[0]))
        touches_state = False
        for name, value in op.inputs.items():
            parts.append(name.encode())
            for var in value if isinstance(value, (list, tuple)) else (value,):
                parts.append(digests.get(var) or _free(var))
                touches_state = touches_state or _is_state(var.sym_type)
        for block in op.blocks:
            for position, var in enumerate(block.inputs):
                digests[var] = _hash(b"block input", f"{depth}.{position}".encode(), _type_text(var.sym_type))
            parts.append(self._block_digest(block, digests, depth + 1))
        parts.extend(_type_text(var.sym_type) for var in op.outputs)
        return _hash(*parts), touches_state

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
        if array.size <= SAMPLE or not array.flags.c_contiguous:
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


_TEXTS: dict[Any, bytes] = {}


def _class_text(cls: type) -> bytes:
    text = _TEXTS.get(cls)
    if text is None:
        text = _TEXTS[cls] = f"{cls.__module__}.{cls.__qualname__}:{cls.__name__}".encode()
    return text


def _is_state(sym_type: Any) -> bool:
    return sym_type is not None and types.is_state(sym_type)


def _type_text(sym_type: Any) -> bytes:
    """A type's text, remembered per type (MIL types are immutable)."""
    try:
        text = _TEXTS.get(sym_type)
    except TypeError:  # an unhashable type
        return _describe(sym_type).encode()
    if text is None:
        text = _TEXTS[sym_type] = _describe(sym_type).encode()
    return text


def _describe(sym_type: Any) -> str:
    if sym_type is None:
        return "unknown"
    if types.is_tensor(sym_type):
        shape = tuple(str(d) for d in sym_type.get_shape())
        return f"tensor<{types.builtin_to_string(sym_type.get_primitive())},{shape}>"
    if types.is_scalar(sym_type) or sym_type in (types.str, types.bool):
        return types.builtin_to_string(sym_type)
    type_info = getattr(sym_type, "__type_info__", None)  # list[tensor[2,3,fp32]], state[...], tuple
    return str(type_info()) if type_info is not None else repr(sym_type)

"""Compressed weights decoded once per op, shared by every evaluation of the program.

A ``constexpr_*`` op (``constexpr_blockwise_shift_scale``, ``constexpr_lut_to_dense``,
``constexpr_sparse_to_dense``, their iOS16/iOS18 forms and the joint ones) computes a weight from
const inputs only, so it has the same value in every prediction, step and re-run of ``verify``:
decoding it again each time cost an int4 per-block decoder step 4.6x the uncompressed step.

The decoded value (already rounded to the op's declared dtype, fp16 for compressed fp16 weights,
as the interpreter rounds every result) is kept per op and handed out read-only. It is reused
while each input is the same value object as when it was decoded, and a sample of
:data:`SAMPLE` evenly spaced elements of each input array still holds the same bytes (the rule
of :mod:`mil_passes.fingerprint`: an input array changed in place, rather than replaced as
passes do, is seen where the sample sees it). The entry goes when its op does.

Memory: one decoded array per op, the size of the uncompressed model's fp16 weight; the
compressed inputs stay as the program holds them, and no snapshot of them is kept beyond the
samples. ``linear`` reads an fp16 weight in blocks of rows (:mod:`.fp16_matmul`), so a decoded
weight is never widened whole.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import numpy as np

SAMPLE = 4096

DECODED_OPS = frozenset(
    {
        "constexpr_affine_dequantize",
        "constexpr_blockwise_shift_scale",
        "constexpr_cast",
        "constexpr_lut_to_dense",
        "constexpr_lut_to_sparse",
        "constexpr_sparse_blockwise_shift_scale",
        "constexpr_sparse_to_dense",
    }
)
"""Op types whose value depends on their const inputs only: decoded once per op."""


def _sample(value: Any) -> Any:
    """What is compared to see that an input is unchanged: the bytes of evenly spaced elements."""
    if type(value) is not np.ndarray:
        return None
    flat = value.reshape(-1)
    return flat[:: max(1, flat.size // SAMPLE)].copy().view(np.uint8)


def _same(value: Any, sample: Any) -> bool:
    return sample is None or bool(np.array_equal(_sample(value), sample))


class _Entry:
    __slots__ = ("op", "inputs", "samples", "outputs")

    def __init__(self, op: weakref.ref, inputs: tuple, samples: tuple, outputs: tuple):
        self.op, self.inputs, self.samples, self.outputs = op, inputs, samples, outputs


_ENTRIES: dict[int, _Entry] = {}


def _forget(key: int, _: weakref.ref) -> None:
    _ENTRIES.pop(key, None)


def read_only(value: Any) -> Any:
    """``value``, an array made read-only and owning its bytes (a view is copied first)."""
    if type(value) is np.ndarray:
        if value.base is not None:  # a view: own the bytes, so that the value is frozen
            value = value.copy()
        value.flags.writeable = False
    return value


def decoded(op, args: dict, decode: Callable[[], tuple]) -> tuple:
    """The conformed outputs of constexpr ``op`` on ``args``: those decoded last time when every
    input is the same object with the same sampled bytes, else ``decode()`` (kept, read-only)."""
    values = tuple(args.values())
    entry = _ENTRIES.get(id(op))
    if (
        entry is not None
        and entry.op() is op
        and len(entry.inputs) == len(values)
        and all(a is b for a, b in zip(entry.inputs, values))
        and all(_same(v, s) for v, s in zip(values, entry.samples))
    ):
        return entry.outputs
    outputs = tuple(read_only(value) for value in decode())
    key = id(op)
    samples = tuple(_sample(value) for value in values)
    _ENTRIES[key] = _Entry(weakref.ref(op, functools.partial(_forget, key)), values, samples, outputs)
    return outputs

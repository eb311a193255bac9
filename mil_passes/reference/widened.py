"""Widened copies of fp16 const weights, kept between evaluations.

``conv`` computes in float64 and ``linear`` in fp32, so each call widened an fp16 weight again:
numpy's per-element conversion (about 1 ns an element; mobilenet_v3_small's classifier alone has
1.6 million weights). The widening of an fp16 const's array is remembered, keyed by the array
object, with a copy of its bytes, and reused only while the array still holds those bytes (an
integer comparison, 8 bytes at a time: about 7x cheaper than widening fp16), so a pass that
changes a const's array in place gets a fresh widening; a frozen array (:mod:`.frozen`: read-only,
as the consts of a program ``predict`` loads) needs no copy of its bytes. Other dtypes are converted each time
(numpy widens fp32 fast; the comparison would cost about as much). An entry goes when its array
does; at most ``CACHE_BYTES`` are kept (none is added beyond), so the values are always the ones
widening gives.
"""

from __future__ import annotations

import functools
import weakref

import numpy as np

from .frozen import is_frozen

CACHE_BYTES = 256 << 20
"""Bytes of widened copies and snapshots kept at most."""

MIN_ELEMENTS = 4096
"""Smaller arrays are widened each time (cheaper than the bookkeeping)."""


class _Entry:
    __slots__ = ("source", "snapshot", "wide", "size")

    def __init__(self, source: weakref.ref, snapshot: np.ndarray | None, wide: np.ndarray):
        self.source, self.snapshot, self.wide = source, snapshot, wide
        self.size = (0 if snapshot is None else snapshot.nbytes) + wide.nbytes


_ENTRIES: dict[tuple[int, str], _Entry] = {}
_used = 0


def _drop(key: tuple[int, str]) -> None:
    global _used
    entry = _ENTRIES.pop(key, None)
    if entry is not None:
        _used -= entry.size


def _dropped(key: tuple[int, str], _: weakref.ref) -> None:
    _drop(key)


def _is_const(op, name: str) -> bool:
    var = getattr(op, name, None)
    producer = getattr(var, "op", None)
    return producer is not None and producer.op_type == "const"


def const_as(op, name: str, value, dtype) -> np.ndarray:
    """Input ``name`` of ``op`` (its value ``value``) as ``dtype`` (float32 or float64): for a
    large contiguous fp16 array of a const, the same (read-only) widening as last time when the
    array's bytes are unchanged; otherwise ``np.asarray(value, dtype)``."""
    wide = cached_as(op, name, value, dtype)
    return np.asarray(value, dtype=dtype) if wide is None else wide


def cached_as(op, name: str, value, dtype) -> np.ndarray | None:
    """:func:`const_as`'s kept widening of ``value``, made and kept now if it fits in
    ``CACHE_BYTES``; ``None`` (nothing widened) for a value that is not kept or does not fit."""
    global _used
    if type(value) is not np.ndarray or value.dtype != np.float16 or value.size < MIN_ELEMENTS:
        return None
    frozen = is_frozen(value)  # a decoded compressed weight is frozen too
    if not value.flags.c_contiguous or not (frozen or _is_const(op, name)):
        return None
    key = (id(value), np.dtype(dtype).str)
    flat = value.reshape(-1)
    bits = flat.view(np.uint64) if value.nbytes % 8 == 0 else flat.view(np.uint16)
    entry = _ENTRIES.get(key)
    if entry is not None:
        if entry.source() is value and (
            (frozen and entry.snapshot is None)
            or (
                entry.snapshot is not None
                and entry.snapshot.dtype == bits.dtype
                and entry.snapshot.shape == bits.shape
                and np.array_equal(entry.snapshot, bits)
            )
        ):
            return entry.wide
        _drop(key)
    size = value.nbytes * (np.dtype(dtype).itemsize // 2 + (0 if frozen else 1))  # the widening, a snapshot
    if _used + size > CACHE_BYTES:
        return None
    wide = value.astype(dtype)
    wide.flags.writeable = False
    entry = _Entry(weakref.ref(value, functools.partial(_dropped, key)), None if frozen else bits.copy(), wide)
    _ENTRIES[key] = entry
    _used += entry.size
    return wide

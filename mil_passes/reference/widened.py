"""Widened copies of fp16 const weights (and other arrays made from a const), kept between evaluations.

``conv`` computes in float64 and ``linear`` in fp32, so each call widened an fp16 weight again:
numpy's per-element conversion (about 1 ns an element; mobilenet_v3_small's classifier alone has
1.6 million weights). The widening of an fp16 const's array is remembered, keyed by the array
object, with a copy of its bytes, and reused only while the array still holds those bytes (an
integer comparison, 8 bytes at a time: about 7x cheaper than widening fp16), so a pass that
changes a const's array in place gets a fresh widening; a frozen array (:mod:`.frozen`: read-only,
as the consts of a program ``predict`` loads) needs no copy of its bytes. Other dtypes are converted each time
(numpy widens fp32 fast; the comparison would cost about as much). An entry goes when its array
does; at most ``CACHE_BYTES`` are kept (none is added beyond), so the values are always the ones
widening gives. :func:`kept` keeps other arrays made from a const the same way, within their own
``DERIVED_BYTES`` (conv's Winograd filters, 3.6 times the bytes of an fp32 weight).
"""

from __future__ import annotations

import functools
import weakref

from collections.abc import Callable

import numpy as np

from .frozen import is_frozen

CACHE_BYTES = 256 << 20
"""Bytes of widened copies and their snapshots kept at most."""

DERIVED_BYTES = 64 << 20
"""Bytes of other arrays made from consts (:func:`kept`: conv's Winograd filters) and their
snapshots kept at most, apart from the widened copies."""

MIN_ELEMENTS = 4096
"""Smaller arrays are widened each time (cheaper than the bookkeeping)."""


class _Entry:
    __slots__ = ("source", "layout", "snapshot", "wide", "size", "pool")

    def __init__(self, source: np.ndarray, snapshot: np.ndarray | None, wide: np.ndarray, pool: str, gone):
        self.source, self.snapshot, self.wide, self.pool = weakref.ref(source, gone), snapshot, wide, pool
        self.layout = (source.shape, source.dtype)  # an array reshaped in place is another value
        self.size = (0 if snapshot is None else snapshot.nbytes) + wide.nbytes


_ENTRIES: dict[tuple[int, str], _Entry] = {}
_used = {"widened": 0, "derived": 0}


def _budget(pool: str) -> int:
    return CACHE_BYTES if pool == "widened" else DERIVED_BYTES


def _drop(key: tuple[int, str]) -> None:
    entry = _ENTRIES.pop(key, None)
    if entry is not None:
        _used[entry.pool] -= entry.size


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
    """:func:`const_as`'s kept widening of an fp16 ``value``, made and kept now if it fits in
    ``CACHE_BYTES``; ``None`` (nothing widened) for a value that is not kept or does not fit."""
    if type(value) is not np.ndarray or value.dtype != np.float16:
        return None
    size = value.size * np.dtype(dtype).itemsize
    return _kept(op, name, value, np.dtype(dtype).str, size, lambda v: v.astype(dtype), "widened")


def kept(op, name: str, value, kind: str, size: int, make: Callable[[np.ndarray], np.ndarray]) -> np.ndarray | None:
    """``make(value)`` (``size`` bytes; read-only) for input ``name`` of ``op``, a large contiguous
    array of a const (or a frozen array): the one made last time for this array and ``kind`` while
    the array's bytes are unchanged, else made now and kept if it fits in ``DERIVED_BYTES``. ``None``
    (nothing made) for a value that is not kept or does not fit."""
    return _kept(op, name, value, kind, size, make, "derived")


def _kept(op, name: str, value, kind: str, size: int, make, pool: str) -> np.ndarray | None:
    if type(value) is not np.ndarray or value.size < MIN_ELEMENTS:
        return None
    frozen = is_frozen(value)  # a decoded compressed weight is frozen too
    if not value.flags.c_contiguous or not (frozen or _is_const(op, name)):
        return None
    key = (id(value), kind)
    flat = value.reshape(-1)
    bits = flat.view(np.uint64) if value.nbytes % 8 == 0 else flat.view(f"u{value.itemsize}")
    entry = _ENTRIES.get(key)
    if entry is not None:
        if (
            entry.source() is value
            and entry.layout == (value.shape, value.dtype)
            and (
                (frozen and entry.snapshot is None)
                or (
                    entry.snapshot is not None
                    and entry.snapshot.dtype == bits.dtype
                    and entry.snapshot.shape == bits.shape
                    and np.array_equal(entry.snapshot, bits)
                )
            )
        ):
            return entry.wide
        _drop(key)
    if _used[pool] + size + (0 if frozen else value.nbytes) > _budget(pool):  # what is made, and a snapshot
        return None
    made = make(value)
    made.flags.writeable = False
    entry = _Entry(value, None if frozen else bits.copy(), made, pool, functools.partial(_dropped, key))
    _ENTRIES[key] = entry
    _used[pool] += entry.size
    return made

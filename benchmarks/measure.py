"""Timing and memory primitives: CPU time of this process, best of several samples; tracemalloc.

CPU time (``time.process_time``), not wall time: the benchmarks run on shared machines, where
wall time measures the neighbours. The best sample is the figure: noise only ever adds time.
Every sample starts with cold CPU caches (:func:`flush_caches`): a small program would otherwise
sit in the caches from being built, a large one cannot, and time would grow faster than the work.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import pstats
import time
import tracemalloc
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from coremltools.converters.mil.mil import Program

from mil_passes.reference import evaluate


def _flush_bytes() -> int:
    """Twice the last-level cache (Linux reports it), 512 MiB where unknown."""
    try:
        size = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        return 2 * int(size.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[size[-1]]
    except (OSError, ValueError, KeyError, IndexError):
        return 512 << 20


@functools.cache
def _flush_buffer() -> np.ndarray:
    return np.zeros(_flush_bytes(), np.uint8)


def flush_caches() -> None:
    """Write a buffer larger than the last-level cache, evicting whatever it held."""
    buffer = _flush_buffer()
    np.add(buffer, 1, out=buffer)


def cpu_time(fn: Callable[[], Any]) -> tuple[float, Any]:
    """``(seconds, result)`` of ``fn()``, from cold caches; garbage from before is collected
    first, not billed."""
    gc.collect()
    flush_caches()
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def call_count(fn: Callable[[], Any]) -> int:
    """Function calls (Python and built-in) ``fn()`` makes, as cProfile counts them: a measure of
    the work done that neither the CPU caches nor the neighbours on the machine change."""
    profile = cProfile.Profile()
    profile.runcall(fn)
    return pstats.Stats(profile).total_calls


class Samples:
    """Samples by key; ``best(key)`` is the smallest."""

    def __init__(self) -> None:
        self._samples: dict[Any, list[float]] = defaultdict(list)

    def add(self, key: Any, seconds: float) -> None:
        self._samples[key].append(seconds)

    def best(self, key: Any) -> float:
        if not self._samples.get(key):
            raise KeyError(f"no samples for {key!r}")
        return min(self._samples[key])

    def count(self, key: Any) -> int:
        return len(self._samples.get(key, ()))


@contextmanager
def traced() -> Iterator[Callable[[], tuple[int, int]]]:
    """Trace allocations; yields ``memory()`` → ``(current, peak)`` bytes since the start.

    ``reset_peak()`` is tracemalloc's; call it before the step whose peak you want.
    """
    gc.collect()
    tracemalloc.start()
    try:
        yield tracemalloc.get_traced_memory
    finally:
        tracemalloc.stop()


def traced_step(fn: Callable[[], Any]) -> tuple[int, int, Any]:
    """Inside :func:`traced`: ``(peak bytes above the start, bytes kept, result)`` of ``fn()``."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    result = fn()
    peak = tracemalloc.get_traced_memory()[1]
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    return peak - before, after - before, result


def interpreter_seconds(prog: Program, feeds: dict, repeats: int) -> float:
    """Best CPU seconds of ``mil_passes.reference.evaluate(prog, feeds)``."""
    samples = Samples()
    for _ in range(repeats):
        seconds, _ = cpu_time(lambda: evaluate(prog, feeds))
        samples.add("evaluate", seconds)
    return samples.best("evaluate")

"""Ctrl-C means stop: the command's SIGINT handler.

Python's own handler raises ``KeyboardInterrupt``, which any bare ``except:`` swallows —
coremltools has one around ``import scipy`` (``coremltools/_deps``), so an interrupt landing
there was lost and the command ran on. The handler here also records the interrupt
(:func:`~mil_passes.package.atomic.note_interrupt`); the record outlives a swallowed exception,
and the checkpoints (after each command's imports, at each progress step, in the atomic commit
right before its rename, and as the command returns) turn it back into exit status 130.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from ..package.atomic import forget_interrupts, note_interrupt


def _record_and_raise(signum, frame) -> None:
    note_interrupt()
    raise KeyboardInterrupt


def _record_only(signum, frame) -> None:
    note_interrupt()


@contextmanager
def interrupts_recorded() -> Iterator[None]:
    """While active, each SIGINT is recorded and raises ``KeyboardInterrupt``.

    Installed only over Python's default handler, on the main thread: a SIGINT that is ignored
    (a job started in the background by a script) stays ignored, and a caller's own handler
    stays in charge. The previous handler is back when the block ends.
    """
    forget_interrupts()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    previous = signal.signal(signal.SIGINT, _record_and_raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_raising() -> None:
    """From now on an interrupt is only recorded (the command is already on its way out)."""
    if signal.getsignal(signal.SIGINT) is _record_and_raise:
        signal.signal(signal.SIGINT, _record_only)

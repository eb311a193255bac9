"""Ctrl-C means stop: the command's SIGINT handler.

Python's own handler raises ``KeyboardInterrupt``, which any bare ``except:`` swallows —
coremltools has one around ``import scipy`` (``coremltools/_deps``), so an interrupt landing
there was lost and the command ran on. The handler here also records the interrupt
(:mod:`mil_passes._sigint_record`); the record outlives a swallowed exception, and the
checkpoints (after each command's imports, at each progress step, in the atomic commit right
before its rename, and as the command returns) turn it back into exit status 130. In the
command's own process the handler is in place from the start of ``import mil_passes``, so an
interrupt during the imports is recorded too.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from .._sigint_record import forget_interrupts, note_interrupt, record_and_raise, take_over_start_handler


def _record_only(signum, frame) -> None:
    note_interrupt()


@contextmanager
def interrupts_recorded() -> Iterator[None]:
    """While active, each SIGINT is recorded and raises ``KeyboardInterrupt``.

    Installed only over Python's default handler, on the main thread: a SIGINT that is ignored
    (a job started in the background by a script) stays ignored, and a caller's own handler
    stays in charge. The handler the command installed as it started is taken over with what it
    recorded (an interrupt during the imports). Python's default handler is back when the block ends.
    """
    previous: signal.Handlers | int | Callable | None
    if take_over_start_handler():
        previous = signal.default_int_handler
    else:
        forget_interrupts()
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            yield
            return
        previous = signal.signal(signal.SIGINT, record_and_raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_raising() -> None:
    """From now on an interrupt is only recorded (the command is already on its way out)."""
    if signal.getsignal(signal.SIGINT) is record_and_raise:
        signal.signal(signal.SIGINT, _record_only)

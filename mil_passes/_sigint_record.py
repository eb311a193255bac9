"""The record of SIGINTs the ``mil-passes`` command has seen, and its handler from the first moment.

Python's own SIGINT handler raises ``KeyboardInterrupt``, which is lost wherever something swallows
it: a bare ``except:`` (coremltools has one around ``import scipy``), or a callback whose exceptions
Python only prints ("Exception ignored in: <function _get_module_lock.<locals>.cb>", importlib's
module-lock cleanup, which runs throughout the imports). :func:`record_and_raise` counts each
interrupt before raising, so checkpoints find it afterwards.

The command installs that handler while ``import mil_passes`` starts
(:func:`install_if_command`), before anything else is imported; the command's ``main`` takes it
over with the record it holds. Only in the command's own process: a program that merely imports
the package keeps its handler. Standard library only, and imports nothing but built-ins.
"""

from __future__ import annotations

import signal
import sys

COMMAND = "mil-passes"
COMMAND_MODULES = ("mil_passes.cli", "mil_passes.cli.__main__")

_count = [0]  # how many SIGINTs were recorded (a list: no global statement)
_installed_at_start = [False]  # the handler was installed as the command started, not yet taken over


def note_interrupt() -> None:
    """Record a SIGINT."""
    _count[0] += 1


def interrupted() -> bool:
    """Whether an interrupt was recorded (since the last :func:`forget_interrupts`)."""
    return _count[0] > 0


def forget_interrupts() -> None:
    """Clear the record."""
    _count[0] = 0


def record_and_raise(signum, frame) -> None:
    """The SIGINT handler: record the interrupt, then raise ``KeyboardInterrupt`` as Python would."""
    note_interrupt()
    raise KeyboardInterrupt


def is_command_process(orig_argv: list[str], argv0: str) -> bool:
    """Whether this process was started as the command: the ``mil-passes`` script, or
    ``python -m mil_passes.cli``."""
    if argv0.replace("\\", "/").rsplit("/", 1)[-1] in (COMMAND, f"{COMMAND}.exe", f"{COMMAND}-script.py"):
        return True
    return _module_run(orig_argv) in COMMAND_MODULES


def _module_run(orig_argv: list[str]) -> str | None:
    """The module of ``python [options] -m MODULE ...``; None for a script, ``-c`` or stdin."""
    args = iter(orig_argv[1:])
    for arg in args:
        if arg.startswith("-m"):
            return arg[2:] or next(args, None)
        if arg in ("-X", "-W", "--check-hash-based-pycs"):
            next(args, None)  # the option's value
        elif arg == "-" or not arg.startswith("-") or arg.startswith("-c"):
            return None
    return None


def install_if_command() -> None:
    """In the command's process, on the main thread, over Python's default handler only: install
    :func:`record_and_raise` now. A SIGINT ignored by whoever started the command stays ignored."""
    if not is_command_process(list(getattr(sys, "orig_argv", [])), sys.argv[0] if sys.argv else ""):
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, record_and_raise)
            _installed_at_start[0] = True
    except ValueError:  # not the main thread (an embedding interpreter): leave it to Python
        return


def take_over_start_handler() -> bool:
    """For the command's ``main``: whether the handler installed at start is still in place (then
    it is ``main``'s, with what it recorded so far); True once only."""
    if _installed_at_start[0] and signal.getsignal(signal.SIGINT) is record_and_raise:
        _installed_at_start[0] = False
        return True
    return False

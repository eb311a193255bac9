"""The progress bar of a command's steps, shown only to a person watching."""

from __future__ import annotations

import sys
from typing import TextIO

from ..package.atomic import raise_if_interrupted


def progress_enabled(quiet: bool, stream: TextIO | None = None) -> bool:
    """A progress bar only for a person watching: not with ``--quiet``, not when stdout is piped."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and callable(isatty) and bool(isatty())


class Progress:
    """A tqdm bar on stderr advanced by ``step(label)`` as each step starts."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, disable=not enabled, file=sys.stderr, leave=False, unit="step")
        self.started = False

    def __call__(self, label: str) -> None:
        raise_if_interrupted()  # a checkpoint at every step
        if self.started:
            self.bar.update(1)
        self.started = True
        self.bar.set_description(label)

    def close(self) -> None:
        self.bar.close()

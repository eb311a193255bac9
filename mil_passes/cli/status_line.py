"""One line on stderr that says what a long command runs now, rewritten in place.

``verify`` of a large model can run for minutes between two rows of its table; the line names the
pass being checked, and the feed and step being evaluated. It is drawn only for a person watching
(:func:`~mil_passes.cli.progress.progress_enabled`), cut to the terminal's width, and cleared before
the command prints anything else to the terminal.
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

from ..package.atomic import raise_if_interrupted
from ..package.untrusted import shown

CLEAR = "\r\x1b[K"  # back to the line's start, erase to its end


class StatusLine:
    """``show(text)`` replaces the line's text; ``clear()`` erases it."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = sys.stderr if stream is None else stream
        self.drawn = False

    def show(self, text: str) -> None:
        raise_if_interrupted()  # a checkpoint at every pass, feed and step
        if not self.enabled:
            return
        width = shutil.get_terminal_size(fallback=(80, 24)).columns
        self.stream.write(CLEAR + shown(text, max(width - 1, 10)))
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.drawn = False

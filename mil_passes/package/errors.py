"""The errors a user can cause by the models and paths they give: one line each, naming the path.

Kept apart from the modules that raise them (no import of coremltools here), so the atomic writer
and the command line can use them before coremltools is loaded.
"""

from __future__ import annotations


class PackageError(Exception):
    """A model that cannot be read or written safely; the message is one line naming the path."""


class CannotWrite(PackageError):
    """The operating system refused to write a package: ``cannot write OUT: <the OS reason>``."""

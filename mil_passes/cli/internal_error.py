"""The command's last resort: an exception that is not a user's mistake is mil-passes' bug.

The user sees one line, ``mil-passes: internal error in mil-passes, please report: <error>;
traceback in <file>``, never the traceback itself, which goes to a new file in the system's
temporary folder so that the report can carry it.
"""

from __future__ import annotations

import os
import tempfile
import traceback

from .._version import __version__
from ..package.untrusted import shown


def internal_error_line(error: BaseException) -> str:
    """The one line for ``error``, after writing its traceback to a file the line names."""
    what = shown(" ".join(f"{type(error).__name__}: {error}".split()), 160)  # the path is never cut
    try:
        handle, path = tempfile.mkstemp(prefix="mil-passes-traceback-", suffix=".txt")
        with os.fdopen(handle, "w", encoding="utf-8", errors="backslashreplace") as file:
            file.write(f"mil-passes {__version__}\n")
            file.write("".join(traceback.format_exception(error)))
        where = f"traceback in {path}"
    except OSError as refused:
        where = f"no traceback file ({refused.strerror or refused})"
    return f"mil-passes: internal error in mil-passes, please report: {what}; {where}"

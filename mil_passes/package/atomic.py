"""Writing a package whole or not at all: the one write-then-rename every writer uses."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a path beside ``path`` to write to; when the block succeeds, what was written there
    replaces ``path``. On any error (an interrupt included) ``path`` is as it was: a package
    already there is moved aside only for the final rename, and put back if that rename does
    not happen. Both live in one folder, so the renames are atomic."""
    path = Path(path)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    aside = staging / f"replaced-{path.name}"
    try:
        written = staging / path.name
        yield written
        if not (written.exists() or written.is_symlink()):
            raise FileNotFoundError(f"{written}: nothing was written")
        if path.exists() or path.is_symlink():
            os.replace(path, aside)
        os.replace(written, path)
    finally:
        if (aside.exists() or aside.is_symlink()) and not (path.exists() or path.is_symlink()):
            os.replace(aside, path)  # the rename did not happen: the old package stays
        shutil.rmtree(staging, ignore_errors=True)

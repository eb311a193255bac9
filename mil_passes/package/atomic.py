"""Writing a package whole or not at all: the one write-then-rename every writer uses.

- **Staging beside the target.** A package is written in a folder next to it, named
  ``.<name>.mil-passes-<pid>-<random>.partial``, then renamed into place (one folder, so the
  renames are atomic); nothing goes to the system's temporary folder. A run killed before it
  cleans up (SIGKILL, power loss) leaves its staging folder; the next write into that folder
  removes the staging folders of this naming whose process is gone, after putting back a
  package a killed commit had moved aside.
- **Interrupts.** The command's SIGINT handler records each interrupt
  (:mod:`mil_passes._sigint_record`) before it raises ``KeyboardInterrupt``, so an interrupt a
  library swallowed (coremltools imports scipy inside a bare ``except:``) is still known. The
  commit checks the record with SIGINT held back, right before its renames, and raises
  ``KeyboardInterrupt`` instead of writing; SIGINT stays held during the renames, so the target
  is always the old package or the whole new one.
- **Errors in the user's terms.** What the operating system refuses (no space, read-only,
  permission, quota) becomes :class:`~mil_passes.package.errors.CannotWrite`,
  ``cannot write OUT: No space left on device``: the path the user gave and the OS's reason,
  never a staging path.

Standard library only: the command imports this before coremltools.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .._sigint_record import interrupted
from .errors import CannotWrite

STAGING_NAME = re.compile(r"^\.(?P<target>.+)\.mil-passes-(?P<pid>[0-9]+)-[a-z0-9_]+\.partial$")
ASIDE_PREFIX = "replaced-"
SCRATCH_NAME = re.compile(r"^mil-passes-(?P<job>[a-z]+)-(?P<pid>[0-9]+)-[a-z0-9_]+$")
PROBE_BYTES = 1 << 20  # what a write probe asks of a file system that refused a write

_committed: list[Path] = []  # every path a commit of this process has replaced, in order
_staging: dict[Path, Path] = {}  # this process's staging folders not yet removed, to their targets


def committed() -> list[Path]:
    """The paths this process has written (each commit's target, in order)."""
    return list(_committed)


def raise_if_interrupted() -> None:
    """A checkpoint: raise ``KeyboardInterrupt`` if an interrupt was recorded, even one that
    something caught and ignored."""
    if interrupted():
        raise KeyboardInterrupt


@contextmanager
def sigint_held() -> Iterator[None]:
    """Hold SIGINT back in the block (it is delivered when the block ends); a no-op off the
    main thread or where signal masks do not exist."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _sigint_pending() -> bool:
    return hasattr(signal, "sigpending") and signal.SIGINT in signal.sigpending()


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """Yield a path beside ``path`` to write to; when the block succeeds, what was written there
    replaces ``path``. On any error, or an interrupt recorded at any time before the commit,
    ``path`` is as it was. An ``OSError`` raised in the block, in staging or in the commit
    becomes :class:`CannotWrite` naming ``path``."""
    path = Path(path)
    remove_stale_staging(path.parent)
    staging: Path | None = None
    try:
        try:
            with sigint_held():  # an interrupt cannot fall between making the folder and knowing it
                staging = Path(
                    tempfile.mkdtemp(
                        prefix=f".{path.name}.mil-passes-{os.getpid()}-", suffix=".partial", dir=path.parent
                    )
                )
                _staging[staging] = path
        except OSError as error:
            raise cannot_write(path, error) from None
        written = staging / path.name
        try:
            yield written
        except OSError as error:
            raise cannot_write(path, error) from None
        if not (written.exists() or written.is_symlink()):
            raise FileNotFoundError(f"{path}: nothing was written")
        try:
            _commit(written, path, staging / f"{ASIDE_PREFIX}{path.name}")
        except OSError as error:
            raise cannot_write(path, error) from None
    finally:
        if staging is not None:
            with sigint_held():
                shutil.rmtree(staging, ignore_errors=True)
                _staging.pop(staging, None)


def remove_own_staging() -> None:
    """Remove the staging folders this process left (an interrupt can land in ``replacing``'s
    cleanup before it holds SIGINT back), putting back a package a commit had moved aside; the
    command calls this as it ends on an interrupt, once interrupts no longer raise."""
    for staging, target in list(_staging.items()):
        try:
            _clear_staging(staging, target)
        except OSError:
            continue
        _staging.pop(staging, None)


def _clear_staging(staging: Path, target: Path) -> None:
    """Remove ``staging``, first moving back to ``target`` the package moved aside in it if
    ``target`` is missing (a commit stopped between its two renames)."""
    aside = staging / f"{ASIDE_PREFIX}{target.name}"
    with sigint_held():
        if aside.is_dir() and not (target.exists() or target.is_symlink()):
            os.replace(aside, target)
        if staging.exists():
            shutil.rmtree(staging)


def _commit(written: Path, path: Path, aside: Path) -> None:
    """Rename ``written`` to ``path``, the old package moved aside first; SIGINT held back, so
    ``path`` is never missing when this returns or raises."""
    with sigint_held():
        if interrupted() or _sigint_pending():
            raise KeyboardInterrupt
        moved_aside = path.exists() or path.is_symlink()
        if moved_aside:
            os.replace(path, aside)
        try:
            os.replace(written, path)
        except BaseException:
            if moved_aside:
                os.replace(aside, path)  # the old package stays
            raise
        _committed.append(path)


def remove_stale_staging(folder: str | Path) -> list[Path]:
    """Remove the staging folders a killed run left in ``folder`` and return them: only folders
    of this module's naming, only when the process id in the name is no running process. A
    package the killed run had moved aside, with nothing now at its place, is put back first."""
    folder = Path(folder)
    removed = []
    for entry, match in _left_by_dead_processes(folder, STAGING_NAME):
        staging, target = Path(entry.path), folder / match["target"]
        try:
            _clear_staging(staging, target)
        except OSError:
            continue  # a folder this run cannot change; the error that matters comes later
        removed.append(staging)
    return removed


@contextmanager
def scratch_folder(job: str) -> Iterator[Path]:
    """A folder in the system temp dir for ``job`` (lowercase letters), removed after the block.
    Its name holds this process's id, so a later run removes it if a kill left it behind."""
    remove_stale_scratch(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix=f"mil-passes-{job}-{os.getpid()}-") as folder:
        yield Path(folder)


def remove_stale_scratch(folder: str | Path) -> list[Path]:
    """Remove the scratch folders (:func:`scratch_folder`) of processes no longer running."""
    removed = []
    for entry, _ in _left_by_dead_processes(Path(folder), SCRATCH_NAME):
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _left_by_dead_processes(folder: Path, naming: re.Pattern) -> list[tuple[os.DirEntry, re.Match]]:
    """The folders in ``folder`` named by ``naming`` (a ``pid`` group) whose process is no running
    process; none off POSIX, where there is no safe way here to tell that a process is gone."""
    if os.name != "posix":
        return []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    left = []
    for entry in entries:
        match = naming.match(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match["pid"])
        if pid != os.getpid() and not _running(pid):
            left.append((entry, match))
    return left


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: a process someone else owns
        return True
    return True


def cannot_write(path: Path, error: OSError) -> CannotWrite:
    """``cannot write PATH: <the OS's reason>`` for an ``OSError`` met while writing ``path``."""
    return CannotWrite(f"cannot write {path}: {os_reason(error)}")


def os_reason(error: OSError) -> str:
    """The operating system's words for ``error`` (``No space left on device``), without paths."""
    if error.errno:
        return os.strerror(error.errno)
    found = re.search(r"\[Errno (\d+)\]", str(error))  # shutil.Error: a list of (src, dst, reason)
    if found:
        return os.strerror(int(found.group(1)))
    return "the operating system refused the write"


def probe_refusal(folder: str | Path) -> OSError | None:
    """Ask the file system holding ``folder`` to store :data:`PROBE_BYTES` in a new file there;
    the ``OSError`` it answers with (``ENOSPC``, ``EDQUOT``, ``EROFS``, ``EACCES``), or None.

    Some writers (coremltools' weight writer, in C++) fail without saying why; this recovers the
    reason the OS gives. The probe file is removed."""
    folder = Path(folder)
    probe = folder / f".mil-passes-probe-{os.getpid()}"
    try:
        with open(probe, "wb") as handle:
            chunk = bytes(1 << 16)
            for _ in range(PROBE_BYTES // len(chunk)):
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        return error if error.errno not in (None, errno.ENOENT) else None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return None

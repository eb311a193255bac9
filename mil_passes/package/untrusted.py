"""Strings and JSON from a package, checked before anything uses them, and shown safely.

A package is any bytes on disk. A string from it that becomes a path (a manifest entry's
``path``, a weight file's name) is refused when it holds a NUL byte (the OS cannot take it), a
lone surrogate (no file name can be it), a control character, more than ``MAX_PATH_CHARS``
characters, more than ``MAX_PATH_PARTS`` levels or a level longer than a file name can be.
``Manifest.json`` is refused when it nests deeper than ``MAX_JSON_DEPTH`` (Python's parser
recurses per level) or holds an integer longer than ``MAX_INT_DIGITS`` digits. :func:`shown`
writes any such string into an error message as one printable line, its middle cut out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .errors import PackageError

MAX_PATH_CHARS = 1024  # macOS's PATH_MAX
MAX_PATH_PARTS = 64
MAX_NAME_BYTES = 255  # one level of a path: APFS's and ext4's limit
MAX_JSON_DEPTH = 32  # Manifest.json as coremltools writes it nests 3 deep
MAX_INT_DIGITS = 20  # int64; Python's own limit (4,300 digits) is far past any manifest's
SHOWN_CHARS = 60

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def shown(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` as one printable line of at most ``limit`` characters: control characters,
    NUL and lone surrogates escaped (``\\x00``, ``\\ud800``), the middle cut out (``…``)."""
    if len(text) <= limit:
        whole = printable(text)
        if len(whole) <= limit:
            return whole
    keep = max(1, (limit - 1) // 2)
    return f"{printable(text[:keep])[:keep]}…{printable(text[-keep:])[-keep:]}"


def printable(text: str) -> str:
    """``text`` with each character that is not printable escaped (``\x1b``, ``\n``, ``\ud800``)."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def one_line(message: str, limit: int = 300) -> str:
    """``message`` as one line of at most ``limit`` characters (the middle cut out), for the
    last line a command prints about a failure."""
    return shown(" ".join(message.split()), limit)


def path_problem_of(text: str) -> str | None:
    """Why ``text`` cannot be a path inside a package, or None."""
    if "\x00" in text:
        return "holds a NUL byte"
    if _LONE_SURROGATE.search(text):
        return "holds a lone surrogate (not a UTF-8 name)"
    control = _CONTROL.search(text)
    if control:
        return f"holds the control character {ascii(control.group())[1:-1]}"
    if len(text) > MAX_PATH_CHARS:
        return f"is {len(text):,} characters long (at most {MAX_PATH_CHARS:,})"
    parts = text.split("/")
    if len(parts) > MAX_PATH_PARTS:
        return f"has {len(parts):,} levels (at most {MAX_PATH_PARTS})"
    longest = max(len(part.encode()) for part in parts)
    if longest > MAX_NAME_BYTES:
        return f"has a name of {longest:,} bytes (at most {MAX_NAME_BYTES})"
    return None


def check_path_string(package: Path, text: str, what: str) -> str:
    """``text`` (``what``: where the package says it) if it can be a path; else PackageError."""
    problem = path_problem_of(text)
    if problem is not None:
        raise PackageError(f"{package}: {what} '{shown(text)}' {problem}; refusing to follow it")
    return text


def load_json(package: Path, data: bytes, what: str) -> Any:
    """``data`` parsed as JSON after its nesting depth is checked; integers longer than
    ``MAX_INT_DIGITS`` are refused. Every problem is a one-line PackageError naming ``what``."""
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise PackageError(f"{package}: {what} nests {depth:,} levels deep (at most {MAX_JSON_DEPTH})")
    try:
        return json.loads(data, parse_int=_bounded_int)
    except _LongInteger as error:
        digits = f"{error.digits:,} digits (at most {MAX_INT_DIGITS})"
        raise PackageError(f"{package}: {what} holds an integer of {digits}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise PackageError(f"{package}: {what} is not valid JSON ({shown(str(error), 120)})") from None


def json_depth(data: bytes) -> int:
    """How deep the arrays and objects of ``data`` nest (brackets inside strings not counted)."""
    import numpy as np  # here: the command imports this module before it needs numpy

    outside = np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)
    steps = np.isin(outside, (ord("["), ord("{"))).astype(np.int64) - np.isin(outside, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


class _LongInteger(ValueError):
    def __init__(self, digits: int):
        super().__init__(f"an integer of {digits} digits")
        self.digits = digits


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _LongInteger(digits)
    return int(text)

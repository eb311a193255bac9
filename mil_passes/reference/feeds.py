"""Feeds for a program's inputs (not its states): random ones (dims sized, floats normal, ints small,
bools both ways; with ``fit``, within the domains the program shows: :mod:`.domains`), and the
user's own read from ``.npz`` files and fitted to the program's inputs."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Mapping

import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from .domains import Domain, input_domains
from .interpreter import numpy_dtype

DEFAULT_SIZE_CHOICES = (1, 2, 3, 5)


def random_inputs(
    prog: Program,
    seed: int = 0,
    sizes: Mapping[str, int] | int | None = None,
    function: str = "main",
    int_range: tuple[int, int] | None = None,
    fit: bool = False,
) -> dict[str, np.ndarray]:
    """Feeds for ``prog``'s inputs.

    Symbolic dims get ``sizes[name]`` (or ``sizes`` itself when an int, else a size drawn from
    1, 2, 3, 5 per symbol); floats are standard normal, ints a small signed range (unsigned:
    0..9; ``int_range`` ``(low, high)`` inclusive when given), bools both values. With ``fit``,
    an input the program shows a domain for (:func:`~.domains.input_domains`) is drawn within it:
    an index from 0 to its table's rows, a mask from {0, 1} with the first position of each row
    1 (a row that hides every position has no softmax to take).
    """
    rng = np.random.default_rng(seed)
    func = prog.functions[function]
    domains = input_domains(prog, function) if fit else {}
    chosen: dict[str, int] = {}

    def size_of(dim) -> int:
        if not is_symbolic(dim):
            return int(dim)
        key = str(dim)
        if key not in chosen:
            if isinstance(sizes, int):
                chosen[key] = sizes
            elif sizes is not None and key in sizes:
                chosen[key] = int(sizes[key])
            else:
                chosen[key] = int(rng.choice(DEFAULT_SIZE_CHOICES))
        return chosen[key]

    feeds = {}
    for name, var in func.inputs.items():
        if types.is_state(var.sym_type):  # not a feed: states start at zero (reference.state)
            continue
        shape = tuple(size_of(d) for d in var.shape) if types.is_tensor(var.sym_type) else ()
        dtype = numpy_dtype(var)
        if name in domains:
            feeds[name] = _within(rng, domains[name], dtype, shape)
        elif int_range is not None and np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(int_range[0], int_range[1] + 1, size=shape).astype(dtype)
        else:
            feeds[name] = random_array(rng, dtype, shape)
    return feeds


def _within(rng: np.random.Generator, domain: Domain, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    values = rng.integers(domain.low, domain.high, size=shape)
    if domain.mask and values.ndim:
        values[..., 0] = 1
    return values.astype(dtype)


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``dtype`` that exercise signs, zeros and both booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=shape).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.integers(-5, 6, size=shape).astype(dtype)


class FeedError(ValueError):
    """A feed of one's own that the program cannot take (one line naming the file and input)."""


def read_feed_files(path: str | Path) -> list[tuple[str, dict[str, np.ndarray]]]:
    """``(label, feed)`` of ``path``: an ``.npz`` file (one feed: its arrays, named as the inputs)
    or a folder (each ``.npz`` in it, by name). Raises :class:`FeedError`."""
    path = Path(path)
    if path.is_dir():
        files = sorted(child for child in path.iterdir() if child.suffix == ".npz" and child.is_file())
        if not files:
            raise FeedError(f"{path}: a folder without .npz files; each .npz is one feed")
    elif path.is_file():
        files = [path]
    else:
        raise FeedError(f"{path}: no such file or folder of feeds (.npz)")
    return [(str(file), _read_npz(file)) for file in files]


def _read_npz(file: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {name: np.asarray(archive[name]) for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise FeedError(f"{file}: not a numpy .npz file of arrays ({' '.join(str(error).split())})") from None


def fitted_feed(
    prog: Program,
    feed: Mapping[str, np.ndarray],
    label: str,
    function: str = "main",
    defaults: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """``feed`` as ``prog``'s ``function`` takes it: each input (not the states) present (an
    optional one left out gets its value from ``defaults``: :mod:`.optional_inputs`), of its rank
    and static dims, cast to its dtype (integers only to integers that hold them), within the
    domain the program shows (:mod:`.domains`). Raises :class:`FeedError` naming ``label`` and the input."""
    feed = {**(defaults or {}), **feed}
    func = prog.functions[function]
    wanted = {name: var for name, var in func.inputs.items() if not types.is_state(var.sym_type)}
    unknown = sorted(set(feed) - set(wanted))
    if unknown:
        raise FeedError(f"{label}: '{unknown[0]}' is not an input of the model (its inputs: {', '.join(wanted)})")
    domains = input_domains(prog, function)
    fitted = {}
    for name, var in wanted.items():
        if name not in feed:
            raise FeedError(f"{label}: input '{name}' is missing (its inputs: {', '.join(wanted)})")
        fitted[name] = _fitted_array(label, name, var, np.asarray(feed[name]), domains.get(name))
    return fitted


def _fitted_array(label: str, name: str, var, value: np.ndarray, domain: Domain | None) -> np.ndarray:
    shape = tuple(var.shape) if types.is_tensor(var.sym_type) else ()
    said = f"{label}: input '{name}'"
    if value.ndim != len(shape) or any(not is_symbolic(d) and int(d) != n for d, n in zip(shape, value.shape)):
        want = "[" + ", ".join(str(d) for d in shape) + "]"
        raise FeedError(f"{said} has shape {list(value.shape)}; the model takes {want}")
    dtype = np.dtype(numpy_dtype(var))
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        if value.dtype.kind == "f" and not np.all(np.isfinite(value) & (value == np.round(value))):
            raise FeedError(f"{said} holds fractions; the model takes {dtype.name}")
        if value.size and dtype != np.bool_:
            info = np.iinfo(dtype)
            if value.min() < info.min or value.max() > info.max:
                raise FeedError(f"{said} holds values past {dtype.name}'s range [{info.min}, {info.max}]")
    if domain is not None:
        outside = domain.outside(value)
        if outside.size:
            shown = ", ".join(str(v) for v in outside[:3].tolist()) + (", …" if outside.size > 3 else "")
            raise FeedError(f"{said} {domain.describe()}; the feed holds {shown}")
    return value.astype(dtype)

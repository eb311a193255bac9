"""``[tool.mil-passes]`` in ``pyproject.toml``: found as ruff finds its own, checked key by key.

The table that applies to an input is the one in the nearest ``pyproject.toml`` above it that has
a ``[tool.mil-passes]`` table (or the file ``--config`` names, for every input). Every mistake is a
:class:`ConfigError`: one line naming the file, the key and the values it takes.

::

    [tool.mil-passes]
    select = ["ane-", "duplicate-name"]      # rule ids or prefixes (default: every rule)
    extend-select = ["slice-of-concat"]      # added to select
    ignore = ["ane-fp32-compute"]            # taken out
    compute-units = "cpu_and_gpu"            # cpu_and_ne | all | cpu_only | cpu_and_gpu
    chip = "M1"                              # one chip's Neural Engine rules
    output-format = "text"                   # text | json | github | sarif
    passes = ["concat_slice_to_slice_concat"]   # optimize: the passes to run
    pipeline = "default"                     # verify: the pipeline to check

    [tool.mil-passes.severity]               # per-rule severity
    ane-last-axis-padding = "warning"
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .choices import COMPUTE_UNITS, OUTPUT_FORMATS

TABLE = "tool.mil-passes"
SEVERITY_VALUES = ("error", "warning", "info")
_RULE_LISTS = ("select", "extend-select", "ignore")
KEYS = (*_RULE_LISTS, "severity", "compute-units", "chip", "output-format", "passes", "pipeline")


class ConfigError(ValueError):
    """A configuration (or a flag that selects rules) the command cannot use: one line."""


@dataclass(frozen=True)
class Config:
    """The ``[tool.mil-passes]`` table of ``path`` (``None``: no file), its keys checked."""

    path: Path | None = None
    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity: dict[str, str] = field(default_factory=dict)
    compute_units: str | None = None
    chip: str | None = None
    output_format: str | None = None
    passes: tuple[str, ...] | None = None
    pipeline: str | None = None

    def where(self, key: str) -> str:
        """``pyproject.toml: [tool.mil-passes] key``: how an error names the key."""
        return f"{self.path}: [{TABLE}] {key}"


NO_CONFIG = Config()


def known(values: tuple[str, ...] | list[str]) -> str:
    return f"(known: {', '.join(values)})"


def choice(value: Any, values: tuple[str, ...], where: str) -> str:
    """``value`` in lower case if it is one of ``values``; else :class:`ConfigError` naming them."""
    if isinstance(value, str) and value.strip().lower() in values:
        return value.strip().lower()
    raise ConfigError(f"{where}: unknown value {value!r} {known(values)}")


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(item.strip() for item in value if item.strip())


def read_table(path: Path) -> dict[str, Any] | None:
    """The ``[tool.mil-passes]`` table of the TOML file ``path``, or None when it has none."""
    if sys.version_info >= (3, 11):  # imported here: the command's start-up does not read TOML
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text") from None
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror or error}") from None
    table = document.get("tool", {}).get("mil-passes")
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [{TABLE}] must be a table, got {table!r}")
    return table


def parse(path: Path, table: dict[str, Any]) -> Config:
    """The checked :class:`Config` of ``table`` (read from ``path``)."""
    config = Config(path)
    values: dict[str, Any] = {}
    for key, value in table.items():
        where = config.where(key)
        if key not in KEYS:
            raise ConfigError(f"{path}: unknown key '{key}' in [{TABLE}] {known(KEYS)}")
        if key in _RULE_LISTS:
            values[key.replace("-", "_")] = _strings(value, where)
        elif key == "severity":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: expected a table of rule = severity, got {value!r}")
            values["severity"] = {
                rule: choice(level, SEVERITY_VALUES, f"{where}.{rule}") for rule, level in value.items()
            }
        elif key == "compute-units":
            values["compute_units"] = choice(value, COMPUTE_UNITS, where)
        elif key == "output-format":
            values["output_format"] = choice(value, OUTPUT_FORMATS, where)
        elif key == "passes":
            values["passes"] = _strings(value, where)
        elif not isinstance(value, str):  # chip, pipeline
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        else:
            values[key] = value
    return Config(path, **values)


def load(path: str | Path) -> Config:
    """The configuration in the file ``path`` (``--config``); it must hold ``[tool.mil-passes]``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: --config: no such file")
    table = read_table(path)
    if table is None:
        raise ConfigError(f"{path}: --config: the file has no [{TABLE}] table")
    return parse(path, table)


class Finder:
    """The configuration of each input: the nearest ``pyproject.toml`` above it with a
    ``[tool.mil-passes]`` table; each folder looked at once per run."""

    def __init__(self) -> None:
        self._of_folder: dict[Path, Config] = {}

    def for_input(self, path: str | Path) -> Config:
        start = Path(path).absolute()
        return self._of(start if start.is_dir() else start.parent)

    def _of(self, folder: Path) -> Config:
        found = self._of_folder.get(folder)
        if found is None:
            candidate = folder / "pyproject.toml"
            table = read_table(candidate) if candidate.is_file() else None
            if table is not None:
                found = parse(candidate, table)
            else:
                found = NO_CONFIG if folder.parent == folder else self._of(folder.parent)
            self._of_folder[folder] = found
        return found

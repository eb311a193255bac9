"""What one input is run with: its configuration file's values with the command line's over them."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ..lint.chips import UnknownChip, family_of
from .config import NO_CONFIG, Config, ConfigError, Finder, load
from .selection import Selection, selection


@dataclass(frozen=True)
class Settings:
    """The rule selection, chip, output format, passes and pipeline for one input, and the
    configuration file they came from (None: none)."""

    selection: Selection
    chip: str | None
    output_format: str
    passes: tuple[str, ...] | None
    pipeline: str | None
    config: Path | None

    def describe(self) -> str:
        """One line for ``--verbose``."""
        where = f"configuration {self.config}" if self.config else "no configuration file"
        chip = f", chip {self.chip}" if self.chip else ""
        return f"{where}; compute units {self.selection.compute_units}{chip}"


def flag_list(args: argparse.Namespace, name: str) -> list[str] | None:
    """The repeated flag ``name`` of ``args``, each value possibly a comma list, as one list (None:
    not given, or not an option of the command)."""
    values = getattr(args, name, None)
    if values is None:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def settings_of(args: argparse.Namespace, config: Config) -> Settings:
    """``config`` with the flags in ``args`` over it; :class:`ConfigError` for an unknown rule."""
    chosen = selection(
        config,
        select=flag_list(args, "select"),
        extend_select=flag_list(args, "extend_select") or (),
        ignore=flag_list(args, "ignore") or (),
        compute_units=getattr(args, "compute_units", None),
    )
    passes = flag_list(args, "passes")
    if config.chip is not None:
        try:
            family_of(config.chip)
        except UnknownChip as error:
            raise ConfigError(f"{config.where('chip')}: {error}") from None
    return Settings(
        chosen,
        getattr(args, "chip", None) or config.chip,
        getattr(args, "output_format", None) or config.output_format or "text",
        tuple(passes) if passes is not None else config.passes,
        getattr(args, "pipeline", None) or config.pipeline,
        config.path,
    )


def settings_for_inputs(args: argparse.Namespace, inputs: list[Path]) -> list[Settings]:
    """The settings of each input, all checked before any input is read (a bad file stops the
    run before any output)."""
    explicit = getattr(args, "config", None)
    if explicit is not None:
        every = settings_of(args, load(explicit))
        return [every] * len(inputs)
    finder = Finder()
    made: dict[int, Settings] = {}  # by the identity of a file's Config: each file checked once
    result = []
    for path in inputs:
        config = finder.for_input(path)
        if id(config) not in made:
            made[id(config)] = settings_of(args, config)
        result.append(made[id(config)])
    return result or [settings_of(args, NO_CONFIG)]

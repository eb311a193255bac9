"""Neural Engine generations, and the chip names users know them by.

The Neural Engine's compiler targets one family per generation (H13 in the M1 and A14, …).
Limits differ between families, so a rule may hold on some and not others. ``--chip M1`` narrows
lint to one family; by default every family from the A14 / M1 up is checked. Which chip has
which family: ane-guide's silicon table (sbryngelson/ane-guide, part 9, "The 28 targets") for the
M-series, reverse-engineering tools and apple/coreai-torch#66 ("AOT-compiled for h18p" on an
iPhone 17 Pro) for the A-series (docs/neural-engine.md, "Chips").
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Family:
    """One Neural Engine generation: ``H13``… and the chips that carry it."""

    number: int
    chips: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"H{self.number}"

    @property
    def label(self) -> str:
        """``M1/A14``: the chips users name."""
        return "/".join(self.chips)


FAMILIES: tuple[Family, ...] = (
    Family(13, ("M1", "A14")),
    Family(14, ("M2", "A15")),
    Family(15, ("M3", "A16")),
    Family(16, ("M4", "A17 Pro")),
    Family(17, ("M5", "A18")),
    Family(18, ("A19",)),
)
ALL: frozenset[int] = frozenset(f.number for f in FAMILIES)
_BY_NUMBER = {f.number: f for f in FAMILIES}
# Variants of a chip share its family: "M2 Max", "A18 Pro", "m3pro".
_VARIANT = re.compile(r"\s*(pro|max|ultra|bionic)\s*$", re.I)


class UnknownChip(ValueError):
    """A ``--chip`` name that names no known chip."""


def family_of(chip: str) -> Family:
    """The family of ``chip`` (``"M1"``, ``"m4 max"``, ``"A17 Pro"``, ``"H16"``); raises
    :class:`UnknownChip` with the known names."""
    text = chip.strip().upper().replace("-", " ")
    if re.fullmatch(r"H\d+", text) and int(text[1:]) in _BY_NUMBER:
        return _BY_NUMBER[int(text[1:])]
    base = text
    while True:
        shorter = _VARIANT.sub("", base)
        if shorter == base:
            break
        base = shorter
    for family in FAMILIES:
        if base in {c.split()[0].upper() for c in family.chips}:
            return family
    known = ", ".join(c for f in FAMILIES for c in f.chips)
    raise UnknownChip(f"unknown chip '{chip}' (known: {known}, or a family H13–H18)")


def describe(numbers: frozenset[int] | set[int], checked: frozenset[int] = ALL) -> str:
    """The chips of ``numbers`` in words: ``all chips checked`` when they are all of ``checked``,
    else ``M1/A14, M2/A15``."""
    if set(numbers) >= set(checked) and len(checked) > 1:
        return "every chip"
    return ", ".join(_BY_NUMBER[n].label for n in sorted(numbers))


def from_number(number: int) -> Family:
    return _BY_NUMBER[number]

"""What ``mil-passes list`` prints: the passes in pipeline order, each with its declared summary, read
from the declarations without importing coremltools; with ``--all`` also the replacements of
coremltools' passes and the guards (those need the registry, so coremltools starts)."""

from __future__ import annotations

from ..declaration import declared, pass_names


def pass_rows() -> list[tuple[str, str]]:
    """(registry name, summary) of each scheduled pass, in pipeline order."""
    summary = {d.full_name: d.summary for d in declared()}
    return [(name, summary[name]) for name in pass_names(declared())]


def replacement_rows() -> list[tuple[str, str]]:
    """(registry name, summary) of each corrected coremltools pass ``pipeline()`` runs in its place."""
    return [(d.full_name, f"replaces {d.replaces.of}: {d.summary}") for d in declared() if d.replaces is not None]


def guard_rows() -> list[tuple[str, str]]:
    """(registry name, the pass it protects) of each guard, in pipeline order (imports coremltools)."""
    from ..guards import GUARDS

    return [(guard.name, f"guards {guard.protects} (docs/guards.md)") for guard in GUARDS]


def lines(everything: bool = False) -> list[str]:
    """The listing, one line each: the passes; with ``everything`` the replacements and guards too."""
    rows = pass_rows() + (replacement_rows() + guard_rows() if everything else [])
    width = max(42, *(len(name) for name, _ in rows))
    return [f"{name:{width}s} {text}" for name, text in rows]

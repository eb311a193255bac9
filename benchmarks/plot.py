"""Time against op count, log-log: one line per pass and the two coremltools references."""

from __future__ import annotations

from pathlib import Path

import mil_passes

from .report import short
from .suites import BUILD, DCE, STREAMING_PASS, ProgramCosts


def series(programs: list[ProgramCosts], family: str) -> dict[str, list[tuple[int, float]]]:
    """``label → [(ops, seconds), …]`` for one program family, sorted by ops."""
    lines: dict[str, list[tuple[int, float]]] = {}
    for costs in sorted((c for c in programs if c.spec.family == family), key=lambda c: c.ops):
        if costs.spec.match:
            lines.setdefault("build (coremltools builder)", []).append((costs.ops, costs.seconds[BUILD]))
            lines.setdefault(f"{short(STREAMING_PASS)}, every window matches", []).append(
                (costs.ops, costs.seconds[STREAMING_PASS])
            )
            continue
        lines.setdefault(f"{short(DCE)} (coremltools)", []).append((costs.ops, costs.seconds[DCE]))
        for name in mil_passes.PASS_NAMES:
            lines.setdefault(f"{short(name)}, nothing matches", []).append((costs.ops, costs.seconds[name]))
    return lines


def plot(programs: list[ProgramCosts], path: Path, family: str = "streaming") -> Path:
    """Write the PNG for ``family`` to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    lines = series(programs, family)
    anchor = next((points for label, points in lines.items() if short(DCE) in label), None)
    if anchor and len(anchor) > 1:  # slope 1 through the sweep's first point: linear cost
        (ops0, seconds0), ops1 = anchor[0], anchor[-1][0]
        ax.plot(
            [ops0, ops1],
            [seconds0 * 0.2, seconds0 * 0.2 * ops1 / ops0],
            color="gray",
            linestyle=":",
            linewidth=1,
            label="linear (slope 1)",
        )
    for label, points in lines.items():
        ops, seconds = zip(*points)
        reference = "coremltools" in label
        ax.plot(
            ops,
            seconds,
            marker="o",
            linestyle="--" if reference else "-",
            linewidth=2.2 if reference else 1.4,
            color="black" if "build" in label else None,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ops in the program (consts included)")
    ax.set_ylabel("CPU seconds (best of several)")
    ax.set_title(f"mil_passes on the {family} program: cost against size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path

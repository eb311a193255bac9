"""The main job on the built-in example: the streaming-cache program the Neural Engine refuses,
saved as a package and fixed through the same path as ``mil-passes optimize``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..examples import streaming_cache_program
from ..package.io import load, save
from .text_output import format_report
from ..package.optimize import optimize_package
from ..reference.equivalence import assert_equivalent

NEW_FRAMES, CACHED_FRAMES = 7, 8  # the reported model: offset 7, width 8 (docs/evidence.md §1)
REFUSED = "ane-refused-slice-of-concat"


def run_demo(
    out_dir: str | Path = "demo_out",
    *,
    layers: int = 24,
    channels: int = 1024,
    on_step: Callable[[str], None] | None = None,
) -> str:
    """Build the example and save it, optimize the saved package, check the two packages give
    bit-identical outputs; return the printed summary. Replaces the demo's own packages."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        f"example: streaming-cache encoder, {layers} layers x {channels} channels, "
        f"{NEW_FRAMES} new frames, {CACHED_FRAMES} cached, fp16, the pattern the Neural Engine refuses"
    ]
    source = out_dir / "streaming_cache.mlpackage"
    fixed = out_dir / "streaming_cache_fixed.mlpackage"
    example = streaming_cache_program(layers, channels, NEW_FRAMES, CACHED_FRAMES, dtype="fp16")
    save(example, source, overwrite=True)
    lines.append(f"saved   {source}")

    run = optimize_package(source, fixed, force=True, on_step=on_step)
    lines += ["", f"optimize {source} -> {fixed}", "", format_report(run.report), ""]

    start = time.perf_counter()
    assert_equivalent(load(source), load(fixed), trials=1)
    lines.append(
        f"equivalence: outputs bit-identical under the reference interpreter ({time.perf_counter() - start:.2f} s)"
    )
    refused = lambda findings: sum(f.rule == REFUSED for f in findings)  # noqa: E731
    lines.append(
        f"windows the Neural Engine refuses: {refused(run.report.findings_before)} before, "
        f"{refused(run.report.findings_after)} after"
    )
    lines.append(f"saved   {fixed}")
    return "\n".join(lines)

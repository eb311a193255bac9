"""The main job on the built-in example: the streaming-cache program the Neural Engine refuses."""

from __future__ import annotations

import time
from pathlib import Path

from .examples import streaming_cache_program
from .mlpackage import save_program
from .optimize import format_report, run_passes
from .testing.equivalence import assert_equivalent

EXAMPLE = dict(layers=24, channels=1024, new_frames=7, cached_frames=8, dtype="fp16")


def run_demo(out_dir: str | Path = "demo_out", *, layers: int = 24, channels: int = 1024) -> str:
    """Build, save, fix, check and save again; return the printed summary."""
    out_dir = Path(out_dir)
    params = dict(EXAMPLE, layers=layers, channels=channels)
    build = lambda: streaming_cache_program(**params)  # noqa: E731
    lines = [
        f"example: streaming-cache encoder, {layers} layers x {channels} channels, "
        f"{params['new_frames']} new frames, {params['cached_frames']} cached, fp16 (FIELD_NOTES §1)"
    ]
    source = out_dir / "streaming_cache.mlpackage"
    save_program(build(), source)
    lines.append(f"saved   {source}")

    prog = build()
    report = run_passes(prog)
    lines += ["", format_report(report), ""]

    start = time.perf_counter()
    assert_equivalent(build(), prog, trials=1)
    lines.append(
        f"equivalence: outputs bit-identical under the reference interpreter "
        f"({time.perf_counter() - start:.2f} s)"
    )
    fixed = out_dir / "streaming_cache_fixed.mlpackage"
    save_program(prog, fixed)
    refused = lambda findings: sum(f.rule == "ane-refused-slice-of-concat" for f in findings)  # noqa: E731
    lines.append(
        f"windows the Neural Engine refuses: {refused(report.findings_before)} before, "
        f"{refused(report.findings_after)} after"
    )
    lines.append(f"saved   {fixed}")
    return "\n".join(lines)

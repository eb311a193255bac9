"""The real-model placement table at the end of docs/neural-engine.md: DEFAULT against ``pipeline()``.

    .venv/bin/python benchmarks/placement_table.py [--models NAME,NAME]

Every model of ``mil_passes/testing/models/real.py`` and ``placement_models.py`` (transformers
encoders and decoders from tiny configs, torchvision classifiers, a fixed-length Llama-style
prefill, a detector head, flexible-sequence forms) and a stateful Llama-style decoder, each
converted at fp16 (iOS17; the decoder iOS18) under DEFAULT and under ``mil_passes.pipeline()``:
the ops lint predicts off the Neural Engine and the segments, and the largest error against
torch (fp32) under the reference interpreter. Writes ``benchmarks/results/placement_table.md``
and the section between the markers at the end of docs/neural-engine.md (appended on the first
run). The "after specialize" cells of flexible-sequence rows are left empty for
``mil-passes specialize`` to fill once it exists.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "neural-engine.md"
BEGIN, END = "<!-- placement-table:begin -->", "<!-- placement-table:end -->"
HEADING = "## Real models: DEFAULT against `pipeline()`"
PIPELINES = ("DEFAULT", "pipeline")
DECODER = "llama_stateful_decoder"


@dataclass(frozen=True)
class Measured:
    """One model under one pipeline: ops, ops off the Neural Engine, segments, error vs torch."""

    ops: int
    off: int
    segments: int
    error: float | None  # None: not compared (the stateful decoder)


def placement_of(prog) -> tuple[int, int, int]:
    from mil_passes.lint import lint_report

    _, placement = lint_report(prog)
    return placement.ops, placement.off_ane, len(placement.segments)


def measure_model(name: str) -> dict[str, Measured]:
    """``name`` (a model of real.py or placement_models.py) under both pipelines, at fp16."""
    from mil_passes.testing.models import placement_models, real

    model = {**real.BY_NAME, **placement_models.BY_NAME}[name]
    ready = real.prepare(model)
    result = {}
    for pipeline in PIPELINES:
        mlmodel = real.convert(
            ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=real.pass_pipeline(pipeline)
        )
        result[pipeline] = Measured(*placement_of(mlmodel._mil_program), real.max_error(mlmodel, ready.trials))
    return result


def measure_decoder() -> dict[str, Measured]:
    """The stateful Llama-style decoder of benchmarks/placement.py (KV cache in iOS18 states)."""
    from mil_passes.testing.models import llama
    from mil_passes.testing.models.real import pass_pipeline

    shape = llama.LlamaShape(
        "decoder", vocab=512, hidden=256, intermediate=512, heads=4, kv_heads=2, layers=4, context=256
    )
    module = llama.build(shape)
    return {
        pipeline: Measured(
            *placement_of(llama.convert(module, shape, pass_pipeline=pass_pipeline(pipeline))._mil_program), None
        )
        for pipeline in PIPELINES
    }


def model_names() -> list[str]:
    from mil_passes.testing.models import placement_models, real

    return [m.name for m in real.MODELS] + [m.name for m in placement_models.MODELS] + [DECODER]


def flexible(name: str) -> bool:
    from mil_passes.testing.models import placement_models, real

    model = {**real.BY_NAME, **placement_models.BY_NAME}.get(name)
    return model is not None and bool(model.flexible)


def error_cell(error: float | None) -> str:
    if error is None:
        return "—"
    return "**NaN**" if math.isnan(error) else f"{error:.0e}" + (" **over**" if error > 1e-2 else "")


def table(rows: dict[str, dict[str, Measured]]) -> str:
    lines = [
        "| model (fp16) | ops | off the ANE: DEFAULT → `pipeline()` | segments: DEFAULT → `pipeline()` | "
        "after `specialize` | error vs torch: DEFAULT → `pipeline()` |",
        "|---|---:|---:|---:|---|---|",
    ]
    for name, measured in rows.items():
        before, after = measured["DEFAULT"], measured["pipeline"]
        specialize = "(to measure)" if flexible(name) else "—"
        lines.append(
            f"| {name} | {before.ops} → {after.ops} | {before.off} → {after.off} | "
            f"{before.segments} → {after.segments} | {specialize} | "
            f"{error_cell(before.error)} → {error_cell(after.error)} |"
        )
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace the section between the markers at the end of docs/neural-engine.md (append it the first time)."""
    content = PAGE.read_text()
    if BEGIN in content:
        head, rest = content.split(BEGIN, 1)
        PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    else:
        PAGE.write_text(f"{content.rstrip()}\n\n{HEADING}\n\n{BEGIN}\n{text}\n{END}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="only these models (comma-separated; the docs are not written)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    names = args.models.split(",") if args.models else model_names()
    rows = {}
    for name in names:
        rows[name] = measure_decoder() if name == DECODER else measure_model(name)
        before, after = rows[name]["DEFAULT"], rows[name]["pipeline"]
        print(f"{name}: off {before.off} -> {after.off}, segments {before.segments} -> {after.segments}", flush=True)
    text = table(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "placement_table.md").write_text(f"# Real models: DEFAULT against pipeline()\n\n{text}\n")
    if not args.models:
        write_section(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

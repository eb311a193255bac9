"""The "Real models" table of docs/real-models.md, regenerated from a run (needs the models extra).

    .venv/bin/python benchmarks/real_models_table.py   # writes results/real_models.md, updates docs/real-models.md

Every model of ``mil_passes/testing/models/real.py`` is converted under DEFAULT and
``mil_passes.pipeline()``, FLOAT32 and FLOAT16 (iOS17), predicted by the reference interpreter on
each trial input and compared with torch; lint runs on the fp32 conversions; the DEFAULT fp32
model goes through ``mil-passes optimize`` and ``lint``, and the result is predicted again.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- real-models:begin -->", "<!-- real-models:end -->"

from mil_passes.ir import op_counts  # noqa: E402
from mil_passes.lint import lint  # noqa: E402
from mil_passes.testing.models.real import (  # noqa: E402
    MODELS,
    PIPELINES,
    TOLERANCE,
    RealModel,
    convert,
    max_error,
    pass_pipeline,
    prepare,
    round_trip,
)

COLUMNS = [(pipeline, fp16) for fp16 in (False, True) for pipeline in PIPELINES]


def findings_cell(mlmodel) -> str:
    counts = Counter((f.severity, f.rule) for f in lint(mlmodel._mil_program))
    return ", ".join(f"{n} {severity} `{rule}`" for (severity, rule), n in sorted(counts.items())) or "none"


def error_cell(error: float, fp16: bool) -> str:
    return f"{error:.1e}" + ("" if error <= TOLERANCE[fp16] else " **over**")


def row(model: RealModel) -> list[str]:
    ready = prepare(model)
    errors, fp32 = [], {}
    for pipeline, fp16 in COLUMNS:
        try:
            mlmodel = convert(model, ready.traced, ready.inputs, fp16=fp16, pass_pipeline=pass_pipeline(pipeline))
        except Exception as error:  # noqa: BLE001 - the table reports it
            return [model.name, f"no: {type(error).__name__}: {str(error).splitlines()[0][:80]}"] + [""] * 7
        errors.append(error_cell(max_error(mlmodel, ready.trials), fp16))
        if not fp16:
            fp32[pipeline] = mlmodel
    shape_ops = [op_counts(fp32[p]._mil_program).get("shape", 0) for p in PIPELINES]
    with tempfile.TemporaryDirectory() as folder:
        trip = round_trip(fp32["DEFAULT"], folder, ready.trials)
    trip_cell = f"optimize {trip.optimize_status}, lint {trip.lint_status}, {error_cell(trip.error, False)}"
    return [
        model.name,
        "yes",
        *errors,
        findings_cell(fp32["DEFAULT"]),
        findings_cell(fp32["pipeline"]),
        f"{shape_ops[0]} → {shape_ops[1]}",
        trip_cell,
    ]


def table() -> str:
    header = [
        "model",
        "converts",
        "DEFAULT fp32",
        "pipeline fp32",
        "DEFAULT fp16",
        "pipeline fp16",
        "lint, DEFAULT fp32",
        "lint, pipeline fp32",
        "`shape` ops DEFAULT → pipeline",
        "command round trip",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for model in MODELS:
        start = time.perf_counter()
        lines.append("| " + " | ".join(row(model)) + " |")
        print(f"{model.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return "\n".join(lines)


def main() -> int:
    text = table()
    results = ROOT / "benchmarks" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "real_models.md").write_text(f"# Real models\n\n{text}\n")
    page = ROOT / "docs" / "real-models.md"
    content = page.read_text()
    if BEGIN in content and END in content:
        head, rest = content.split(BEGIN, 1)
        page.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The real-model placement table at the end of docs/neural-engine.md: DEFAULT against ``pipeline()``.

    .venv/bin/python benchmarks/placement_table.py [--models NAME,NAME]

Every model of ``mil_passes/testing/models/real.py`` and ``placement_models.py`` (transformers
encoders and decoders from tiny configs, torchvision classifiers, a fixed-length Llama-style
prefill, a detector head, flexible-sequence forms) and a stateful Llama-style decoder, each
converted at fp16 (iOS17; the decoder iOS18) under DEFAULT and under ``mil_passes.pipeline()``.
For each: the ops lint predicts off the Neural Engine by the rules and the segments the rules make
(``Placement.off_by_rules``, ``Placement.rule_segments``: what stays off at any size), whether Core
ML's whole-graph cost decision (``ane-small-graph``) puts the model on the CPU anyway, and the
largest error against torch (fp32) under the reference interpreter. A flexible-sequence form
converted under ``pipeline()`` is then saved and specialized at its example shape by ``mil-passes
specialize``'s library function, and measured again. A row whose DEFAULT form is one a published
compute plan shows (``mil_passes/testing/models/published.py``) is held to that plan as the truth
table is. Writes ``benchmarks/results/placement_table.md`` and the section between the markers at
the end of docs/neural-engine.md; with ``--models``, prints the rows and writes nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mil_passes.lint.placement import Placement

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "neural-engine.md"
BEGIN, END = "<!-- placement-table:begin -->", "<!-- placement-table:end -->"
HEADING = "## Real models: DEFAULT against `pipeline()`"
PIPELINES = ("DEFAULT", "pipeline")
DECODER = "llama_stateful_decoder"
SMALL_GRAPH = "ane-small-graph"
#: The published case whose model has a row's family and form (published.py's ``CASES``, by name): the
#: plan shows the model as users convert it, so it is held to the row's DEFAULT form.
COUNTERPARTS = {
    "bilstm": "RNN-T decoder_joint (Nemotron)",  # LSTM layers, then linear layers on their output
    "detector_head": "DETR detector head (two-stage topk)",  # topk, then gather_along_axis by tiled indices
    DECODER: "stateful decode, KV cache written at the position (Qwen3-0.6B)",  # slice_update at a run-time position
}


@dataclass(frozen=True)
class Measured:
    """One model under one pipeline: lint's placement and the largest error against torch."""

    placement: Placement
    error: float | None  # None: not compared

    @property
    def small(self) -> bool:
        """Whether Core ML's whole-graph cost decision puts the model on the CPU."""
        return any(SMALL_GRAPH in place.rules for place in self.placement.places)


@dataclass(frozen=True)
class Row:
    """A model under DEFAULT and ``pipeline()``; a flexible form also specialized (under ``pipeline()``)."""

    name: str
    measured: dict[str, Measured]
    specialized: Measured | None = None
    shape: str = ""  # the shape it was specialized at


def placement_of(prog) -> Placement:
    from mil_passes.lint import lint_report

    return lint_report(prog)[1]


def specialize(mlmodel, shapes: dict[str, tuple[int, ...]], trials) -> Measured:
    """``mlmodel`` saved, fixed to ``shapes`` by ``mil-passes specialize``'s library function, read back."""
    import coremltools as ct

    from mil_passes.package.io import load
    from mil_passes.package.specialize import specialize_package
    from mil_passes.testing.models.real import max_error

    with tempfile.TemporaryDirectory() as folder:
        source, fixed = Path(folder, "flexible.mlpackage"), Path(folder, "fixed.mlpackage")
        mlmodel.save(str(source))
        specialize_package(source, fixed, {name: [shape] for name, shape in shapes.items()})
        error = max_error(ct.models.MLModel(str(fixed), skip_model_load=True), trials)
        return Measured(placement_of(load(fixed)), error)


def measure_model(name: str) -> Row:
    """``name`` (a model of real.py or placement_models.py) under both pipelines, at fp16; a flexible
    form also specialized at its example shape."""
    from mil_passes.testing.models import placement_models, real

    model = {**real.BY_NAME, **placement_models.BY_NAME}[name]
    ready = real.prepare(model)
    measured, converted = {}, {}
    for pipeline in PIPELINES:
        mlmodel = real.convert(
            ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=real.pass_pipeline(pipeline)
        )
        converted[pipeline] = mlmodel
        measured[pipeline] = Measured(placement_of(mlmodel._mil_program), real.max_error(mlmodel, ready.trials))
    if not model.flexible:
        return Row(name, measured)
    shapes = {input_name: ready.inputs[input_name].shape for input_name in model.flexible}
    specialized = specialize(converted["pipeline"], shapes, ready.trials[:1])
    return Row(name, measured, specialized, ", ".join(f"{n} {'x'.join(map(str, s))}" for n, s in shapes.items()))


def decoder_error(module, shape, mlmodel) -> float:
    """The largest relative error of the logits against torch over a 4-token prompt and 3 decode steps,
    each stepped from zero caches."""
    from mil_passes.reference import make_state, predict
    from mil_passes.testing.models import llama
    from mil_passes.testing.models.real import relative_error

    stepper, state = llama.TorchStepper(module), make_state(mlmodel)
    errors = [
        relative_error(predict(mlmodel, feed, state=state)["logits"], stepper.step(feed))
        for feed in llama.decode_feeds(shape, prompt=4, steps=3)
    ]
    return float("nan") if any(math.isnan(e) for e in errors) else max(errors)


def measure_decoder() -> Row:
    """The stateful Llama-style decoder of benchmarks/placement.py (KV cache in iOS18 states)."""
    from mil_passes.testing.models import llama
    from mil_passes.testing.models.real import pass_pipeline

    shape = llama.LlamaShape(
        "decoder", vocab=512, hidden=256, intermediate=512, heads=4, kv_heads=2, layers=4, context=256
    )
    module = llama.build(shape)
    measured = {}
    for pipeline in PIPELINES:
        mlmodel = llama.convert(module, shape, pass_pipeline=pass_pipeline(pipeline))
        measured[pipeline] = Measured(placement_of(mlmodel._mil_program), decoder_error(module, shape, mlmodel))
    return Row(DECODER, measured)


def model_names() -> list[str]:
    from mil_passes.testing.models import placement_models, real

    return [m.name for m in real.MODELS] + [m.name for m in placement_models.MODELS] + [DECODER]


def error_cell(error: float | None) -> str:
    if error is None:
        return "—"
    return "**NaN**" if math.isnan(error) else f"{error:.0e}" + (" **over**" if error > 1e-2 else "")


def off_cell(placement: Placement) -> str:
    rejected = f" (rejected: `{placement.rejected_by[0]}`)" if placement.rejected_by else ""
    return f"{placement.off_by_rules}{rejected}"


def cost_cell(row: Row) -> str:
    """Whether ``ane-small-graph`` holds, and lint's placement with it (every op on the CPU); a model the
    Neural Engine compiler rejects leaves it whatever its size."""
    cells = []
    for measured in row.measured.values():
        placement = measured.placement
        on_cpu = "all" if placement.off_ane == placement.ops else f"{placement.off_ane} of {placement.ops}"
        segments = len(placement.segments)
        if placement.rejected_by:
            cells.append("moot: rejected")
        elif measured.small:
            cells.append(f"yes: {on_cpu} on the CPU, {segments} segment{'s' * (segments != 1)}")
        else:
            cells.append("no")
    return cells[0] if cells[0] == cells[1] else " → ".join(cells)


def published_cell(row: Row) -> str:
    """Lint's prediction for the row's DEFAULT form held to its published counterpart, as the truth
    table holds each case (tests/test_published_plans.py); "—" without one."""
    from mil_passes.testing.models.published import CASES, compare

    if row.name not in COUNTERPARTS:
        return "—"
    (case,) = [case for case in CASES if case.case == COUNTERPARTS[row.name]]
    result = compare(case, row.measured["DEFAULT"].placement)
    kind = " (by op type)" if case.by_type_count else ""
    named = f"[{case.source.split(' ')[0].rstrip(':')}]({case.url}) {case.case}"
    if result.agrees:
        return f"{named}: yes, {result.agreeing} of {result.compared} ops{kind}"
    reasons: dict[str, Counter] = {}
    for place in result.differing:  # by lint's reason: off by a rule, glue, cost or the model; on the ANE
        reasons.setdefault(f"off by {place.why}" if place.side == "off" else place.side, Counter())[place.op_type] += 1
    listed = "; ".join(
        f"{reason}: " + ", ".join(f"{n} {op_type}" if n > 1 else op_type for op_type, n in sorted(types.items()))
        for reason, types in sorted(reasons.items())
    )
    return f"{named}: no, {len(result.differing)} of {result.compared} ops{kind} differ ({listed})"


def specialized_cell(row: Row) -> str:
    if row.specialized is None:
        return "—"
    placement = row.specialized.placement
    cost = "; cost decision: all on the CPU" if row.specialized.small else ""
    return (
        f"{row.shape}: {placement.ops} ops, {off_cell(placement)} off, {placement.rule_segments} segments, "
        f"{error_cell(row.specialized.error)}{cost}"
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| model (fp16) | ops | off the ANE by the rules | segments by the rules | error vs torch | "
        "after `specialize` (`pipeline()`) | cost decision (`ane-small-graph`) | published plan (DEFAULT's form) |",
        "|---|---:|---:|---:|---|---|---|---|",
    ]
    for row in rows:
        before, after = row.measured["DEFAULT"], row.measured["pipeline"]
        lines.append(
            f"| {row.name} | {before.placement.ops} → {after.placement.ops} | "
            f"{off_cell(before.placement)} → {off_cell(after.placement)} | "
            f"{before.placement.rule_segments} → {after.placement.rule_segments} | "
            f"{error_cell(before.error)} → {error_cell(after.error)} | {specialized_cell(row)} | "
            f"{cost_cell(row)} | {published_cell(row)} |"
        )
    return "\n".join(lines)


def worse(row: Row) -> str | None:
    """How ``pipeline()`` predicts more ops off by the rules, or more segments, than DEFAULT (None: it does
    not), with the op types it takes off: those beyond DEFAULT's, or all of them when only the segments grew."""
    before, after = (row.measured[p].placement for p in PIPELINES)
    if after.off_by_rules <= before.off_by_rules and after.rule_segments <= before.rule_segments:
        return None

    def off_types(placement: Placement) -> Counter:
        return Counter(place.op_type for place in placement.places if place.side == "off" and place.why != "cost")

    more = off_types(after) - off_types(before)
    kept = more if after.off_by_rules > before.off_by_rules else off_types(after)
    types = ", ".join(f"{op_type} {n}" for op_type, n in sorted(kept.items(), key=lambda item: (-item[1], item[0])))
    rejected = f" (DEFAULT's model is rejected whole: `{before.rejected_by[0]}`)" if before.rejected_by else ""
    return (
        f"{row.name}: off {before.off_by_rules} → {after.off_by_rules}, segments {before.rule_segments} → "
        f"{after.rule_segments}{rejected}; off under `pipeline()`{' beyond DEFAULT' * (kept is more)}: {types}"
    )


def write_section(text: str) -> None:
    """Replace the section between the markers at the end of docs/neural-engine.md (append it the first time)."""
    content = PAGE.read_text()
    if BEGIN in content:
        head, rest = content.split(BEGIN, 1)
        PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    else:
        PAGE.write_text(f"{content.rstrip()}\n\n{HEADING}\n\n{BEGIN}\n{text}\n{END}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", help="only these models (comma-separated; prints them, writes nothing)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    names = args.models.split(",") if args.models else model_names()
    known = model_names()
    unknown = [name for name in names if name not in known]
    if unknown:
        print(f"unknown model {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    rows, start_all = [], time.perf_counter()
    for name in names:
        start = time.perf_counter()
        row = measure_decoder() if name == DECODER else measure_model(name)
        rows.append(row)
        before, after = (row.measured[p].placement for p in PIPELINES)
        print(
            f"{name}: off {before.off_by_rules} -> {after.off_by_rules}, segments {before.rule_segments} -> "
            f"{after.rule_segments} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    text = table(rows)
    regressions = [line for line in map(worse, rows) if line is not None]
    if regressions:
        text += "\n\n`pipeline()` predicts more off the ANE, or more segments, than DEFAULT on:\n\n"
        text += "\n".join(f"- {line}" for line in regressions)
    if not args.models:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "placement_table.md").write_text(f"# Real models: DEFAULT against pipeline()\n\n{text}\n")
        write_section(text)
    print(f"{text}\n\n{len(rows)} models in {time.perf_counter() - start_all:.0f} s")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

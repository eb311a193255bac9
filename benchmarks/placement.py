"""Neural Engine placement of real models, and what the placement rules cost lint.

    .venv/bin/python benchmarks/placement.py [--skip-models] [--ops N]

1. The real models the tests convert (resnet18, mobilenet_v3_small, GPT-2, BERT) at fp16, and a
   stateful Llama-style decoder (KV cache in iOS18 states, SDPA, grouped-query heads, random weights:
   ``mil_passes/testing/models/llama.py``), each converted under DEFAULT and ``mil_passes.pipeline()``:
   the ops the rules take off the Neural Engine, by rule, the segments, and the time lint takes.
   Writes ``benchmarks/results/placement.md`` and the table of docs/neural-engine.md.
2. A program of ``--ops`` (default 20,000) ops: lint's time in the passes' dry runs against the
   placement rules, measured in one run (target: the placement rules cost at most the rest of lint).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- placement-models:begin -->", "<!-- placement-models:end -->"


from mil_passes.lint import lint_report  # noqa: E402
from mil_passes.lint.dims import DimNames  # noqa: E402
from mil_passes.lint.dry_run import pass_findings  # noqa: E402
from mil_passes.lint.placement import assess  # noqa: E402
from mil_passes.schedule import PASS_NAMES  # noqa: E402

REAL = ("resnet18", "mobilenet_v3_small", "gpt2", "bert")


def _rules(placement) -> str:
    top = sorted(placement.off_rules.items(), key=lambda item: -item[1])
    return ", ".join(f"`{rule}` {n}" for rule, n in top) or "none"


def measure(prog) -> tuple[object, float]:
    start = time.perf_counter()
    _, placement = lint_report(prog)
    return placement, time.perf_counter() - start


def real_models() -> list[tuple[str, str, object, float]]:
    from mil_passes.testing.models.real import BY_NAME, convert, pass_pipeline, prepare

    rows = []
    for name in REAL:
        ready = prepare(BY_NAME[name])
        for pipeline in ("DEFAULT", "pipeline"):
            model = convert(ready.model, ready.traced, ready.inputs, fp16=True, pass_pipeline=pass_pipeline(pipeline))
            placement, seconds = measure(model._mil_program)
            rows.append((name, pipeline, placement, seconds))
            print(
                f"{name} {pipeline}: {placement.ops} ops, {placement.off_ane} off, {len(placement.segments)} segments"
            )
    return rows


#: A small decoder with Llama's proportions and a 64-wide head (the cache's last axis: a multiple of 32).
DECODER_LAYERS = 4


def decoder() -> list[tuple[str, str, object, float]]:
    from mil_passes.testing.models import llama
    from mil_passes.testing.models.real import pass_pipeline

    shape = llama.LlamaShape(
        "decoder", vocab=512, hidden=256, intermediate=512, heads=4, kv_heads=2, layers=DECODER_LAYERS, context=256
    )
    module = llama.build(shape)
    rows = []
    for pipeline in ("DEFAULT", "pipeline"):
        model = llama.convert(module, shape, pass_pipeline=pass_pipeline(pipeline))
        placement, seconds = measure(model._mil_program)
        rows.append((f"Llama-style decoder ({DECODER_LAYERS} layers, stateful)", pipeline, placement, seconds))
        print(f"decoder {pipeline}: {placement.ops} ops, {placement.off_ane} off, {len(placement.segments)} segments")
    return rows


def model_table(rows) -> str:
    lines = [
        "| model (fp16) | pipeline | ops | off the ANE | by rule | segments | lint |",
        "|---|---|---:|---:|---|---:|---:|",
    ]
    for name, pipeline, placement, seconds in rows:
        pipeline_name = "`mil_passes.pipeline()`" if pipeline == "pipeline" else "DEFAULT"
        lines.append(
            f"| {name} | {pipeline_name} | {placement.ops} | {placement.off_ane} | {_rules(placement)} | "
            f"{len(placement.segments)} | {seconds:.2f} s |"
        )
    return "\n".join(lines)


def long_program(ops: int):
    """``ops`` fp16 ops in a chain: relu, add, mul, with a topk and a concat every 100 (off, then back)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    @mb.program(input_specs=[mb.TensorSpec((1, 64), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        built = 0
        while built < ops:
            if built % 100 == 99:
                top = mb.topk(x=x, k=2, axis=-1)[0]
                x = mb.concat(values=(top, mb.slice_by_size(x=x, begin=[0, 0], size=[1, 62])), axis=-1)
                built += 3
            else:
                x = (mb.relu, mb.sigmoid, mb.tanh)[built % 3](x=x)
                built += 1
        return x

    return prog


def lint_cost(ops: int) -> tuple[int, float, float]:
    """The dry runs' time and the placement rules' time on one ``ops``-op program (best of 3)."""
    prog = long_program(ops)
    words = DimNames.of_program(prog)
    dry, rules = [], []
    for _ in range(3):
        start = time.perf_counter()
        findings = [f for name in PASS_NAMES for f in pass_findings(prog, name, words)]
        middle = time.perf_counter()
        assess(prog, dims=words, reported={(f.rule, f.op) for f in findings})
        end = time.perf_counter()
        dry.append(middle - start)
        rules.append(end - middle)
    count = sum(1 for _ in prog.functions["main"].operations)
    return count, min(dry), min(rules)


def write_between_markers(page: Path, text: str) -> None:
    content = page.read_text()
    head, rest = content.split(BEGIN, 1)
    page.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-models", action="store_true", help="only the long-program measurement")
    parser.add_argument("--ops", type=int, default=20000, help="ops of the long program (default 20000)")
    args = parser.parse_args(argv)
    count, dry, rules = lint_cost(args.ops)
    cost = (
        f"lint of a {count}-op program: the passes' dry runs {dry:.2f} s, the placement rules {rules:.2f} s: "
        f"**{rules / dry:.2f}x** the rest of lint (target ≤ 1x; best of 3, one run)"
    )
    print(cost)
    sections = [f"# Neural Engine placement\n\nWritten by `python benchmarks/placement.py`.\n\n{cost}\n"]
    if not args.skip_models:
        table = model_table(real_models() + decoder())
        sections.append(table + "\n")
        write_between_markers(ROOT / "docs" / "neural-engine.md", f"{table}\n\n{cost}.")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "placement.md").write_text("\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

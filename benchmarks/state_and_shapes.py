"""Before and after: a stateful Llama-style decoder under DEFAULT and ``pipeline()``, and the
flexible-sequence models before and after ``mil-passes specialize``.

    .venv/bin/python benchmarks/state_and_shapes.py [--layers N]

1. The stateful decoder of ``mil_passes/testing/models/llama.py`` (``--layers``, default 4; hidden
   128, heads of 32, a context of 32, random weights), converted under DEFAULT and
   ``mil_passes.pipeline()``: the run-time state writes left (``slice_update`` ops), lint's
   predicted placement (ops off the Neural Engine, segments), and whether a prompt and 5 decode
   steps give DEFAULT's bits (logits and caches) on the reference interpreter.
2. The flexible-sequence models (GPT-2 with a ``RangeDim`` sequence, the decoder's two ``RangeDim``
   inputs), converted under DEFAULT at fp16, before and after ``specialize`` to one shape, and to
   two ``EnumeratedShapes``: ops (without consts), ``shape`` ops, off the Neural Engine, segments.

Prints Markdown tables; the placement figures are those of today's lint.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")

from mil_passes.ir import iter_ops, op_counts  # noqa: E402
from mil_passes.package.io import read  # noqa: E402
from mil_passes.package.specialize import specialize_package  # noqa: E402
from mil_passes.reference.state import evaluate_steps  # noqa: E402


def placement_of(package) -> tuple[int, int, int]:
    """(ops, off the Neural Engine, segments) as lint predicts them."""
    _, placement = package.lint_report()
    return placement.ops, placement.off_ane, len(placement.segments)


def same_bits(a: list[dict], b: list[dict]) -> bool:
    return all(
        list(x) == list(y) and all(np.array_equal(x[k].view(np.uint8), y[k].view(np.uint8)) for k in x)
        for x, y in zip(a, b)
    )


def stateful_rows(layers: int, folder: Path) -> list[str]:
    import mil_passes
    from mil_passes.testing.models import llama

    # heads of 32 elements: the tiny shape's 8-wide caches would be off the Neural Engine for their width alone
    shape = dataclasses.replace(llama.TINY, hidden=128, intermediate=128, layers=layers, context=32)
    module = llama.build(shape)
    feeds = llama.decode_feeds(shape, prompt=4, steps=5)
    rows, steps = [], {}
    for label, pipeline in (("DEFAULT", None), ("pipeline()", mil_passes.pipeline())):
        path = folder / f"decoder_{label.strip('()')}.mlpackage"
        llama.convert(module, shape, pass_pipeline=pipeline).save(str(path))
        package = read(path)
        ops, off, segments = placement_of(package)
        writes = op_counts(package.program).get("slice_update", 0)
        steps[label] = evaluate_steps(package.program, feeds)
        rows.append(
            f"| Llama-style decoder ({layers} layers, stateful) | {label} | {writes} | {ops} | {off} | {segments} |"
        )
    (want_out, want_states), (got_out, got_states) = steps["DEFAULT"], steps["pipeline()"]
    equal = same_bits(want_out, got_out) and same_bits(want_states, got_states)
    return [
        "| model | pipeline | run-time state writes | ops | off the ANE | segments |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        f"prompt of 4 + 5 decode steps, pipeline() against DEFAULT, logits and caches: "
        f"{'bit for bit equal' if equal else 'DIFFERENT'}",
    ]


def _flexible_models(folder: Path) -> list[tuple[str, Path, list[tuple[str, dict]]]]:
    """Each flexible model: its label, its package, and the forms to specialize it to."""
    from mil_passes.testing.models import llama, real

    model = real.BY_NAME["gpt2_flexible"]
    inputs = model.example_inputs(np.random.default_rng(0))
    gpt2 = folder / "gpt2_flexible.mlpackage"
    real.convert(model, real.trace(model.instantiate(), inputs), inputs, fp16=True).save(str(gpt2))
    shape = llama.TINY.with_layers(2)
    decoder = folder / "decoder_flexible.mlpackage"
    llama.convert(llama.build(shape), shape).save(str(decoder))
    return [
        (
            "GPT-2, flexible sequence",
            gpt2,
            [("one shape", {"input_ids": [(1, 9)]}), ("EnumeratedShapes", {"input_ids": [(1, 8), (1, 16)]})],
        ),
        (
            "Llama-style decoder (2 layers)",
            decoder,
            [
                ("one shape, a decode step", {"inputIds": [(1, 1)], "causalMask": [(1, 1, 1, 8)]}),
                ("one shape, a prompt", {"inputIds": [(1, 8)], "causalMask": [(1, 1, 8, 8)]}),
            ],
        ),
    ]


def specialize_rows(folder: Path) -> list[str]:
    rows = ["| model | form | ops | `shape` ops | off the ANE | segments |", "|---|---|---|---|---|---|"]
    for label, path, forms in _flexible_models(folder):
        package = read(path)
        _, off, segments = placement_of(package)
        shape_ops = op_counts(package.program).get("shape", 0)
        rows.append(f"| {label} | RangeDim (DEFAULT) | {_ops(package)} | {shape_ops} | {off} | {segments} |")
        for number, (form, shapes) in enumerate(forms):
            out = folder / f"{path.stem}_{number}.mlpackage"
            specialize_package(path, out, shapes)
            after = read(out)
            _, off, segments = placement_of(after)
            text = "; ".join(f"{n} {', '.join('x'.join(map(str, s)) for s in v)}" for n, v in shapes.items())
            shape_ops = op_counts(after.program).get("shape", 0)
            rows.append(f"| {label} | {form} ({text}) | {_ops(after)} | {shape_ops} | {off} | {segments} |")
    return rows


def _ops(package) -> int:
    return sum(1 for op in iter_ops(package.program) if op.op_type != "const")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print("\n".join(stateful_rows(args.layers, Path(folder))))
        print()
        print("\n".join(specialize_rows(Path(folder))))


if __name__ == "__main__":
    main()

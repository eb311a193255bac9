"""What predicting Neural Engine placement costs lint, on a 20,000-op program.

    .venv/bin/python benchmarks/placement_cost.py [--ops N] [--repeats R]

The program repeats the forms the published plans taught the prediction (docs/neural-engine.md,
"Published compute plans"): fp16 linear/layer_norm/gelu blocks on the Neural Engine, glue (reshape,
transpose, cast, expand_dims, tile) around them, and every 25 blocks a detector-style island: a topk
whose indices are expanded, tiled and gathered by (off the Neural Engine, its glue with it). lint's
time is split in one run into the passes' dry runs (the rest of lint) and the placement (the rules,
glue, cost and segments: :func:`mil_passes.lint.placement.assess`), best of ``R``; the script prints
the ratio. Target: the placement costs at most the rest of lint (ratio ≤ 1).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent

WIDTH = 64


def program(ops: int):
    """About ``ops`` non-const fp16 ops of the forms above, in one function."""
    import numpy as np

    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    weight = np.full((WIDTH, WIDTH), 0.01, np.float16)

    @mb.program(input_specs=[mb.TensorSpec((1, 16, WIDTH), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        built, blocks = 0, 0
        while built < ops:
            hidden = mb.gelu(x=mb.layer_norm(x=mb.linear(x=x, weight=weight), axes=[-1]))
            hidden = mb.transpose(x=mb.reshape(x=hidden, shape=[1, 16, 4, WIDTH // 4]), perm=[0, 2, 1, 3])
            x = mb.add(x=x, y=mb.reshape(x=mb.transpose(x=hidden, perm=[0, 2, 1, 3]), shape=[1, 16, WIDTH]))
            built += 8
            blocks += 1
            if blocks % 25 == 0:
                picked = mb.topk(x=mb.reduce_max(x=x, axes=[-1]), k=8, axis=-1)[1]
                index = mb.tile(x=mb.expand_dims(x=picked, axes=[-1]), reps=[1, 1, WIDTH])
                rows = mb.gather_along_axis(x=x, indices=index, axis=1)
                x = mb.concat(values=(mb.slice_by_size(x=x, begin=[0, 0, 0], size=[1, 8, WIDTH]), rows), axis=1)
                built += 7
        return x

    return prog


def split_time(prog, repeats: int) -> tuple[float, float]:
    """The passes' dry runs and the placement, in seconds, each the best of ``repeats``."""
    from mil_passes.lint.dims import DimNames
    from mil_passes.lint.dry_run import pass_findings
    from mil_passes.lint.placement import assess
    from mil_passes.schedule import PASS_NAMES

    words = DimNames.of_program(prog)
    dry, placed = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        findings = [f for name in PASS_NAMES for f in pass_findings(prog, name, words)]
        middle = time.perf_counter()
        assess(prog, dims=words, reported={(f.rule, f.op) for f in findings})
        dry.append(middle - start)
        placed.append(time.perf_counter() - middle)
    return min(dry), min(placed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=20000, help="ops of the program (default 20000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs to take the best of (default 3)")
    args = parser.parse_args(argv)
    prog = program(args.ops)
    count = sum(1 for op in prog.functions["main"].operations if op.op_type != "const")
    dry, placed = split_time(prog, args.repeats)
    print(
        f"lint of a {count}-op program: the passes' dry runs {dry:.2f} s, the placement {placed:.2f} s: "
        f"placement / rest of lint = {placed / dry:.2f}x (target ≤ 1x; best of {args.repeats}, one run)"
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

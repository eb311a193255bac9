"""``verify`` with DEFAULT on an ~18,000-op streaming program, against DEFAULT itself (one run).

    .venv/bin/python benchmarks/verify_ratio.py [--layers 950] [--feeds 3]

Prints the seconds of coremltools' DEFAULT pipeline (``PassPipelineManager.apply_pipeline``),
of ``verify_program`` with DEFAULT (one copy, the interpreter on every feed before and after each
pass), their ratio (target: at most 10), and what copying a Program costs each way:
``copy.deepcopy`` (RecursionError past ~1,000 ops), the protobuf round trip
(``mil_passes.package.io.copy_program``), re-reading a saved package, re-building the program.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager  # noqa: E402

from benchmarks.programs import ProgramSpec, op_count  # noqa: E402
from mil_passes.package.io import copy_program, read, save  # noqa: E402
from mil_passes.verify import verify_program  # noqa: E402

TARGET_RATIO = 10.0


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def copy_costs(spec: ProgramSpec) -> dict[str, str]:
    prog = spec.build()
    costs = {}
    try:
        _, seconds = timed(lambda: copy.deepcopy(prog))
        costs["copy.deepcopy"] = f"{seconds:.2f} s"
    except RecursionError:
        costs["copy.deepcopy"] = "RecursionError"
    costs["protobuf round trip (copy_program)"] = f"{timed(lambda: copy_program(prog))[1]:.2f} s"
    with tempfile.TemporaryDirectory() as folder:
        path = save(spec.build(), Path(folder) / "p.mlpackage")
        costs["re-read the package (io.read)"] = f"{timed(lambda: read(path))[1]:.2f} s"
    costs["re-build with the builder"] = f"{timed(spec.build)[1]:.2f} s"
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=950, help="streaming layers (950: ~18,000 ops)")
    parser.add_argument("--feeds", type=int, default=3)
    args = parser.parse_args(argv)
    spec = ProgramSpec("streaming", args.layers, True)
    prog = spec.build()
    ops = op_count(prog)
    _, default_seconds = timed(lambda: PassPipelineManager.apply_pipeline(prog, PassPipeline.DEFAULT))
    verification, verify_seconds = timed(lambda: verify_program(spec.build(), "default", feeds=args.feeds))
    passes = sum(row.seconds for row in verification.rows)
    ratio = verify_seconds / default_seconds
    print(f"program: {spec.label}, {ops:,} ops (consts included)")
    print(f"DEFAULT (PassPipelineManager):        {default_seconds:8.1f} s")
    print(
        f"verify DEFAULT, {args.feeds} feeds:              {verify_seconds:8.1f} s "
        f"(passes {passes:.1f} s, culprit {verification.culprit and verification.culprit.name})"
    )
    print(f"ratio verify / DEFAULT: {ratio:.2f} (target <= {TARGET_RATIO:g})")
    for what, cost in copy_costs(spec).items():
        print(f"copy by {what}: {cost}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())

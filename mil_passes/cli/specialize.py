"""``mil-passes specialize``: fix a model's flexible inputs to the shapes given.

Exit status: 0 written; 2 nothing written (a bad path, model or shape, said in one line on
stderr); 3 and 130 as every command (``cli/main.py``). The library is
:mod:`mil_passes.package.specialize`; nothing here imports coremltools before the command runs.
"""

from __future__ import annotations

import argparse
from typing import Callable

DESCRIPTION = (
    "Fix the flexible (RangeDim) inputs of a model to the shapes given: one shape per input fixes "
    "it, and the shape arithmetic folds to constants; several shapes make it EnumeratedShapes, the "
    "first the default. Core ML runs a RangeDim model on the Neural Engine only at its default "
    "shape. The rest of the interface is kept; OUT is written whole or not at all."
)


def add_specialize(commands, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the ``specialize`` subcommand to the subparsers ``commands``, made by ``command`` (the
    command line's maker of a subcommand: its help line, and the exit statuses in its epilog)."""
    summary = "fix a model's flexible input shapes (a RangeDim becomes one shape or EnumeratedShapes)"
    parser = command(commands, "specialize", summary, run_specialize)
    parser.description = DESCRIPTION
    parser.add_argument("input", metavar="IN", help="an .mlpackage, or an .mlmodel holding an ML Program")
    parser.add_argument("-o", "--output", metavar="OUT", required=True, help="the .mlpackage to write")
    parser.add_argument(
        "--shape",
        dest="shapes",
        metavar="NAME=D0,D1,...",
        action="append",
        required=True,
        help="a shape of input NAME (repeatable: one shape per input fixes it, several make EnumeratedShapes)",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT (or IN) if it exists")


def run_specialize(args: argparse.Namespace) -> int:
    """Run the command; 0 when OUT is written (errors raise: ``main`` says them in one line)."""
    from ..package.atomic import raise_if_interrupted
    from ..package.specialize import shapes_by_input, specialize_package
    from ..package.untrusted import printable
    from .exit_status import EXIT_OK
    from .progress import Progress, progress_enabled

    raise_if_interrupted()
    shapes = shapes_by_input(args.shapes)  # a malformed --shape fails before the model is read
    progress = Progress(4, progress_enabled(args.quiet))
    try:
        run = specialize_package(args.input, args.output, shapes, force=args.force, on_step=progress)
    finally:
        progress.close()
    lines = [f"specialize {run.source} -> {run.output}"]
    for name, wanted in run.shapes.items():
        kind = "fixed" if len(wanted) == 1 else f"EnumeratedShapes, default {'x'.join(map(str, wanted[0]))}"
        lines.append(f"  input '{name}': {', '.join('x'.join(map(str, s)) for s in wanted)} ({kind})")
    lines.append(f"ops (without consts): {run.ops_before} -> {run.ops_after}")
    lines.append(f"wrote {run.output} ({run.seconds:.2f} s)")
    print("\n".join(printable(line) for line in lines))
    return EXIT_OK

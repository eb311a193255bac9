"""The ``mil-passes`` command: lint and fix Core ML models (ML Programs) as they are on disk.

Exit status: 0 done (``lint``: no error finding; ``optimize``/``demo``: written, no error left;
``verify``: no pass changed the outputs); 1 ``lint`` found an error (``optimize``: written, but an
error finding is left; ``verify``: a pass changed the outputs, raised or broke the program); 2
nothing done: a bad path, model or option, said in one line on stderr; 3 an internal error of
mil-passes (one line on stderr naming the file the traceback went to); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from typing import Callable, TextIO

from .._version import __version__
from ..package.atomic import committed, raise_if_interrupted, remove_own_staging
from .interrupts import interrupts_recorded, stop_raising
from .internal_error import internal_error_line
from .optional_frameworks import optional_frameworks_refused
from ..package.untrusted import one_line, printable, shown

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def progress_enabled(quiet: bool, stream: TextIO | None = None) -> bool:
    """A progress bar only for a person watching: not with ``--quiet``, not when stdout is piped."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return not quiet and callable(isatty) and bool(isatty())


class Progress:
    """A tqdm bar on stderr advanced by ``step(label)`` as each step starts."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, disable=not enabled, file=sys.stderr, leave=False, unit="step")
        self.started = False

    def __call__(self, label: str) -> None:
        raise_if_interrupted()  # a checkpoint at every step
        if self.started:
            self.bar.update(1)
        self.started = True
        self.bar.set_description(label)

    def close(self) -> None:
        self.bar.close()


def _say(*lines: str, flush: bool = False) -> None:
    """Print each of ``lines`` (none: an empty line), which may hold names from a package, as one
    line: every character a terminal would act on (escape sequences, carriage returns, line
    breaks) escaped."""
    print("\n".join(printable(line) for line in lines), flush=flush)


def _steps(pass_count: int) -> int:
    return 1 + pass_count + 1 + 2  # read, passes, cleanup, write, check


def _optimize(args: argparse.Namespace) -> int:
    from .json_output import optimize_json
    from ..runner import resolve_pass_names
    from .text_output import explain, format_report
    from ..package.optimize import optimize_package

    raise_if_interrupted()  # a checkpoint after the imports (coremltools swallows some interrupts)
    names = resolve_pass_names(args.passes)
    progress = Progress(_steps(len(names)), progress_enabled(args.quiet or args.json))
    try:
        run = optimize_package(args.input, args.output, names, force=args.force, on_step=progress)
    finally:
        progress.close()
    errors_left = any(f.severity == "error" for f in run.report.findings_after)
    if args.json:
        print(json.dumps(optimize_json(run), indent=2))
        return EXIT_FINDINGS if errors_left else EXIT_OK
    _say(f"optimize {run.source} -> {run.output}")
    _say()
    _say(*format_report(run.report).split("\n"))  # op types, rules and passes: no names
    if args.explain:
        _say()
        _say(*explain(run.report).split("\n"))
    _say()
    _print_findings("left", run.report.findings_after)
    _say(f"wrote {run.output} ({run.seconds:.2f} s)")
    return EXIT_FINDINGS if errors_left else EXIT_OK


def _print_findings(when: str, findings) -> None:
    from .grouped_findings import grouped

    if not findings:
        _say(f"findings {when}: none")
        return
    _say(f"findings {when}:")
    for line in grouped(findings):
        _say(f"  {line}")


def _lint(args: argparse.Namespace) -> int:
    from .json_output import lint_json
    from ..lint import SEVERITIES
    from ..lint.dry_run import checked_families
    from ..package.io import read
    from .grouped_findings import findings_lines, placement_line, segment_lines

    raise_if_interrupted()
    checked_families(args.chip)  # an unknown chip fails before the model is read
    findings, placement = read(args.input).lint_report(args.chip)
    if args.json:
        print(json.dumps(lint_json(args.input, findings, placement), indent=2))
    else:
        for line in findings_lines(findings, every=args.all):
            _say(line)
        _say(placement_line(placement))
        if args.explain:
            _say(*segment_lines(placement))
        counts = ", ".join(_count(sum(f.severity == s for f in findings), s) for s in SEVERITIES)
        hidden = "" if args.all or len(findings_lines(findings)) == len(findings) else "; --all lists each"
        _say(f"{args.input}: {counts}{hidden}" if findings else f"{args.input}: no findings")
    return EXIT_FINDINGS if any(f.severity == "error" for f in findings) else EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    from .json_output import verify_json
    from ..verify import resolve_pipeline, verify_package
    from .status_line import StatusLine
    from .text_output import format_row, format_summary

    raise_if_interrupted()
    names = resolve_pipeline(args.pipeline).passes  # an unknown name fails before any output
    width = max((len(name) for name in names), default=0)
    header = (
        f"verify {args.input}: pipeline {args.pipeline} ({_count(len(names), 'pass')}), "
        f"{_count(args.feeds, 'feed')} (seed {args.seed})"
    )
    headed: list[str] = []
    status = StatusLine(progress_enabled(args.quiet or args.json))

    def show(row) -> None:
        status.clear()
        if not headed:
            headed.append(header)
            _say(header)
        _say(format_row(row, width), flush=True)

    try:
        verification = verify_package(
            args.input,
            args.pipeline,
            feeds=args.feeds,
            seed=args.seed,
            on_row=None if args.json else show,
            steps=args.steps,
            on_progress=status.show,
        )
    finally:
        status.clear()
    if args.json:
        print(json.dumps(verify_json(verification), indent=2))
    else:
        if not headed:
            _say(header)
        if verification.shared_sizes:
            _say(shown(f"feeds: every flexible dim at one size; {verification.shared_sizes}", 200))
        if verification.steps > 1:
            _say(f"stateful: {verification.steps} steps per feed from zero states; outputs and states compared")
        _say(format_summary(verification))
    return EXIT_FINDINGS if verification.culprit is not None else EXIT_OK


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 'es' if noun.endswith('s') else 's'}"


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    raise_if_interrupted()
    progress = Progress(_steps(4), progress_enabled(args.quiet))
    try:
        print(run_demo(args.out, layers=args.layers, channels=args.channels, on_step=progress))
    finally:
        progress.close()
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from .pass_list import PASSES

    for name, summary in PASSES:
        print(f"{name:42s} {summary}")
    return EXIT_OK


# verify's predictions per feed of a stateful model (mil_passes.verify.DEFAULT_STEPS; not imported
# here, to keep the command's start light).
DEFAULT_STEPS = 4


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mil-passes", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"mil-passes {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    optimize = commands.add_parser("optimize", help="run the passes on a model and write the fixed one")
    optimize.add_argument("input", metavar="IN", help="an .mlpackage, or an .mlmodel holding an ML Program")
    optimize.add_argument("-o", "--output", metavar="OUT", required=True, help="the .mlpackage to write")
    optimize.add_argument(
        "--pass",
        dest="passes",
        metavar="NAME",
        action="append",
        help="run only this pass (repeatable; default: all, in pipeline order)",
    )
    optimize.add_argument("--explain", action="store_true", help="say why each refused match was left")
    optimize.add_argument("--json", action="store_true", help="print the report as JSON (mil-passes/optimize/1)")
    optimize.add_argument("--force", action="store_true", help="replace OUT (or IN) if it exists")
    optimize.add_argument("--quiet", action="store_true", help="no progress bar")
    optimize.set_defaults(run=_optimize)

    lint = commands.add_parser("lint", help="what Core ML would refuse or hide in a model")
    lint.add_argument("input", metavar="IN", help="an .mlpackage, or an .mlmodel holding an ML Program")
    lint.add_argument("--json", action="store_true", help="print the findings as JSON (mil-passes/lint/1)")
    lint.add_argument(
        "--chip",
        metavar="NAME",
        help="check the Neural Engine rules for one chip (M1 … M5, A14 … A19; default: every chip from M1/A14)",
    )
    lint.add_argument("--all", action="store_true", help="list every finding (default: repeats grouped into one line)")
    lint.add_argument("--explain", action="store_true", help="list the segments of the predicted placement")
    lint.set_defaults(run=_lint)

    verify = commands.add_parser(
        "verify", help="run a pass pipeline pass by pass; name the pass that changes the outputs"
    )
    verify.add_argument(
        "input",
        metavar="IN",
        help="an .mlpackage, or an .mlmodel holding an ML Program "
        "(convert with pass_pipeline=ct.PassPipeline.EMPTY to keep the program before any pass)",
    )
    verify.add_argument(
        "--pipeline",
        default="default",
        metavar="NAME",
        help="default, empty, cleanup, default_palettization, default_pruning, mil_passes "
        "(DEFAULT with this package's passes), or passes P1,P2,... (default: default)",
    )
    verify.add_argument("--feeds", type=_positive, default=3, metavar="N", help="random feeds (default 3)")
    verify.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the feeds (default 0)")
    verify.add_argument(
        "--steps",
        type=_positive,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"predictions per feed of a stateful model, from zero states (default {DEFAULT_STEPS})",
    )
    verify.add_argument("--json", action="store_true", help="print the rows as JSON (mil-passes/verify/1)")
    verify.add_argument("--quiet", action="store_true", help="no progress line")
    verify.set_defaults(run=_verify)

    listing = commands.add_parser("list", help="the passes, in pipeline order")
    listing.set_defaults(run=_list)

    demo = commands.add_parser("demo", help="fix the built-in streaming-cache example and show what changed")
    demo.add_argument("--out", default="demo_out", help="folder for the packages (default: demo_out)")
    demo.add_argument("--layers", type=_positive, default=24)
    demo.add_argument("--channels", type=_positive, default=1024)
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.set_defaults(run=_demo)

    from .specialize import add_specialize  # the specialize command (cli/specialize.py)

    add_specialize(commands)
    return parser


def _quiet_coremltools() -> None:
    """coremltools warns at import about the missing Core ML runtime and the torch version."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"coremltools(\.|$)")


def main(argv: list[str] | None = None) -> int:
    """Run one command; coremltools, if this starts it, starts without the optional frameworks.

    An interrupt at any moment ends it with 130 (:mod:`.interrupts`), even one a library caught.
    """
    with interrupts_recorded():
        written_before = len(committed())
        try:
            status = _main(argv)
            raise_if_interrupted()
            return status
        except KeyboardInterrupt:
            stop_raising()
            remove_own_staging()
            written = committed()[written_before:]
            said = f"wrote {', '.join(map(str, written))} before it" if written else "nothing written"
            print(f"mil-passes: interrupted; {said}", file=sys.stderr)
            return EXIT_INTERRUPTED


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_coremltools()
    run: Callable[[argparse.Namespace], int] = args.run
    with optional_frameworks_refused():
        try:
            return run(args)
        except Exception as error:  # noqa: BLE001 - sorted below: users' mistakes get one line
            raise_if_interrupted()  # what follows a swallowed interrupt is the interrupt's doing
            message = _user_error(error)
            if message is None:
                print(internal_error_line(error), file=sys.stderr)
                return EXIT_INTERNAL
            print(one_line(f"mil-passes: error: {message}"), file=sys.stderr)
            return EXIT_ERROR


def _user_error(error: Exception) -> str | None:
    """One line for what a user can cause; None for a bug (the traceback is then wanted)."""
    from ..runner import UnknownPass
    from ..lint.chips import UnknownChip
    from ..package.files import PackageError
    from ..reference.memory import NotEnoughMemoryError, available_bytes, size_text
    from ..verify import VerifyError

    if isinstance(error, (PackageError, UnknownPass, VerifyError, UnknownChip, NotEnoughMemoryError)):
        return str(error)
    if isinstance(error, MemoryError):  # past the check of what a model needs: say so, no traceback
        available = available_bytes()
        room = f"; this machine had {size_text(available)} available" if available is not None else ""
        return f"out of memory: {' '.join(str(error).split()) or 'an allocation failed'}{room}"
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}"
    return None


if __name__ == "__main__":
    sys.exit(main())

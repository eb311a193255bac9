"""The mil-passes command: lint and fix Core ML models (ML Programs) as they are on disk.

Exit status: 0 done (lint: no error finding; optimize/demo: written, no error left; verify: no
pass changed the outputs); 1 lint found an error (optimize: written, but an error finding is left;
verify: a pass changed the outputs, raised or broke the program); 2 nothing done: a bad path,
model, option or configuration, said in one line on stderr; 3 an internal error of mil-passes (one
line on stderr naming the file the traceback went to); 130 interrupted. With several inputs, the
worst status of any.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterator, NoReturn

from .._version import __version__
from ..package.atomic import committed, raise_if_interrupted, remove_own_staging
from .interrupts import interrupts_recorded, stop_raising
from .choices import COMPUTE_UNITS, OUTPUT_FORMATS
from .exit_status import EPILOG, EXIT_ERROR, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK
from .internal_error import internal_error_line
from .optional_frameworks import optional_frameworks_refused
from .progress import Progress, progress_enabled
from ..package.untrusted import one_line, printable, shown


def _say(*lines: str, flush: bool = False) -> None:
    """Print each of ``lines`` (none: an empty line), which may hold names from a package, as one
    line: every character a terminal would act on (escape sequences, carriage returns, line
    breaks) escaped."""
    print("\n".join(printable(line) for line in lines), flush=flush)


def _steps(pass_count: int) -> int:
    return 1 + pass_count + 1 + 2  # read, passes, cleanup, write, check


def _optimize(args: argparse.Namespace) -> int:
    from .inputs import expand
    from .json_output import optimize_json
    from ..runner import resolve_pass_names
    from .settings import settings_for_inputs
    from .text_output import explain, format_report

    raise_if_interrupted()  # a checkpoint after the imports (coremltools swallows some interrupts)
    inputs = expand(args.inputs)
    settings = settings_for_inputs(args, inputs)
    passes = [resolve_pass_names(chosen.passes) for chosen in settings]  # an unknown pass fails before any input
    outputs = _optimize_outputs(args, inputs)
    fmt, documents, reports = settings[0].output_format, [], []

    def one(path: Path, number: int) -> int:
        chosen = settings[number]
        _verbose(args, f"{path}: {chosen.describe()}")
        run = _optimize_one(args, path, outputs[number], passes[number], progress=fmt == "text" and not args.quiet)
        if run is None:
            if fmt == "text" and not args.quiet:
                _say(f"{path}: nothing to fix; left as it is")
            return EXIT_OK
        report = run.report
        report.findings_before = chosen.selection.apply(report.findings_before)
        report.findings_after = chosen.selection.apply(report.findings_after)
        reports.append((run.output, report.findings_after))
        documents.append(optimize_json(run))
        if fmt == "text":
            if not args.quiet:
                _say(f"optimize {run.source} -> {run.output}", "")
                _say(*format_report(report).split("\n"))  # op types, rules and passes: no names
                if args.explain:
                    _say("", *explain(report).split("\n"))
                _say()
            named = f"{run.output}: " if len(inputs) > 1 else ""  # -q: which model each line is of
            _print_findings("left", report.findings_after, quiet=args.quiet, named=named)
            if not args.quiet:
                _say(f"wrote {run.output} ({run.seconds:.2f} s)")
        return _findings_status(args, report.findings_after)

    worst, failed = _each_input(inputs, one)
    _emit(fmt, documents, reports, len(inputs) > 1)
    if fmt == "text" and not args.quiet and len(inputs) > 1:
        left = [f for _, findings in reports for f in findings]
        written = f"{len(reports)} written{_failed(failed)}"
        _say(f"optimize: {_count(len(inputs), 'model')}, {written}; left: {_counts(left)}")
    return worst


def _optimize_outputs(args: argparse.Namespace, inputs: list[Path]) -> list[Path]:
    """Where each input is written: itself (--in-place), OUT, or DIR/NAME.mlpackage (several inputs,
    or -o an existing folder that is not a package)."""
    from ..package.files import PackageError

    if args.in_place:
        if args.output is not None:
            raise PackageError("--in-place and -o/--output: give one of them")
        for path in inputs:
            if path.suffix.lower() != ".mlpackage":
                raise PackageError(f"{path}: --in-place rewrites .mlpackage folders only; name an -o OUT.mlpackage")
        return list(inputs)
    if args.output is None:
        raise PackageError("-o/--output OUT (or DIR for several inputs) or --in-place is required")
    output = Path(args.output)
    several = len(inputs) > 1
    if not several and not (output.is_dir() and output.suffix.lower() != ".mlpackage"):
        return [output]
    if output.suffix.lower() == ".mlpackage" or (output.exists() and not output.is_dir()):
        raise PackageError(f"{output}: several inputs are written to a folder; -o names a folder, not a package")
    outputs = [output / f"{path.stem}.mlpackage" for path in inputs]
    repeated = next((o for number, o in enumerate(outputs) if o in outputs[:number]), None)
    if repeated is not None:
        raise PackageError(f"{repeated}: two inputs would be written there; optimize them apart")
    output.mkdir(parents=True, exist_ok=True)
    return outputs


def _fixed_by(fix: str | None, names: list[str]) -> bool:
    """Whether a finding's fix is done by running ``names``: a pass among them, or a repair
    optimize makes whatever passes run (the protobuf's: "mil-passes optimize (...)")."""
    return fix is not None and fix != "" and (fix in names or not fix.startswith("webnn::"))


def _optimize_one(args: argparse.Namespace, source: Path, output: Path, names: list[str], *, progress: bool):
    """optimize_package on one input (a progress bar if ``progress`` and stdout is a terminal); None
    when --in-place finds nothing a pass would change (lint names a fix exactly where a pass would
    change the model), so the package stays untouched."""
    from ..package.io import read
    from ..package.optimize import optimize_package

    if args.in_place and not any(_fixed_by(finding.fix, names) for finding in read(source).lint()):
        return None
    bar = Progress(_steps(len(names)), progress_enabled(not progress))
    try:
        return optimize_package(source, output, names, force=args.force or args.in_place, on_step=bar)
    finally:
        bar.close()


def _print_findings(when: str, findings, *, quiet: bool = False, named: str = "") -> None:
    """The grouped findings under a heading; ``quiet``: the lines alone, each after ``named``."""
    from .grouped_findings import grouped

    if quiet:
        for line in grouped(findings):
            _say(named + line)
        return
    if not findings:
        _say(f"findings {when}: none")
        return
    _say(f"findings {when}:")
    for line in grouped(findings):
        _say(f"  {line}")


def _findings_status(args: argparse.Namespace, findings) -> int:
    """1 for an error finding, unless --exit-zero."""
    errors = any(f.severity == "error" for f in findings)
    return EXIT_FINDINGS if errors and not args.exit_zero else EXIT_OK


def _counts(findings) -> str:
    from ..lint import SEVERITIES

    return ", ".join(_count(sum(f.severity == s for f in findings), s) for s in SEVERITIES)


def _failed(failed: int) -> str:
    return f", {failed} could not be read" if failed else ""


def _each_input(inputs: list[Path], one: Callable[[Path, int], int]) -> tuple[int, int]:
    """``one(path, number)`` for each input; a user's mistake about one input is its line on stderr
    and status 2, and the others still run. The worst status, and how many inputs failed."""
    worst, failed = EXIT_OK, 0
    for number, path in enumerate(inputs):
        try:
            status = one(path, number)
        except Exception as error:  # noqa: BLE001 - a bug still reaches _main's handler
            raise_if_interrupted()
            message = _user_error(error)
            if message is None or len(inputs) == 1:
                raise
            print(one_line(f"mil-passes: error: {message}"), file=sys.stderr)
            status, failed = EXIT_ERROR, failed + 1
        worst = max(worst, status)
    return worst, failed


def _emit(fmt: str, documents: list[dict], reports: list, several: bool) -> None:
    """The machine formats, once every input has run: JSON (one document, or a list for ``several``
    inputs), GitHub workflow commands, or one SARIF log."""
    if fmt == "json" and (documents or several):
        print(json.dumps(documents if several else documents[0], indent=2))
    elif fmt == "github":
        from .github import workflow_commands

        for line in workflow_commands(reports):
            _say(line)
    elif fmt == "sarif":
        from .sarif import sarif_log

        print(json.dumps(sarif_log(reports), indent=2))


def _verbose(args: argparse.Namespace, line: str) -> None:
    if args.verbose:
        print(one_line(f"mil-passes: {line}", 1000), file=sys.stderr)


def _lint(args: argparse.Namespace) -> int:
    from .json_output import lint_json
    from ..lint.dry_run import checked_families
    from ..package.io import read
    from .grouped_findings import findings_lines
    from .inputs import expand
    from .settings import settings_for_inputs

    raise_if_interrupted()
    checked_families(args.chip)  # an unknown chip fails before the model is read
    inputs = expand(args.inputs)
    settings = settings_for_inputs(args, inputs)
    fmt, documents, reports = settings[0].output_format, [], []

    def one(path: Path, number: int) -> int:
        chosen = settings[number]
        _verbose(args, f"{path}: {chosen.describe()}")
        found, placement = read(path).lint_report(chosen.chip)
        findings = chosen.selection.apply(found)
        reports.append((path, findings))
        document = lint_json(path, findings, placement)
        document["compute_units"] = chosen.selection.compute_units
        documents.append(document)
        if fmt == "text":
            named = f"{path}: " if args.quiet and len(inputs) > 1 else ""  # -q: which model each line is of
            for line in findings_lines(findings, every=args.all):
                _say(named + line)
            if not args.quiet:
                _lint_summary(args, path, findings, found, placement, chosen)
        return _findings_status(args, findings)

    worst, failed = _each_input(inputs, one)
    _emit(fmt, documents, reports, len(inputs) > 1)
    if fmt == "text" and not args.quiet and len(inputs) > 1:
        every = [f for _, findings in reports for f in findings]
        _say(f"lint: {_count(len(inputs), 'model')}{_failed(failed)}; {_counts(every)}")
    return worst


def _lint_summary(args: argparse.Namespace, path: Path, findings, found, placement, chosen) -> None:
    """The placement line (or why there is none), the segments (--segments) and the counts."""
    from .grouped_findings import findings_lines, placement_line, segment_lines

    if chosen.selection.neural_engine:
        _say(placement_line(placement))
        if args.segments:
            _say(*segment_lines(placement))
    else:
        hidden = chosen.selection.hidden_by_compute_units(found)
        _say(
            f"placement: not predicted: compute units {chosen.selection.compute_units} leave out the Neural Engine"
            f" ({_count(hidden, 'finding')} of its rules not reported)"
        )
    hint = "" if args.all or len(findings_lines(findings)) == len(findings) else "; --all lists each"
    _say(f"{path}: {_counts(findings)}{hint}" if findings else f"{path}: no findings")


def _verify(args: argparse.Namespace) -> int:
    from .json_output import verify_json
    from ..verify import resolve_pipeline, verify_package
    from .status_line import StatusLine
    from .text_output import format_row, format_summary

    raise_if_interrupted()
    names = resolve_pipeline(args.pipeline).passes  # an unknown name fails before any output
    width = max((len(name) for name in names), default=0)
    feeds = (
        _count(args.feeds, "feed") + f" (seed {args.seed})" if isinstance(args.feeds, int) else f"feeds {args.feeds}"
    )
    function = f", function {args.function}" if args.function else ""
    header = f"verify {args.input}{function}: pipeline {args.pipeline} ({_count(len(names), 'pass')}), {feeds}"
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
            function=args.function,
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


def _verify_each(args: argparse.Namespace) -> int:
    """verify on each input (its configuration's pipeline unless --pipeline names one); JSON: one
    document, or a list for several inputs; the worst status."""
    import contextlib
    import io

    from .inputs import expand
    from .settings import settings_for_inputs

    inputs = expand(args.inputs)
    settings = settings_for_inputs(args, inputs)
    documents: list = []
    culprits: list[Path] = []

    def one(path: Path, number: int) -> int:
        _verbose(args, f"{path}: {settings[number].describe()}")
        pipeline = settings[number].pipeline or "default"
        single = argparse.Namespace(**{**vars(args), "input": str(path), "pipeline": pipeline})
        if args.json and len(inputs) > 1:
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                status = _verify(single)
            documents.append(json.loads(printed.getvalue()))
        else:
            status = _verify(single)
        if status == EXIT_FINDINGS:
            culprits.append(path)
        return status

    worst, failed = _each_input(inputs, one)
    if documents:
        print(json.dumps(documents, indent=2))
    elif len(inputs) > 1 and not args.quiet:
        changed = f"{len(culprits)} with a pass that changed the outputs"
        _say(f"verify: {_count(len(inputs), 'model')}{_failed(failed)}; {changed}")
    return worst


def _rule(args: argparse.Namespace) -> int:
    from .rule_doc import all_rule_facts, rule_facts, rule_text

    if args.all == (args.rule is not None):
        raise _UsageError("rule: name one rule ID, or --all")
    facts = all_rule_facts() if args.all else [rule_facts(args.rule)]
    if args.json:
        print(json.dumps(facts if args.all else facts[0], indent=2))
        return EXIT_OK
    for number, rule in enumerate(facts):
        print("\n" * bool(number) + "\n".join(printable(line) for line in rule_text(rule)))
    return EXIT_OK


class _UsageError(ValueError):
    """Options that do not go together."""


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 'es' if noun.endswith('s') else 's'}"


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    raise_if_interrupted()
    progress = Progress(_steps(4), progress_enabled(args.quiet))
    try:
        print(run_demo(args.output, layers=args.layers, channels=args.channels, on_step=progress))
    finally:
        progress.close()
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from .pass_list import lines

    print(*lines(everything=args.all), sep="\n")
    return EXIT_OK


# verify's predictions per feed of a stateful model (mil_passes.verify.DEFAULT_STEPS; not imported
# here, to keep the command's start light).
DEFAULT_STEPS = 4


def _count_or_path(text: str) -> int | str:
    """``--feeds``: a number of random feeds (at least 1), or a path to feeds of one's own."""
    return _positive(text) if text.strip().lstrip("-").isdigit() else text


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse's parser with a usage mistake said in one line (exit 2), as every other mistake is."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, one_line(f"mil-passes: error: {self.prog}: {message} (--help lists the options)") + "\n")


def _command(
    commands, name: str, summary: str, run: Callable[[argparse.Namespace], int], inputs: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand that ``run`` runs, whose help line is ``summary`` and whose --help starts with it
    and ends with the exit statuses; ``inputs``: the help of its IN arguments (one or more)."""
    parser = commands.add_parser(
        name, help=summary, description=summary, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if inputs is not None:
        parser.add_argument("inputs", metavar="IN", nargs="+", help=inputs)
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mil-passes",
        description=__doc__.splitlines()[0],
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mil-passes {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    optimize = _command(
        commands, "optimize", "run the passes on models and write the fixed ones", _optimize, _INPUTS_HELP
    )
    optimize.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="the .mlpackage to write; with several inputs (or an existing folder), the folder to write each into",
    )
    optimize.add_argument(
        "--in-place",
        action="store_true",
        help="rewrite each .mlpackage in place, atomically; one a pass would not change is left untouched",
    )
    optimize.add_argument(
        "--pass",
        dest="passes",
        metavar="NAME",
        action="append",
        help="run only these passes, NAME or NAME,NAME,... (repeatable; default: all, in pipeline order)",
    )
    optimize.add_argument("--explain", action="store_true", help="say why each refused match was left")
    optimize.add_argument("--force", action="store_true", help="replace OUT (or IN) if it exists")

    lint = _command(commands, "lint", "what Core ML would refuse or hide in models", _lint, _INPUTS_HELP)
    lint.add_argument(
        "--chip",
        metavar="NAME",
        help="check the Neural Engine rules for one chip (M1 ... M5, A14 ... A19; default: every chip from M1/A14)",
    )
    lint.add_argument("--all", action="store_true", help="list every finding (default: repeats grouped into one line)")
    lint.add_argument("--segments", action="store_true", help="list the segments of the predicted placement")

    verify = _command(
        commands,
        "verify",
        "run a pass pipeline pass by pass; name the pass that changes the outputs",
        _verify_each,
        _INPUTS_HELP + " (convert with pass_pipeline=ct.PassPipeline.EMPTY to keep the program before any pass)",
    )
    verify.add_argument(
        "--pipeline",
        metavar="NAME",
        help="default, empty, cleanup, default_palettization, default_pruning, mil_passes "
        "(DEFAULT with this package's passes), or passes P1,P2,... (default: default)",
    )
    verify.add_argument(
        "--feeds",
        type=_count_or_path,
        default=3,
        metavar="N|PATH",
        help="N random feeds drawn to fit the model (default 3), or the user's own: FILE.npz (one feed, "
        "arrays named as the inputs) or a folder of them",
    )
    verify.add_argument(
        "--function",
        metavar="NAME",
        help="verify only this function of a multifunction model (default: every function)",
    )
    verify.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the feeds (default 0)")
    verify.add_argument(
        "--steps",
        type=_positive,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"predictions per feed of a stateful model, from zero states (default {DEFAULT_STEPS})",
    )
    verify.add_argument("--json", action="store_true", help="print the rows as JSON (mil-passes/verify/1)")

    listing = _command(commands, "list", "the passes, in pipeline order", _list)
    listing.add_argument(
        "--all", action="store_true", help="also the replacements of coremltools' passes and the guards, a line each"
    )

    rule = _command(
        commands, "rule", "a lint rule: trigger, severity, chips, consequence, confidence, sources, fix", _rule
    )
    rule.add_argument("rule", metavar="ID", nargs="?", help="the rule's id (mil-passes rule --all lists them)")
    rule.add_argument("--all", action="store_true", help="every rule")
    rule.add_argument("--json", action="store_true", help="print the rule (or, with --all, the list) as JSON")

    demo = _command(commands, "demo", "fix the built-in streaming-cache example and show what changed", _demo)
    demo.add_argument(
        "-o", "--output", default="demo_out", metavar="DIR", help="folder for the packages (default: demo_out)"
    )
    demo.add_argument("--layers", type=_positive, default=24, metavar="N", help="layers of the example (default 24)")
    demo.add_argument(
        "--channels", type=_positive, default=1024, metavar="C", help="channels of each layer (default 1024)"
    )

    from .specialize import add_specialize  # the specialize command (cli/specialize.py)

    add_specialize(commands, _command)
    for command in (lint, optimize):
        _add_rule_options(command)
    for command in (lint, optimize, verify):
        command.add_argument(
            "--config", metavar="FILE", help="read [tool.mil-passes] from FILE (default: the nearest pyproject.toml)"
        )
    for command in commands.choices.values():
        command.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
        command.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    return parser


QUIET_HELP = "print the findings (or the report) only: no progress, no summaries"
VERBOSE_HELP = "say on stderr which configuration each input uses, and each match a pass refuses"
_INPUTS_HELP = (
    ".mlpackage folders, .mlmodel files holding an ML Program, or folders to search for them; "
    "a path inside a package stands for the package"
)


def _add_rule_options(command: argparse.ArgumentParser) -> None:
    """The options that choose what lint and optimize report (ruff's names)."""
    rules = "rule ids or prefixes, RULE or RULE,RULE,... (repeatable)"
    command.add_argument("--select", metavar="RULES", action="append", help=f"report only these: {rules}")
    command.add_argument("--extend-select", metavar="RULES", action="append", help=f"report these too: {rules}")
    command.add_argument("--ignore", metavar="RULES", action="append", help=f"do not report these: {rules}")
    command.add_argument("--exit-zero", action="store_true", help="exit 0 even when an error finding is reported")
    command.add_argument(
        "--compute-units",
        type=str.lower,
        choices=COMPUTE_UNITS,
        help="where the model is deployed (coremltools' ComputeUnit names); the Neural Engine rules apply only "
        "with cpu_and_ne and all (default: all)",
    )
    command.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        help="text, json (mil-passes/lint/2, mil-passes/optimize/1), github (workflow commands) or sarif (2.1.0); "
        "default text",
    )
    command.add_argument(
        "--json", dest="output_format", action="store_const", const="json", help="the same as --output-format json"
    )


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


@contextlib.contextmanager
def _declines_logged(verbose: bool) -> Iterator[None]:
    """With --verbose, the passes' debug log (each match they decline, and why) on stderr."""
    if not verbose:
        yield
        return
    logger = logging.getLogger("mil_passes")
    handler, level = logging.StreamHandler(sys.stderr), logger.level
    handler.setFormatter(logging.Formatter("mil-passes: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _main(argv: list[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage mistake (said in one line)
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    _quiet_coremltools()
    run: Callable[[argparse.Namespace], int] = args.run
    with optional_frameworks_refused(), _declines_logged(args.verbose):
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
    from .config import ConfigError

    user_errors = (PackageError, UnknownPass, VerifyError, UnknownChip, NotEnoughMemoryError, ConfigError, _UsageError)
    if isinstance(error, user_errors):
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

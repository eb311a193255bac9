"""Run every pass of the package over random programs and report what breaks.

    python -m mil_passes.testing.fuzz [--pass NAME]... [--pipeline NAME]... [--each-pass-of NAME] [--states]
                                      [--examples N] [--seed S] [--jobs J] [--shrink-seconds T]
                                      [--minimize [--reproducers DIR]]

Targets: each registered ``webnn::`` pass (``mil_passes.PASS_NAMES``), ``pipeline``
(``mil_passes.pipeline(PassPipeline.EMPTY)``: the package's passes alone, in order), and ``lint``
(lint names a pass exactly when that pass changes the program: ``lint_contract``). Each
program from :func:`~mil_passes.testing.strategies.programs` goes through ``check_pass``
(validate, interface unchanged, outputs bit-exact on every feed, idempotent).

Any other registered pass (``--pass common::const_elimination``), a pipeline (``--pipeline
default``, named as ``mil-passes verify --pipeline`` takes them) and each distinct pass of a
pipeline (``--each-pass-of default``) are checked as ``mil-passes verify`` checks them: no pass
may raise, break ``validate()`` or change an output beyond the program's precision (coremltools
does not promise bit-exact or idempotent passes). ``--minimize`` shrinks each failing program
further (``minimize.py``) and writes it as a standalone script (``reproducer.py``) under
``--reproducers`` (default ``reproducers/``). One line per target::

    webnn::NAME: N programs, F failures, H% rewritten[: M miscompiles, C crashes, P precision]
                 [; R repaired][; U unchecked]

("rewritten": the printed program changed), then each failure shrunk to a minimal program in
MIL text form with its feeds (shrinking stops after ``SHRINK_SECONDS`` per target, keeping the
smallest program so far, and says so). Each failure has a class: *miscompile* (an output changed beyond
the pass's declared precision, or the program no longer validates), *crash* (the pass raised),
or *precision* (a pass that declares fp16 compute, ``common::add_fp16_cast``, changed only
values: fp16 rounding or overflow beyond ±65504, which that pass documents); "repaired" counts
programs where outputs NaN or infinite before became finite, every other value the same, by a
pass that declares it may (``repairs.py``: not a failure); "unchecked" counts programs where the
interpreter had no kernel for an op a pass made.

The fuzzer's own defects do not stop a run: an exception while drawing a target's programs (or
shrinking or minimizing them) ends that target's row as ``NAME: generator error after K programs:
…`` with the command that reproduces it, and the other targets still run. Exit status: 0 no
miscompile nor crash; 1 a miscompile or a crash (a bug found); 4 a generator error; 5 both; 2 a
bad option.

``--states`` fuzzes the chosen targets (by default every ``webnn::`` pass and ``pipeline``) on
stateful programs instead (``state_plants.py``: windows on ``read_state``, ``slice_update`` at
run-time positions, several states, states in ``cond`` / ``while_loop`` bodies), each named
``states:TARGET`` and checked by ``check_stateful``: every step's outputs and states bit for bit
over 4 steps from zero states, whatever the target (coremltools' passes included: these programs
only move data). ``--states --pipeline mil_passes`` adds ``mil_passes.pipeline()``.

coremltools targets draw programs with DEFAULT's patterns planted in (``default_plants.py``):
each target gets its own plants, the package's, and a mix of the others; names are unique
except for ``common::dedup_op_and_var_names`` and the package's targets. Runs are reproducible: the example
database is off, ``--seed`` fixes the draws, and hypothesis leaves the constants of the loaded
modules out of them (``seed_draws.py``), so a target draws the same programs alone, after other
targets and in any process. ``--jobs`` runs that many targets at once, in
worker processes; the output is the same, in the same order. A progress line per tenth of the
programs goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import re
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeAlias

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis.control import current_build_context
from hypothesis.strategies import SearchStrategy

from ...schedule import PASS_NAMES, pipeline
from ...runner import run_pass
from ...verify import resolve_pipeline, verify_program
from ..check import assert_equivalent, check_pass
from .failure_class import CRASH, FAILURE_CLASSES, MISCOMPILE, PRECISION, failure_class, feed_for
from .lint_contract import check_lint_contract
from .minimize import minimize
from .repairs import REPAIRED, check_repairs, may_repair, passes_of
from ..programs.recipe import program_text
from ..plants.default import plants_for
from ..plants.states import STATE_PASSES, check_stateful, stateful_programs
from ..programs import seed_draws
from .reproducer import write_reproducer
from ..strategies import NAME_POOL, DrawnProgram, programs

Target: TypeAlias = "str | PassPipeline"
LINT = "lint"  # the target that checks lint against the passes, not a pass
FOUND_BUG, GENERATOR_ERROR = 1, 4  # exit status bits: a miscompile or crash; the fuzzer's own error
SHRINK_SECONDS = 120.0  # shrinking of one target's failures stops after this (the smallest kept)


@dataclass
class Failure:
    """A failing program, shrunk, and what went wrong."""

    error: str
    program: DrawnProgram
    kind: str = MISCOMPILE  # one of FAILURE_CLASSES

    def __str__(self) -> str:
        return f"{self.error}\n{self.program!r}"


@dataclass
class FuzzReport:
    """What one target did over the drawn programs."""

    target: str
    programs: int = 0
    failures: int = 0
    rewritten: int = 0
    minimal: list[Failure] = field(default_factory=list)
    classes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_CLASSES, 0))
    unchecked: int = 0
    repaired: int = 0  # programs a pass that may repair made finite where they were NaN or infinite
    generator_error: str | None = None  # the fuzzer's own exception, in one line
    shrink_stopped: float | None = None  # seconds after which shrinking stopped early

    def counts(self) -> dict[str, int]:
        """Failures per class; a failure not classed as a crash or precision is a miscompile."""
        crashes, precision = self.classes.get(CRASH, 0), self.classes.get(PRECISION, 0)
        return {MISCOMPILE: self.failures - crashes - precision, CRASH: crashes, PRECISION: precision}

    def line(self) -> str:
        share = 100 * self.rewritten / self.programs if self.programs else 0.0
        text = f"{self.target}: {self.programs} programs, {self.failures} failures, {share:.0f}% rewritten"
        if self.failures:
            counts = self.counts()
            text += f": {counts[MISCOMPILE]} miscompiles, {counts[CRASH]} crashes, {counts[PRECISION]} precision"
        if self.repaired:
            text += f"; {self.repaired} repaired"
        if self.unchecked:
            text += f"; {self.unchecked} unchecked"
        if self.generator_error is not None:
            text += f"; generator error after {self.programs} programs: {self.generator_error}"
        return text

    @property
    def serious(self) -> bool:
        """A miscompile or a crash (what the exit status reports)."""
        counts = self.counts()
        return bool(counts[MISCOMPILE] or counts[CRASH])

    @property
    def status(self) -> int:
        """This target's part of the exit status: :data:`FOUND_BUG` and/or :data:`GENERATOR_ERROR`."""
        return (FOUND_BUG if self.serious else 0) | (GENERATOR_ERROR if self.generator_error is not None else 0)


def default_targets() -> dict[str, Target]:
    """Every registered pass of the package, then the package's pipeline on its own."""
    targets: dict[str, Target] = {name: name for name in PASS_NAMES}
    targets["pipeline"] = pipeline(PassPipeline.EMPTY)
    targets[LINT] = LINT
    return targets


PIPELINE_PREFIX = "pipeline:"
STATES_PREFIX = "states:"  # the target fuzzed on stateful programs (state_plants.py)


def select_targets(
    names: list[str] | None,
    pipelines: list[str] | None = None,
    each_pass_of: list[str] | None = None,
    states: bool = False,
) -> dict[str, Target]:
    """``names`` as targets: ``pipeline``, ``webnn::NAME`` or ``NAME``, or any registered pass;
    then ``pipeline:NAME`` for each of ``pipelines``, and each distinct pass of ``each_pass_of``.
    A name or pipeline written ``states:NAME`` is that target fuzzed on stateful programs; with
    ``states``, every target is (``lint`` left out), and no names nor ``each_pass_of`` mean the
    package's passes and ``pipeline``."""
    known = default_targets()

    def key(name: str) -> str:
        return f"{STATES_PREFIX}{name}" if states and not name.startswith(STATES_PREFIX) else name

    if states and not names and not each_pass_of:
        names = [name for name in known if name != LINT]
    extra: dict[str, Target] = {}
    for name in pipelines or ():
        prefix, bare = _split_states(name)
        extra[key(f"{prefix}{PIPELINE_PREFIX}{bare}")] = resolve_pipeline(bare)
    for name in each_pass_of or ():
        extra.update({key(pass_name): pass_name for pass_name in resolve_pipeline(name).passes})
    if not names:
        return extra if extra else known
    chosen: dict[str, Target] = {}
    for name in names:
        prefix, bare = _split_states(name)
        full = bare if bare in ("pipeline", LINT) or "::" in bare else f"webnn::{bare}"
        if full not in known and not _registered(full):
            raise ValueError(f"unknown pass '{bare}': choose from {', '.join(known)}")
        if not (full == LINT and (prefix or states)):
            chosen[key(f"{prefix}{full}")] = known.get(full, full)
    return {**chosen, **extra}


def _split_states(name: str) -> tuple[str, str]:
    """``("states:", NAME)`` for ``states:NAME``, else ``("", name)``."""
    if name.startswith(STATES_PREFIX):
        return STATES_PREFIX, name[len(STATES_PREFIX) :]
    return "", name


def is_package_target(name: str) -> bool:
    """The package's passes (``webnn*::``, test passes included), its pipeline and ``lint`` get
    ``check_drawn``; coremltools' passes and pipelines get ``verify``'s check."""
    return name in ("pipeline", LINT) or name.split("::")[0].startswith("webnn")


def _registered(name: str) -> bool:
    try:
        PASS_REGISTRY[name]
    except KeyError:
        return False
    return True


def check_drawn(drawn: DrawnProgram, target: Target, statuses: set[str] | None = None) -> bool:
    """``check_pass`` on the first feeds, equivalence on the others; True if rewritten. Where
    that fails and a pass of ``target`` may repair, :func:`~.repairs.check_repairs` decides, and
    a repair adds ``repaired`` to ``statuses``. The ``lint`` target checks lint's contract
    instead (True: some pass would rewrite)."""
    if target == LINT:
        return check_lint_contract(drawn)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # a pipeline draws a progress bar per run
            after = check_pass(drawn.build, target, inputs=drawn.feeds[0])
        for feeds in drawn.feeds[1:]:
            assert_equivalent(drawn.reference(), after, feeds)
    except AssertionError:
        if not any(map(may_repair, passes_of(target))):
            raise
        after, repaired = check_repairs(drawn, target)
        if not repaired:
            raise  # not a repair: check_pass's own failure stands
        if statuses is not None:
            statuses.add(REPAIRED)
    return program_text(after) != program_text(drawn.reference())


def check_verified(drawn: DrawnProgram, target: Target, statuses: set[str] | None = None) -> bool:
    """``verify_program`` of ``target`` (a pass or a pipeline) on the drawn program and its feeds;
    raises naming the culprit pass (the error's ``failure_class`` says which class). True if the
    program printed differently after. ``statuses`` gets every pass's status."""
    built: list = []

    def build():
        built.append(drawn.build())
        return built[-1]  # verify runs the passes on it

    verification = verify_program(build, [target] if isinstance(target, str) else target, feeds=drawn.feeds)
    if statuses is not None:
        statuses.update(row.status for row in verification.rows)
    culprit = verification.culprit
    if culprit is not None:
        after, before, feeds = None, drawn.reference(), drawn.feeds
        if culprit.status == "changed":
            given = program_before_pass(drawn, target, culprit.index)
            after, feeds = built[0], [feed_for(before, given, feed) for feed in drawn.feeds]
            before = given
        kind = failure_class(culprit, before, after, feeds)
        raise culprit_error(culprit.name, culprit.status, kind)(f"{culprit.name} {culprit.status}: {culprit.reason()}")
    return program_text(built[0]) != program_text(drawn.reference())


def program_before_pass(drawn: DrawnProgram, target: Target, index: int) -> Program:
    """The drawn program after the passes of ``target`` that come before its ``index``-th (from
    1), each with the pipeline's options, as ``verify`` ran them: what the culprit pass was given."""
    resolved = resolve_pipeline([target] if isinstance(target, str) else target)
    prog = drawn.build()
    for name in resolved.passes[: index - 1]:
        run_pass(prog, name, resolved)
    return prog


def classify(error: BaseException) -> str:
    """The class of a failure: a culprit error carries it; an assertion of the package's own
    checks is a miscompile; any other exception, a crash."""
    kind = getattr(error, "failure_class", None)
    if kind is not None:
        return kind
    return MISCOMPILE if isinstance(error, AssertionError) else CRASH


_CULPRIT_ERRORS: dict[tuple[str, str, str], type[AssertionError]] = {}


def culprit_error(pass_name: str, status: str, kind: str = MISCOMPILE) -> type[AssertionError]:
    """An AssertionError class for each culprit pass, status and failure class: hypothesis tells
    failures apart by exception type and line, so a pipeline's culprits are shrunk and reported
    one by one."""
    key = (pass_name, status, kind)
    if key not in _CULPRIT_ERRORS:
        label = "".join(part.title() for part in re.split(r"[^A-Za-z0-9]+", pass_name) if part)
        suffix = "" if kind == MISCOMPILE else kind.title()
        _CULPRIT_ERRORS[key] = type(f"{label}{status.title()}{suffix}", (AssertionError,), {"failure_class": kind})
    return _CULPRIT_ERRORS[key]


def strategy_for(name: str) -> SearchStrategy:
    """The programs a target is fuzzed on: ``states:`` targets and the passes of ``STATE_PASSES``
    get stateful programs; the package's targets get ``programs()``; coremltools' passes and
    pipelines get DEFAULT's plants too (:func:`~.default_plants.plants_for`), with unique names
    unless the target renames duplicates."""
    if _stateful(name):
        return stateful_programs()
    if is_package_target(name):
        return programs()
    pass_name = name[len(PIPELINE_PREFIX) :] if name.startswith(PIPELINE_PREFIX) else name
    duplicates = pass_name in ("common::dedup_op_and_var_names", "mil_passes")
    return programs(plant=plants_for(pass_name, not duplicates), name_pool=NAME_POOL if duplicates else None)


def _stateful(name: str) -> bool:
    """A ``states:`` target, or a pass of the package that only a state gives work."""
    return name.startswith(STATES_PREFIX) or name.split("::")[-1] in STATE_PASSES


def checker(name: str) -> Callable[[Any, Target], bool]:
    """How the target called ``name`` is checked."""
    if _stateful(name):
        return check_stateful
    return check_drawn if is_package_target(name) else check_verified


def _settings(examples: int, phases: tuple[Phase, ...]) -> settings:
    return settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=phases,
        verbosity=Verbosity.quiet,
        report_multiple_bugs=True,
        suppress_health_check=list(HealthCheck),
    )


def _run(
    body: Callable[[DrawnProgram], None], strategy: SearchStrategy, examples: int, at: int, phases: tuple[Phase, ...]
) -> None:
    test = seed(at)(_settings(examples, phases)(given(strategy)(body)))
    with seed_draws.seed_only_draws():  # the same programs whatever the process has imported
        test()


def _describe(error: BaseException) -> str:
    lines = traceback.format_exception_only(type(error), error)
    text = "".join(lines).strip()
    return text if len(text) < 2000 else text[:2000] + " …"


def generator_error(error: BaseException) -> str:
    """One line for the fuzzer's own exception: its first line and the innermost frame of the
    program generator that drew what failed (an op-table entry or a plant, not the builder's
    replay under it), if any."""
    message = str(error).strip()
    first = f"{type(error).__name__}: {message.splitlines()[0] if message else ''}"[:300]
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _GENERATOR_FILES.search(f.filename)]
    if not frames:
        return first
    drawing = [f for f in frames if not re.search(r"programs[/\\](grower|recipe)\.py$", f.filename)]
    frame = (drawing or frames)[-1]
    where = _GENERATOR_FILES.search(frame.filename)
    return f"{first} (at {where.group(1) if where else frame.filename}:{frame.lineno} in {frame.name})"


_GENERATOR_FILES = re.compile(r"mil_passes[/\\](testing[/\\](?:programs[/\\]|plants[/\\]|strategies\.py).*)$")


def fuzz(
    name: str,
    target: Target,
    *,
    examples: int = 100,
    at: int = 0,
    strategy: SearchStrategy | None = None,
    progress: Callable[[FuzzReport], None] | None = None,
    check: Callable[[Any, Target], bool] | None = None,
    shrink_seconds: float = SHRINK_SECONDS,
) -> FuzzReport:
    """Check ``target`` on ``examples`` drawn programs; shrink the failures if there are any.
    ``progress`` gets the report after each program; ``check`` replaces the target's checker
    (for another kind of drawn program, such as :mod:`~mil_passes.testing.plants.states`'). An
    exception while drawing ends the run with ``generator_error`` set (the report so far kept)."""
    strategy = strategy_for(name) if strategy is None else strategy
    report = FuzzReport(name)
    check = checker(name) if check is None else check
    statuses: set[str] = set()

    def count(drawn: DrawnProgram) -> None:
        report.programs += 1
        statuses.clear()
        try:
            if check is check_verified:
                report.rewritten += check_verified(drawn, target, statuses)
            elif check is check_drawn:
                report.rewritten += check_drawn(drawn, target, statuses)
            else:
                report.rewritten += check(drawn, target)
        except Exception as error:
            report.failures += 1
            report.classes[classify(error)] += 1
        report.unchecked += "unchecked" in statuses
        report.repaired += REPAIRED in statuses
        if progress is not None:
            progress(report)

    try:
        _run(count, strategy, examples, at, (Phase.generate,))
    except Exception as error:  # noqa: BLE001 - count() keeps the checks' own: this is the generator's
        report.generator_error = generator_error(error)
    if report.failures:
        report.minimal, report.shrink_stopped = shrink(target, strategy, examples, at, check, shrink_seconds)
    return report


class _OutOfTime(BaseException):
    """Raised from a shrink's test body when its time is up: hypothesis lets it through."""


def shrink(
    target: Target,
    strategy: SearchStrategy,
    examples: int,
    at: int,
    check_one: Callable[[DrawnProgram, Target], bool] = check_drawn,
    seconds: float = SHRINK_SECONDS,
) -> tuple[list[Failure], float | None]:
    """The same draws again, now failing on the first error: hypothesis shrinks each distinct
    failure and replays the minimal one last (``is_final``), which is the one kept. ``seconds``
    after the first failure shrinking stops: then the smallest failing program of each error
    type so far is kept, and the seconds are returned (else None)."""
    found: list[Failure] = []
    smallest: dict[str, tuple[int, Failure]] = {}
    started: list[float] = []

    def check(drawn: DrawnProgram) -> None:
        if started and time.monotonic() - started[0] > seconds:
            raise _OutOfTime
        try:
            check_one(drawn, target)
        except Exception as error:
            failure = Failure(_describe(error), drawn, classify(error))
            if current_build_context().is_final:
                found.append(failure)
            else:
                started[:] = started or [time.monotonic()]
                size = len(repr(drawn))
                key = type(error).__name__
                if key not in smallest or size < smallest[key][0]:
                    smallest[key] = (size, failure)
            raise

    try:
        _run(check, strategy, examples, at, (Phase.generate, Phase.shrink))
    except _OutOfTime:
        return [failure for _, failure in smallest.values()], seconds
    except Exception:  # the failures themselves (an ExceptionGroup when there are several)
        pass
    return found, None


def _progress_every(examples: int) -> Callable[[FuzzReport], None]:
    """A progress line on stderr at every tenth of ``examples`` (the stdout report is unchanged)."""
    step = max(examples // 10, 1)

    def show(report: FuzzReport) -> None:
        if report.programs % step == 0 and report.programs < examples:
            print(
                f"{report.target}: {report.programs} of {examples} programs, {report.failures} failures so far",
                file=sys.stderr,
                flush=True,
            )

    return show


def _target_named(name: str) -> Target:
    if name.startswith(STATES_PREFIX):
        return _target_named(name[len(STATES_PREFIX) :])
    if name.startswith(PIPELINE_PREFIX):
        return resolve_pipeline(name[len(PIPELINE_PREFIX) :])
    return select_targets([name])[name]


def _rendered(
    name: str, examples: int, at: int, reproducers: str | None = None, shrink_seconds: float = SHRINK_SECONDS
) -> tuple[str, int]:
    """Fuzz the target called ``name``: its summary line and shrunk failures as printed, and its
    exit status bits (what a worker process sends back; a shrunk program does not pickle).
    With ``reproducers`` (a folder), each failure is minimized and written there as a script.
    Progress goes to stderr."""
    target = _target_named(name)
    progress = _progress_every(examples)
    report = fuzz(name, target, examples=examples, at=at, progress=progress, shrink_seconds=shrink_seconds)
    status = report.status
    parts = [report.line() + "\n"]
    if report.generator_error is not None:
        parts.append(f"--- {name}: reproduce: {reproduce_command(name, examples, at)}\n")
    if report.shrink_stopped is not None:
        parts.append(
            f"--- {name}: shrinking stopped after {report.shrink_stopped:.0f} s; "
            "the smallest failing programs so far follow\n"
        )
    for i, failure in enumerate(report.minimal, 1):
        parts.append(f"--- {name}: minimal failing program {i} of {len(report.minimal)} ({failure.kind})\n{failure}\n")
        if reproducers is not None:
            try:
                parts.append(minimized_reproducer(name, target, failure, i, reproducers) + "\n")
            except Exception as error:  # noqa: BLE001 - the minimizer's own defect: said, the run goes on
                parts.append(f"--- {name}: generator error while minimizing: {generator_error(error)}\n")
                status |= GENERATOR_ERROR
        parts.append("\n")
    return "".join(parts), status


def reproduce_command(name: str, examples: int, at: int) -> str:
    """The command that fuzzes only the target ``name`` as this run did (the same draws)."""
    prefix, bare = _split_states(name)
    if bare.startswith(PIPELINE_PREFIX):
        option = f"--pipeline {prefix}{bare[len(PIPELINE_PREFIX) :]}"
    else:
        option = f"--pass {name}"
    return f"python -m mil_passes.testing.fuzz {option} --examples {examples} --seed {at}"


def minimized_reproducer(name: str, target: Target, failure: Failure, number: int, folder: str) -> str:
    """Minimize ``failure``'s program and write its script; one line saying where, or why not."""
    if name.startswith(STATES_PREFIX):
        return f"--- {name}: not minimized: a stateful program (rebuild it from the line above: state_plants.py)"
    pipeline = [target] if isinstance(target, str) else target
    minimized = minimize(failure.program.recipe, pipeline, failure.program.feeds)
    if minimized is None:
        return f"--- {name}: not minimized: verify does not see this failure (bit-exactness or idempotence)"
    slug = name.replace("::", "_").replace(":", "_").replace(",", "_")
    path = write_reproducer(minimized, os.path.join(folder, f"{slug}_{number}.py"))
    stopped = f"; stopped early after {minimized.seconds:.0f} s" if minimized.stopped_early else ""
    return (
        f"--- {name}: minimized to {minimized.non_const_ops} non-const ops ({minimized.signature}; "
        f"passes {', '.join(minimized.passes)}{stopped}): {path}"
    )


def _results(
    names: list[str],
    examples: int,
    at: int,
    jobs: int,
    reproducers: str | None = None,
    shrink_seconds: float = SHRINK_SECONDS,
) -> Iterator[tuple[str, int]]:
    """:func:`_rendered` for each name, in order; ``jobs`` > 1 runs targets in forked workers
    (they inherit the registered passes, test-registered ones included). A target whose run
    raises anyway (a worker that died) gets a generator-error row; the others still run."""
    if jobs <= 1 or len(names) <= 1:
        for name in names:
            try:
                yield _rendered(name, examples, at, reproducers, shrink_seconds)
            except Exception as error:  # noqa: BLE001 - one target's defect never stops the others
                yield _failed_row(name, error, examples, at)
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=min(jobs, len(names)), mp_context=context) as pool:
        futures = [pool.submit(_rendered, name, examples, at, reproducers, shrink_seconds) for name in names]
        for name, future in zip(names, futures):
            try:
                yield future.result()
            except Exception as error:  # noqa: BLE001 - as above; a broken pool fails the rest alike
                yield _failed_row(name, error, examples, at)


def _failed_row(name: str, error: BaseException, examples: int, at: int) -> tuple[str, int]:
    line = f"{name}: generator error: {generator_error(error)}\n"
    return line + f"--- {name}: reproduce: {reproduce_command(name, examples, at)}\n", GENERATOR_ERROR


def stateful_targets() -> dict[str, str | PassPipeline]:
    """Every pass of the package, then its pipeline (after EMPTY) on its own."""
    from ...schedule import PASS_NAMES, pipeline

    targets: dict[str, str | PassPipeline] = {name: name for name in PASS_NAMES}
    targets["pipeline"] = pipeline(PassPipeline.EMPTY)
    return targets


def fuzz_stateful(name: str, target: str | PassPipeline, *, examples: int = 100, at: int = 0):
    """:func:`fuzz` of ``target`` on drawn stateful programs, each checked
    by :func:`check_stateful`; a :class:`FuzzReport`."""
    from .fuzzer import fuzz

    return fuzz(
        name,
        target,
        examples=examples,
        at=at,
        strategy=stateful_programs(),
        check=lambda drawn, chosen: check_stateful(drawn, chosen),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mil_passes.testing.fuzz", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pass",
        dest="passes",
        action="append",
        metavar="NAME",
        help="a pass (webnn::NAME, NAME, 'pipeline', or any registered pass such as "
        "common::const_elimination); repeat for more; default: all of the package's",
    )
    parser.add_argument(
        "--pipeline",
        dest="pipelines",
        action="append",
        metavar="NAME",
        help="a whole pipeline as one target (default, cleanup, ..., or P1,P2,...); repeatable",
    )
    parser.add_argument(
        "--each-pass-of",
        dest="each_pass_of",
        action="append",
        metavar="NAME",
        help="every distinct pass of this pipeline, each a target (e.g. default)",
    )
    parser.add_argument(
        "--states",
        action="store_true",
        help="fuzz the targets on stateful programs (outputs and states bit for bit over 4 steps); "
        "default targets: the package's passes and 'pipeline'",
    )
    parser.add_argument(
        "--minimize",
        action="store_true",
        help="shrink each failing program further and write it as a standalone script",
    )
    parser.add_argument(
        "--reproducers",
        default="reproducers",
        metavar="DIR",
        help="where --minimize writes the scripts (default: reproducers/)",
    )
    parser.add_argument(
        "--shrink-seconds",
        type=float,
        default=SHRINK_SECONDS,
        metavar="T",
        help="stop shrinking a target's failures T seconds after the first one, keeping the smallest "
        f"(default {SHRINK_SECONDS:.0f})",
    )
    parser.add_argument("--examples", type=int, default=100, metavar="N", help="programs per pass (default 100)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the draws (default 0)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="J",
        help=f"targets fuzzed at once, in worker processes (default 1; this machine has {os.cpu_count()} cores)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    try:
        targets = select_targets(args.passes, args.pipelines, args.each_pass_of, args.states)
    except ValueError as error:
        parser.error(str(error))
    warnings.simplefilter("ignore", RuntimeWarning)  # overflow and NaN in folded values are expected
    status = 0
    reproducers = args.reproducers if args.minimize else None
    runs = _results(list(targets), args.examples, args.seed, args.jobs, reproducers, args.shrink_seconds)
    for text, target_status in runs:
        print(text, end="", flush=True)
        status |= target_status
    return status


if __name__ == "__main__":
    sys.exit(main())

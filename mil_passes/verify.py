"""Run a pass pipeline one pass at a time on a program and name the pass that changes its outputs.

The program's outputs are computed by the reference interpreter on random feeds, once before any
pass and again after each pass of the pipeline, on a working copy. Each pass gets a
:class:`PassRow`: its time, the non-const op count before and after, and per output the dtype,
shape and largest change against the original. The first pass that changes an output beyond the
program's precision, raises, or leaves a program that fails ``validate()`` is the *culprit*. A pass
that raises or leaves an invalid program ends the run; after a change the run goes on, and a later
pass that brings the outputs back within precision (or repairs them) *restores* it: the changed
rows before it are no culprits (:attr:`PassRow.restored_by`), since only the pipeline's result is
what a converted model computes (``common::add_fp16_cast`` turning a mask NaN, and
``webnn::finite_mask_sentinels`` after it making it finite again).

Statuses, worst last: ``same`` (bit for bit), ``unchecked`` (the interpreter has no kernel for an
op the pass made; the next pass is compared again), ``precision`` (float outputs differ within
the tolerance of the program's precision: fp16 when the program computes anything in fp16, as
after ``common::add_fp16_cast``, else fp32), ``repaired`` (float outputs NaN or infinite before at
some positions are finite after at exactly those, every other position ``same`` or ``precision``:
the pass made the outputs defined where they were not, :func:`repaired_positions`), and the
culprits ``changed`` (a dtype, shape, int or bool value, or a float value beyond the tolerance;
a finite value made NaN or infinite, or a repair that moves any other value beyond it),
``raised`` and ``invalid``.

Inputs and outputs are matched by position: ``common::sanitize_input_output_names`` may rename them.

A stateful program (iOS18 states) is stepped: each feed runs ``steps`` predictions from zero states
(:mod:`~mil_passes.stepping`), and every step's outputs and the states after every step are
compared; the states get their own entries in each row (:attr:`PassRow.states`).

A pass that leaves what the outputs are computed from as it was (its
:mod:`~mil_passes.fingerprint` unchanged: ops, types, constants, wiring; names, the order of
independent ops and dead code aside) is not evaluated again: its row compares the last outputs
computed and says so (``evaluated`` False, "unchanged, not re-run").
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

from .declaration import UnknownPass, resolve_pass
from .fingerprint import Fingerprinter
from .ir import iter_ops, op_counts
from .runner import run_pass
from .reference import UnsupportedOpError
from .reference.interpreter import output_values
from .reference.feeds import DEFAULT_SIZE_CHOICES, FeedError, fitted_feed, random_inputs, read_feed_files
from .reference.memory import interpretation_bytes, require
from .reference.optional_inputs import input_defaults
from .package.functions import function_description, function_names, function_view, is_multifunction
from .stepping import SteppedFeed, is_stateful, random_stepped_feed, stepped_feed, stepped_values

__all__ = [
    "OutputChange",
    "PassRow",
    "Verification",
    "UnknownPipeline",
    "VerifyError",
    "FailsBeforeAnyPass",
    "PIPELINES",
    "resolve_pipeline",
    "verify_program",
    "verify_package",
    "compare_outputs",
    "repaired_positions",
]

#: (rtol, atol) per precision: a float output is within precision when its largest change is at
#: most ``atol`` or at most ``rtol`` times its largest magnitude before.
TOLERANCE: dict[str, tuple[float, float]] = {"fp32": (1e-4, 1e-5), "fp16": (1e-2, 1e-2)}
CULPRIT_STATUSES = ("changed", "raised", "invalid")
#: Statuses that end a run: the program cannot go on through the pipeline.
ENDING_STATUSES = ("raised", "invalid")
#: Statuses that restore the outputs after a change.
RESTORING_STATUSES = ("same", "precision", "repaired")
STATUS_ORDER = ("same", "unchecked", "precision", "repaired", "changed", "invalid", "raised")
#: Predictions per feed for a stateful program.
DEFAULT_STEPS = 4


class VerifyError(ValueError):
    """Input ``verify`` cannot work with (one line: what and why)."""


class FailsBeforeAnyPass(VerifyError):
    """The program fails on a feed before any pass runs: nothing a pass did, the program or its feed."""


class UnknownPipeline(VerifyError):
    """A pipeline or pass name that coremltools does not know."""


def _mil_passes_pipeline() -> PassPipeline:
    from .schedule import pipeline

    return pipeline()


#: Named pipelines: coremltools' ``PassPipeline`` class properties, and DEFAULT with this package's
#: passes. coremltools 9.0 has no "fast" pipeline (``PassPipeline.list_available_pipelines()``).
PIPELINES: dict[str, Callable[[], PassPipeline]] = {
    "default": lambda: PassPipeline.DEFAULT,
    "empty": lambda: PassPipeline.EMPTY,
    "cleanup": lambda: PassPipeline.CLEANUP,
    "default_palettization": lambda: PassPipeline.DEFAULT_PALETTIZATION,
    "default_pruning": lambda: PassPipeline.DEFAULT_PRUNING,
    "mil_passes": _mil_passes_pipeline,
}


def resolve_pipeline(pipeline: str | PassPipeline | Sequence[str]) -> PassPipeline:
    """A PassPipeline for ``pipeline``: one, a name of :data:`PIPELINES` (any case), or registered
    passes (a list or ``"P1,P2"``; a name without ``::`` is one of this package's ``webnn::``)."""
    if isinstance(pipeline, PassPipeline):
        return pipeline
    if isinstance(pipeline, str):
        key = pipeline.strip().lower()
        if key in PIPELINES:
            return PIPELINES[key]()
        if "," not in pipeline and "::" not in pipeline:
            raise UnknownPipeline(
                f"unknown pipeline '{pipeline}': coremltools {_ct_version()} has "
                f"{', '.join(PIPELINES)}; or name passes as P1,P2,..."
            )
        pipeline = [name.strip() for name in pipeline.split(",") if name.strip()]
    try:
        names = [resolve_pass(name) for name in pipeline]
    except UnknownPass as unknown:
        raise UnknownPipeline(str(unknown)) from None
    if not names:
        raise UnknownPipeline("no passes named")
    return PassPipeline(pass_names=names, pipeline_name="custom")


def _ct_version() -> str:
    import coremltools

    return coremltools.__version__


@dataclass
class OutputChange:
    """One output after a pass against the original: dtypes, shapes (first feed), largest change.

    ``max_abs`` is the largest ``|after - before|`` over the feeds (NaN against NaN and equal
    infinities count 0; NaN against a number counts ``inf``); ``max_rel`` is ``max_abs`` over the
    output's largest finite magnitude before. Both are None when the shapes differ.
    """

    name: str
    dtype_before: str
    dtype_after: str
    shape_before: list[int]
    shape_after: list[int]
    max_abs: float | None
    max_rel: float | None
    status: str
    kind: str = "output"  # or "state" (a stateful program's state after each step)
    #: Positions (over the feeds) NaN or infinite before and finite after, when every other
    #: position compares as ``same`` or ``precision`` (status ``repaired``); else 0
    repaired: int = 0

    def describe(self) -> str:
        """``name fp32[2] abs 0 rel 0`` or ``name fp32[2] -> int32[2] abs 0.5 rel 0.048``."""
        before = f"{self.dtype_before}{self.shape_before}"
        after = f"{self.dtype_after}{self.shape_after}"
        kind = before if before == after else f"{before} -> {after}"
        numbers = "" if self.max_abs is None else f" abs {self.max_abs:.3g} rel {self.max_rel:.3g}"
        repaired = f", {self.repair()}" if self.repaired else ""
        return f"{self.name} {kind}{numbers}{repaired}"

    def repair(self) -> str:
        """``repaired: 12 non-finite outputs became finite``."""
        return f"repaired: {self.repaired} non-finite output{'s' if self.repaired != 1 else ''} became finite"

    def reason(self) -> str:
        """Why this output is a change, in a few words."""
        if self.dtype_after != self.dtype_before:
            return f"{self.kind} '{self.name}' became {self.dtype_after} (was {self.dtype_before})"
        if self.shape_after != self.shape_before:
            return f"{self.kind} '{self.name}' became shape {self.shape_after} (was {self.shape_before})"
        if self.max_abs is None:  # a value that is not a number (a classifier's label)
            return f"{self.kind} '{self.name}' changed"
        return f"{self.kind} '{self.name}' changed by up to {self.max_abs:.3g} (rel {self.max_rel:.3g})"


@dataclass
class PassRow:
    """What one pass of the pipeline did (``index`` counts from 1 in pipeline order)."""

    index: int
    name: str
    seconds: float
    ops_before: int
    ops_after: int
    status: str
    outputs: dict[str, OutputChange] = field(default_factory=dict)
    error: str | None = None
    states: dict[str, OutputChange] = field(default_factory=dict)  # a stateful program's states
    evaluated: bool = True  # False: the pass left the program as it was; the last outputs stand
    function: str | None = None  # the function of a multifunction model the row is about
    stage: str | None = None  # the stage of a pipeline the row is about
    #: The pass (its row) after which a change of this row was gone again, or None
    restored_by: PassRow | None = field(default=None, repr=False, compare=False)
    precision: str | None = None  # the precision the outputs were compared at (None: not compared)

    @property
    def is_culprit(self) -> bool:
        return self.status in CULPRIT_STATUSES and self.restored_by is None

    def reason(self) -> str:
        """The error, or the first output that changed."""
        if self.error is not None:
            return self.error
        changed = [o for o in self.outputs.values() if o.status == "changed"]
        changed += [s for s in self.states.values() if s.status == "changed"]
        if changed:
            return changed[0].reason()
        repaired = [change for change in (*self.outputs.values(), *self.states.values()) if change.repaired]
        return f"{repaired[0].kind} '{repaired[0].name}' {repaired[0].repair()}" if repaired else self.status


@dataclass
class Verification:
    """A verify run: the pipeline, how many feeds, a row per pass that ran (all, unless one raised or left
    an invalid program)."""

    pipeline: str
    pass_names: list[str]
    feeds: int
    seed: int
    rows: list[PassRow]
    input: str | None = None
    seconds: float = 0.0
    steps: int = 1  # predictions per feed (more than 1 for a stateful program)
    #: Why random feeds were drawn with every flexible dim at one size, or None when they were not
    shared_sizes: str | None = None

    @property
    def culprit(self) -> PassRow | None:
        return next((row for row in self.rows if row.is_culprit), None)

    @property
    def repair(self) -> PassRow | None:
        """The first row ``repaired``: the pass that made non-finite outputs finite, or None."""
        return next((row for row in self.rows if row.status == "repaired"), None)

    @property
    def restored(self) -> PassRow | None:
        """The first row whose change a later pass undid, or None."""
        return next((row for row in self.rows if row.restored_by is not None), None)


def verify_program(
    prog: Program | Callable[[], Program],
    pipeline: str | PassPipeline | Sequence[str] = "default",
    *,
    feeds: int | str | Path | Sequence[Mapping[str, Any]] = 3,
    seed: int = 0,
    on_row: Callable[[PassRow], None] | None = None,
    steps: int = DEFAULT_STEPS,
    on_progress: Callable[[str], None] | None = None,
    name: str = "the program",
    defaults: Mapping[str, np.ndarray] | None = None,
) -> Verification:
    """Run ``pipeline`` pass by pass on a copy of ``prog`` and compare its outputs after each pass.

    ``prog``: a Program (left as it is; the passes run on :func:`~mil_passes.package.io.copy_program`
    of it) or a callable making a fresh Program (called once; the passes run on what it returns). ``feeds``: how
    many random feeds (:func:`~mil_passes.reference.feeds.random_inputs` with seeds ``seed``,
    ``seed + 1``, …, drawn within the domains the program shows: token ids within the table they
    index, masks 0 or 1), the feeds themselves, or a path to one's own: an ``.npz`` file (one
    feed) or a folder of them (:func:`~mil_passes.reference.feeds.read_feed_files`; a feed outside
    an input's domain is refused naming the domain). ``defaults``: the values of optional inputs
    a given feed may leave out (:func:`~mil_passes.reference.optional_inputs.input_defaults`).
    ``on_row`` gets each row as it is made. ``steps``:
    predictions per feed of a stateful program, from zero states (a given feed is given at every
    step; random feeds are drawn per step). ``on_progress`` gets a line saying what runs now, as it
    starts: the original or the pass (``pass 12/95 common::const_elimination``), and the feed and
    step evaluated (``original: feed 2/3, step 4/4``). Raises :class:`VerifyError` when the pipeline
    is unknown or the interpreter cannot run ``prog``, and
    :class:`~mil_passes.reference.memory.NotEnoughMemoryError` (its message starting with ``name``)
    before any evaluation when the run would need more memory than the machine has available.
    """
    start = time.perf_counter()
    resolved = resolve_pipeline(pipeline)
    original = prog() if callable(prog) else prog
    if "main" not in original.functions:
        raise VerifyError(f"the program has no function 'main' (it has: {', '.join(original.functions)})")
    if steps < 1:
        raise VerifyError(f"steps must be at least 1, got {steps}")
    steps = steps if is_stateful(original) else 1
    feed_list = _feed_list(original, feeds, seed, steps, defaults)
    state_copies = steps * (2 * len(feed_list) + 1) + 1  # the states after every step, kept per feed
    require(interpretation_bytes(original, state_copies), "verifying it", name)
    say = _Progress(on_progress, len(feed_list), steps)
    want, shared_sizes = _original_outputs(original, feeds, feed_list, seed, steps, say)
    run = _Run(resolved, original, feed_list, want)  # all it needs of the original, read now
    work = original if callable(prog) else _copy(original)
    rows: list[PassRow] = []
    for index, pass_name in enumerate(resolved.passes, 1):
        what = f"pass {index}/{len(resolved.passes)} {pass_name}"
        say(what)
        row = run.step(work, index, pass_name, functools.partial(say.feed, what))
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if row.status in ENDING_STATUSES:
            break
    _mark_restored(rows)
    return Verification(
        _label(pipeline, resolved),
        list(resolved.passes),
        len(feed_list),
        seed,
        rows,
        seconds=time.perf_counter() - start,
        steps=steps,
        shared_sizes=shared_sizes,
    )


def _mark_restored(rows: list[PassRow]) -> None:
    """Give each ``changed`` row the first later row that compares as unchanged again at the same
    precision (an fp16 tolerance after ``add_fp16_cast`` would forgive a smaller fp32 change)."""
    changed: list[PassRow] = []
    for row in rows:
        if row.status == "changed":
            changed.append(row)
        elif row.status in RESTORING_STATUSES:
            for earlier in changed:
                if earlier.precision == row.precision:
                    earlier.restored_by = row
            changed = [earlier for earlier in changed if earlier.restored_by is None]


def _label(pipeline, resolved: PassPipeline) -> str:
    """How the pipeline was named: its name, ``P1,P2`` for passes, or the PassPipeline's name."""
    if isinstance(pipeline, str):
        return pipeline
    return str(resolved) if isinstance(pipeline, PassPipeline) else ",".join(resolved.passes)


def verify_package(
    path: str | Path,
    pipeline: str | PassPipeline | Sequence[str] = "default",
    *,
    feeds: int | str | Path | Sequence[Mapping[str, Any]] = 3,
    seed: int = 0,
    on_row: Callable[[PassRow], None] | None = None,
    steps: int = DEFAULT_STEPS,
    on_progress: Callable[[str], None] | None = None,
    function: str | None = None,
) -> Verification:
    """:func:`verify_program` on the program saved at ``path`` (read once: its outputs are computed,
    then the passes run on it). A package converted with ``PassPipeline.EMPTY`` holds the program before any
    pass of the main pipeline. Raises :class:`~mil_passes.package.files.PackageError` for a bad
    package.

    A multifunction model is verified one function at a time, each alone as Core ML calls it
    (``function``: that one only; :class:`VerifyError` when the model has no such function); its
    rows name their function, and every function is verified (a culprit ends its function's
    rows only). A pipeline's ML Program stages are verified in turn, their rows naming the stage
    (a stage of another type has no program to verify). A classifier is verified as ``ct.convert``
    runs the passes on it, before ``classify``: on the probabilities it reads. Given ``feeds`` are
    those of every function verified; an optional input they leave out gets its declared default."""
    from .package.io import read

    resolve_pipeline(pipeline)  # an unknown name fails before the package is read
    if on_progress is not None:
        on_progress(f"reading {path}")
    package = read(path)
    parts = _parts(package)
    names = [name for _, _, name in parts]
    if function is not None and function not in names:
        raise VerifyError(f"{path}: the model has no function '{function}' (it has: {', '.join(dict.fromkeys(names))})")
    verifications = []
    for stage, part, name in parts:
        if function is not None and name != function:
            continue
        where = _Where(stage, name if is_multifunction(part.program) else None)
        view = function_view(part.program, name)
        _without_classify(view)
        try:
            verification = verify_program(
                functools.partial(_same, view),  # the passes run on the program read: it is not needed after
                pipeline,
                feeds=feeds,
                seed=seed,
                on_row=where.rows(on_row),
                steps=steps,
                on_progress=where.progress(on_progress),
                name=f"{path}{where.suffix()}",
                defaults=input_defaults(function_description(part.spec, name)),
            )
        except FailsBeforeAnyPass as failure:
            raise FailsBeforeAnyPass(f"{_inconsistent_file(part.findings, name)}{failure}") from None
        for row in verification.rows:
            where.locate(row)
        verifications.append(verification)
    verification = _joined(verifications)
    verification.input = str(path)
    return verification


def _inconsistent_file(findings: Sequence[Any], function: str) -> str:
    """What the package reader found wrong in ``function`` of the file itself, as the start of a
    sentence, or ``""``: a name defined twice (:mod:`~mil_passes.package.duplicate_names`; each use
    then reads the definition before it, which may not be the one the converter meant) and declared
    types the ops' inputs contradict (:mod:`~mil_passes.package.declared_types`)."""
    mine = [finding for finding in findings if finding.function in (None, function)]
    twice = [finding.message for finding in mine if finding.rule == "duplicate-name"]
    contradicted = sum(finding.rule == "declared-type-mismatch" for finding in mine)
    if not twice and not contradicted:
        return ""
    parts = [f"[duplicate-name] {message}" for message in twice]
    if contradicted:
        said = "op's declared type contradicts its" if contradicted == 1 else "ops' declared types contradict their"
        parts.append(f"[declared-type-mismatch] {contradicted} {said} inputs")
    return (
        f"the file itself is inconsistent, so it is read as it says, not as its converter meant: {'; '.join(parts)}. "
    )


def _parts(package) -> list[tuple[str | None, Any, str]]:
    """``(stage, package, function)`` for each function of each ML Program of ``package`` (its
    stages' when it is a pipeline; stage None otherwise)."""
    programs = [(stage.label, stage.package) for stage in package.stages if stage.package is not None]
    return [
        (stage, part, name) for stage, part in (programs or [(None, package)]) for name in function_names(part.program)
    ]


@dataclass(frozen=True)
class _Where:
    """The stage of a pipeline and the function of a multifunction model a verification is about."""

    stage: str | None
    function: str | None

    def suffix(self) -> str:
        stage = f" stage {self.stage}" if self.stage is not None else ""
        return stage + (f" function '{self.function}'" if self.function is not None else "")

    def locate(self, row: PassRow) -> PassRow:
        row.stage, row.function = self.stage, self.function
        return row

    def rows(self, on_row: Callable[[PassRow], None] | None) -> Callable[[PassRow], None] | None:
        if on_row is None:
            return None
        return lambda row: on_row(self.locate(row))

    def progress(self, on_progress: Callable[[str], None] | None) -> Callable[[str], None] | None:
        if on_progress is None or not self.suffix():
            return on_progress
        return lambda line: on_progress(f"{self.suffix().strip()}: {line}")


def _without_classify(prog: Program) -> None:
    """A classifier's program as ``ct.convert`` runs the passes on it: before coremltools adds
    ``classify`` (its classes are a list const, which coremltools' passes cannot take). ``main``
    then returns the probabilities ``classify`` reads, which decide its label and dict."""
    func = prog.functions["main"]
    classify = [op for op in func.operations if op.op_type == "classify"]
    if len(classify) != 1 or list(func.outputs) != list(classify[0].outputs):
        return
    op = classify[0]
    func.set_outputs([op.probabilities])
    classes = op.classes.op
    func.remove_ops([op])
    if classes is not None and not classes.outputs[0].child_ops:
        func.remove_ops([classes])


def _same(prog: Program) -> Program:
    return prog


def _joined(verifications: list[Verification]) -> Verification:
    """One verification of several functions: their rows in turn, their time summed."""
    first = verifications[0]
    if len(verifications) == 1:
        return first
    return dataclasses.replace(
        first,
        rows=[row for verification in verifications for row in verification.rows],
        seconds=sum(verification.seconds for verification in verifications),
        steps=max(verification.steps for verification in verifications),
        shared_sizes=next((v.shared_sizes for v in verifications if v.shared_sizes), None),
    )


def _copy(prog: Program) -> Program:
    from .package.io import copy_program

    return copy_program(prog)


def _feed_list(
    prog: Program, feeds, seed: int, steps: int = 1, defaults: Mapping[str, np.ndarray] | None = None
) -> list[dict[str, np.ndarray]]:
    defaults = defaults or {}
    if isinstance(feeds, int):
        if feeds < 1:
            raise VerifyError(f"feeds must be at least 1, got {feeds}")
        return [_random_feed(prog, seed + i, steps) for i in range(feeds)]
    if isinstance(feeds, (str, Path)):
        try:
            feeds = [fitted_feed(prog, feed, label, defaults=defaults) for label, feed in read_feed_files(feeds)]
        except FeedError as error:
            raise VerifyError(str(error)) from None
    feeds = [{**defaults, **feed} for feed in feeds]  # an optional input left out: its default
    return [stepped_feed(prog, f, steps) if is_stateful(prog) else f for f in feeds]


def _random_feed(prog: Program, seed: int, steps: int, shared: bool = False) -> dict[str, np.ndarray]:
    """Random feed ``seed``, drawn within the inputs' domains (:mod:`~mil_passes.reference.domains`);
    ``shared``: every flexible dim at one size, drawn from the seed."""
    sizes = int(np.random.default_rng(seed).choice(DEFAULT_SIZE_CHOICES)) if shared else None
    if is_stateful(prog):
        return random_stepped_feed(prog, seed, steps, sizes=sizes)
    return random_inputs(prog, seed=seed, sizes=sizes, fit=True)


def _has_flexible_inputs(prog: Program) -> bool:
    return any(
        types.is_tensor(var.sym_type) and any(is_symbolic(dim) for dim in var.shape)
        for var in prog.functions["main"].inputs.values()
    )


def _original_outputs(
    prog: Program, feeds, feed_list: list, seed: int, steps: int, say: "_Progress"
) -> tuple[list[list[np.ndarray]], str | None]:
    """The original's outputs on each feed. Flexible dims drawn one by one can break a relation
    the program needs between them (a decoder's query no longer than its keys): a random feed the
    program fails on is drawn again with every flexible dim at one size, which keeps such
    relations, and the reason is returned. ``feed_list`` gets the feeds used."""
    want, reason = [], None
    for number, feed in enumerate(feed_list, 1):
        try:
            want.append(_evaluate_original(prog, feed, say.feed("original", number)))
            continue
        except _FailsOnFeed as failure:
            if not isinstance(feeds, int) or not _has_flexible_inputs(prog):
                which = "a random feed" if isinstance(feeds, int) else f"feed {number}"
                raise FailsBeforeAnyPass(f"the program fails on {which} before any pass: {failure}") from None
            first = str(failure)
        feed_list[number - 1] = _random_feed(prog, seed + number - 1, steps, shared=True)
        try:
            want.append(_evaluate_original(prog, feed_list[number - 1], say.feed("original", number)))
        except _FailsOnFeed as failure:
            raise FailsBeforeAnyPass(
                f"the program fails on a random feed before any pass: {first}; with every flexible dim "
                f"at one size too: {failure}"
            ) from None
        reason = reason or f"flexible dims drawn one by one, the program failed: {first}"
    return want, reason


StepHook = Callable[[int], None]


class _Progress:
    """What verify runs now, as lines for ``on_progress``: the pass, then the feed and step."""

    def __init__(self, on_progress: Callable[[str], None] | None, feeds: int, steps: int):
        self.on_progress, self.feeds, self.steps = on_progress, feeds, steps

    def __call__(self, line: str) -> None:
        if self.on_progress is not None:
            self.on_progress(line)

    def feed(self, what: str, number: int) -> StepHook:
        """The hook called as each step of feed ``number`` (from 1) of ``what`` starts."""

        def started(step: int) -> None:
            where = f"feed {number}/{self.feeds}"
            self(f"{what}: {where}, step {step + 1}/{self.steps}" if self.steps > 1 else f"{what}: {where}")

        return started


def _outputs(prog: Program, feeds: Mapping[str, Any], on_step: StepHook | None = None) -> list[np.ndarray]:
    """``main``'s outputs in order (by position: two outputs may be one var, or share a name); for
    a :class:`~mil_passes.stepping.SteppedFeed`, each output then each state stacked over the steps.
    ``on_step`` gets each step's index (0 for a feed that is not stepped) as it starts."""
    if isinstance(feeds, SteppedFeed):
        with np.errstate(all="ignore"):
            outputs, states = stepped_values(prog, feeds, on_step)
        return outputs + states
    if on_step is not None:
        on_step(0)
    with np.errstate(all="ignore"):
        values = output_values(prog, feeds)
    return [_as_array(value) for value in values]


def _as_array(value: Any) -> np.ndarray:
    """An output as an array: a classifier's probabilities (a dict keyed by label) as their values
    in the classes' order, its label as a 0-d array of it."""
    if isinstance(value, dict):
        return np.array(list(value.values()), dtype=np.float64)
    return np.asarray(value)


class _FailsOnFeed(Exception):
    """The original program fails on a feed (its message: the error in one line)."""


def _evaluate_original(prog: Program, feeds: Mapping[str, Any], on_step: StepHook | None = None) -> list[np.ndarray]:
    try:
        return _outputs(prog, feeds, on_step)
    except UnsupportedOpError as error:
        raise VerifyError(f"the reference interpreter cannot run the program: {error}") from None
    except (ValueError, IndexError) as error:  # the program fails on a feed (an index out of range)
        raise _FailsOnFeed(_one_line(error)) from None


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= 500 else text[:497] + "..."


def _ops(prog: Program) -> int:
    return sum(op_counts(prog).values())


def _precision(prog: Program) -> str:
    """``fp16`` when any op of ``prog`` computes an fp16 value, else ``fp32``."""
    for op in iter_ops(prog):
        if op.op_type == "const":
            continue
        for var in op.outputs:
            if var.sym_type is not None and (types.is_tensor(var.sym_type) or types.is_scalar(var.sym_type)):
                if var.dtype == types.fp16:
                    return "fp16"
    return "fp32"


class _Run:
    """The state of one verify run: the pipeline, the original's interface, feeds and outputs, and
    the fingerprint and outputs of the last program evaluated: a pass that leaves the program's
    fingerprint as it was is not evaluated again (its outputs are the last ones)."""

    def __init__(self, pipeline: PassPipeline, original: Program, feeds: list[dict], want: list[list]):
        func = original.functions["main"]
        self.pipeline = pipeline
        self.input_names = list(func.inputs)
        self.output_names = [var.name for var in func.outputs]
        self.state_names = [name for name, var in func.inputs.items() if types.is_state(var.sym_type)]
        self.feeds = feeds
        self.want = want
        self.base_precision = _precision(original)
        self.fingerprinter = Fingerprinter()
        self.evaluated = self.fingerprinter.program(original)
        self.last_outputs: list[list] | None = want  # None: the last program had an op without kernel
        self.last_error: str | None = None
        self.last_changes: dict[
            str, tuple[dict[str, OutputChange], dict[str, OutputChange]]
        ] = {}  # per precision: the last outputs compared
        self.evaluations = 0  # evaluations of the working program, each on every feed

    def step(self, work: Program, index: int, name: str, on_feed: Callable[[int], StepHook] | None = None) -> PassRow:
        """Run pass ``name`` on ``work`` and make its row; ``on_feed(n)`` is the step hook of feed
        ``n`` (from 1) when the program is evaluated."""
        ops_before = _ops(work)
        start = time.perf_counter()
        try:
            run_pass(work, name, self.pipeline)
        except Exception as error:  # noqa: BLE001 - any exception of a pass is what is reported
            return PassRow(
                index, name, time.perf_counter() - start, ops_before, ops_before, "raised", error=_one_line(error)
            )
        seconds = time.perf_counter() - start
        row = PassRow(index, name, seconds, ops_before, _ops(work), "same")
        try:
            work.validate()
        except Exception as error:  # noqa: BLE001
            row.status, row.error = "invalid", f"validate() failed: {_one_line(error)}"
            return row
        fingerprint = self.fingerprinter.program(work)
        if fingerprint == self.evaluated:
            row.evaluated = False
            self._repeat(work, row)
        else:
            self.evaluated = fingerprint
            self._compare(work, row, on_feed)
        return row

    def _repeat(self, work: Program, row: PassRow) -> None:
        """The row of a pass that left the program as it was: the last outputs, compared again."""
        if self.last_outputs is None:
            row.status, row.error = "unchecked", self.last_error
            return
        self._judge(work, row, self.last_outputs)

    def _compare(self, work: Program, row: PassRow, on_feed: Callable[[int], StepHook] | None = None) -> None:
        func = work.functions["main"]
        names = list(func.inputs)
        if len(names) != len(self.input_names) or len(func.outputs) != len(self.output_names):
            row.status = "changed"
            row.error = (
                f"the interface changed: inputs {self.input_names} -> {names}, outputs "
                f"{self.output_names} -> {[v.name for v in func.outputs]}"
            )
            return
        got = []
        self.evaluations += 1
        try:
            for number, feeds in enumerate(self.feeds, 1):
                renamed = dict(zip(self.input_names, names))
                got.append(
                    _outputs(
                        work,
                        feeds.renamed(renamed)
                        if isinstance(feeds, SteppedFeed)
                        else {new: feeds[old] for old, new in renamed.items()},
                        None if on_feed is None else on_feed(number),
                    )
                )
        except UnsupportedOpError as error:
            row.status, row.error = "unchecked", str(error)
            self.last_outputs, self.last_error = None, row.error
            return
        except Exception as error:  # noqa: BLE001 - a program the interpreter rejects is broken
            row.status, row.error = "invalid", f"the interpreter cannot run the program: {_one_line(error)}"
            return
        self.last_outputs, self.last_error, self.last_changes = got, None, {}
        self._judge(work, row, got)

    def _judge(self, work: Program, row: PassRow, got: list[list]) -> None:
        precision = "fp16" if "fp16" in (self.base_precision, _precision(work)) else "fp32"
        row.precision = precision
        if precision not in self.last_changes:
            self.last_changes[precision] = self._changes(got, precision)
        outputs, states = self.last_changes[precision]
        row.outputs = {name: dataclasses.replace(change) for name, change in outputs.items()}
        row.states = {name: dataclasses.replace(change) for name, change in states.items()}
        changes = (*row.outputs.values(), *row.states.values())
        row.status = max((o.status for o in changes), key=STATUS_ORDER.index, default="same")

    def _changes(self, got: list[list], precision: str) -> tuple[dict[str, OutputChange], dict[str, OutputChange]]:
        """The outputs' changes, and a stateful program's states' (shapes without the step axis)."""
        count = len(self.output_names)
        outputs = compare_outputs(
            self.output_names, [w[:count] for w in self.want], [g[:count] for g in got], precision
        )
        states: dict[str, OutputChange] = {}
        if self.state_names:
            states = compare_outputs(
                self.state_names, [w[count:] for w in self.want], [g[count:] for g in got], precision
            )
            for change in states.values():
                change.kind = "state"
            for change in (*outputs.values(), *states.values()):
                change.shape_before, change.shape_after = change.shape_before[1:], change.shape_after[1:]
        return outputs, states


def compare_outputs(
    names: Sequence[str],
    want: Sequence[Sequence[np.ndarray]],
    got: Sequence[Sequence[np.ndarray]],
    precision: str = "fp32",
) -> dict[str, OutputChange]:
    """Per output (by position; one list per feed): dtypes, shapes, largest change and status
    (``same``, ``precision`` within :data:`TOLERANCE` of ``precision``, ``repaired`` (see
    :func:`repaired_positions`), or ``changed``)."""
    result = {}
    for position, name in enumerate(names):
        name = name if name not in result else f"{name}#{position}"  # one var output twice
        before = [outputs[position] for outputs in want]
        after = [outputs[position] for outputs in got]
        change = _output_change(name, before, after, precision)
        if change.status == "changed" and change.max_abs is not None and change.dtype_before == change.dtype_after:
            repairs = [repaired_positions(b, a) for b, a in zip(before, after)]
            repaired = sum(int(mask.sum()) for mask in repairs)
            if repaired:
                rest = _output_change(
                    name, before, [np.where(m, b, a) for m, b, a in zip(repairs, before, after)], precision
                )
                if rest.status in ("same", "precision"):
                    change = dataclasses.replace(rest, status="repaired", repaired=repaired)
        result[name] = change
    return result


def repaired_positions(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Where a float output was NaN or infinite before and is finite after (all False when the two
    are not float arrays of one dtype and shape). An output whose every other position compares as
    usual (``same`` or ``precision``) was *repaired*, not changed: as when fp16's -inf causal mask
    made an output NaN and a pass that keeps the mask finite runs before ``common::add_fp16_cast``."""
    if before.dtype != after.dtype or before.shape != after.shape or before.dtype.kind != "f":
        return np.zeros(before.shape, dtype=bool)
    return ~np.isfinite(before) & np.isfinite(after)


def _output_change(name: str, before: list[np.ndarray], after: list[np.ndarray], precision: str) -> OutputChange:
    """One output's change over the feeds: ``same``, ``precision`` or ``changed``."""
    rtol, atol = TOLERANCE[precision]
    change = OutputChange(
        name,
        _dtype_name(before[0]),
        _dtype_name(after[0]),
        list(before[0].shape),
        list(after[0].shape),
        None,
        None,
        "same",
    )
    if any(b.shape != a.shape for b, a in zip(before, after)):
        change.status = "changed"
        return change
    exact = all(_identical(b, a) for b, a in zip(before, after))
    if not exact and not all(array.dtype.kind in "biuf" for array in (*before, *after)):
        change.status = "changed"  # a label: no change to measure
        return change
    if exact:  # bit for bit (NaN for NaN): no change to measure
        max_abs, scale = 0.0, 0.0
    else:
        max_abs = max(_max_abs(b, a) for b, a in zip(before, after))
        scale = max(_scale(b) for b in before)
    change.max_abs = max_abs
    change.max_rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    if change.dtype_before != change.dtype_after:
        change.status = "changed"
    elif exact:
        change.status = "same"
    elif before[0].dtype.kind == "f" and (max_abs <= atol or change.max_rel <= rtol):
        change.status = "precision"
    else:
        change.status = "changed"
    return change


def _dtype_name(array: np.ndarray) -> str:
    try:
        return types.builtin_to_string(types.numpy_type_to_builtin_type(array.dtype))
    except Exception:  # noqa: BLE001 - a dtype MIL has no name for
        return str(array.dtype)


def _as_float(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).astype(np.float64) if array.dtype != object else np.zeros(array.shape)


def _max_abs(before: np.ndarray, after: np.ndarray) -> float:
    if before.size == 0:
        return 0.0
    b, a = _as_float(before), _as_float(after)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)
    diff = np.where(same, 0.0, np.nan_to_num(diff, nan=np.inf))
    return float(diff.max())


def _scale(before: np.ndarray) -> float:
    b = _as_float(before)
    finite = np.abs(b[np.isfinite(b)])
    return float(finite.max()) if finite.size else 0.0


def _identical(before: np.ndarray, after: np.ndarray) -> bool:
    if before.dtype != after.dtype or before.shape != after.shape:
        return False
    if before.dtype.kind != "f":
        return bool(np.array_equal(before, after))
    as_bytes = lambda a: np.ascontiguousarray(a).reshape(-1).view(np.uint8)  # noqa: E731
    return bool(np.array_equal(as_bytes(before), as_bytes(after))) or bool(
        np.array_equal(before, after, equal_nan=True) and np.array_equal(np.signbit(before), np.signbit(after))
    )

"""The measurements: pass costs against coremltools' references, conversions, interpreter, memory.

Every figure is the best of several repetitions, and the figures a ratio compares are measured in
the same repetition, on the same freshly built program (never a deepcopy).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

import mil_passes
from mil_passes.reference import evaluate
from mil_passes.rewriter import iter_ops

from .measure import Samples, cpu_time, traced, traced_step
from .programs import ProgramSpec, TorchWorkload, op_count

BUILD = "build"
DCE = "common::dead_code_elimination"
#: A plain traversal, ``list(iter_ops(prog))``: what a sweep costs with no work per op. Its
#: growth shows what the machine adds as programs outgrow the CPU caches.
SWEEP = "sweep"
STREAMING_PASS = "webnn::concat_slice_to_slice_concat"

logger = logging.getLogger("benchmarks")


#: CPU seconds one figure may take per program: repetitions stop once its samples add up to
#: this, and a figure projected to exceed it in one run is skipped (a quadratic pass must not
#: keep ``make bench`` from finishing).
LIMIT_SECONDS = 90.0
#: Rounds of every pass per build where nothing matches.
ROUNDS = 3


@dataclass
class ProgramCosts:
    """Best CPU seconds on one program: ``BUILD``, then each pass measured on it.

    Where nothing matches: ``DCE`` and every package pass, applied one after the other to the
    same program (each verified to leave it unchanged), in an order rotated every repetition.
    Where everything matches: ``STREAMING_PASS`` alone; ``rewritten`` counts its rewrites.
    ``skipped`` maps a figure not measured to its projected seconds; ``samples`` counts the
    repetitions behind each figure.
    """

    spec: ProgramSpec
    ops: int
    seconds: dict[str, float]
    samples: dict[str, int]
    skipped: dict[str, float] = field(default_factory=dict)
    rewritten: int | None = None
    interpreter: float | None = None  # best seconds of the reference interpreter, if run


def program_costs(
    spec: ProgramSpec,
    repeats: int,
    interpret: bool = False,
    skip: dict[str, float] | None = None,
    limit: float = LIMIT_SECONDS,
    rounds: int = ROUNDS,
) -> ProgramCosts:
    """Build ``spec`` afresh ``repeats`` times and measure the passes on each build.

    Where nothing matches, each build takes ``rounds`` rounds of every pass (a pass that leaves
    the program unchanged can be timed again on it: more samples for the price of one build).
    ``skip`` maps passes not to run to their projected seconds (see :func:`projections`).
    """
    if repeats < 1 or rounds < 1:
        raise ValueError("repeats and rounds must be at least 1")
    skip = dict(skip or {})
    names = [STREAMING_PASS] if spec.match else [DCE, SWEEP, *mil_passes.PASS_NAMES]
    rounds = 1 if spec.match else rounds
    samples, spent, rewritten, ops, prog = Samples(), {}, None, 0, None
    for rep in range(repeats):
        prog = None  # the previous build goes before the next is measured
        seconds, prog = cpu_time(spec.build)
        samples.add(BUILD, seconds)
        ops = ops or op_count(prog)
        as_built = None if spec.match else _fingerprint(prog)
        for round_ in range(rounds):
            shift = (rep * rounds + round_) % len(names)
            for name in names[shift:] + names[:shift]:
                if name in skip or spent.get(name, 0.0) > limit:
                    continue
                graph_pass = _sweep if name == SWEEP else PASS_REGISTRY[name]
                seconds, _ = cpu_time(lambda: graph_pass(prog))
                samples.add(name, seconds)
                spent[name] = spent.get(name, 0.0) + seconds
                if spec.match:
                    rewritten = graph_pass.last_result.rewritten
                elif _fingerprint(prog) != as_built:
                    raise RuntimeError(f"{name} changed {spec.label}, where nothing should match")
        logger.info("%s: repetition %d of %d", spec.label, rep + 1, repeats)
    measured = [key for key in [BUILD, *names] if samples.count(key)]
    costs = ProgramCosts(
        spec, ops, {key: samples.best(key) for key in measured},
        {key: samples.count(key) for key in measured}, skip, rewritten,
    )
    if interpret:
        costs.interpreter = interpreter_seconds(prog, spec.inputs(prog), repeats * rounds)
    return costs


def projections(past: list[ProgramCosts], spec: ProgramSpec, limit: float = LIMIT_SECONDS) -> dict[str, float]:
    """Passes to skip on ``spec``: those whose one run is projected past ``limit`` seconds.

    The projection extends the growth seen between the two previous sizes of the same family
    and form (at least linear; linear when only one was measured); a pass skipped before stays
    skipped, projected to grow quadratically.
    """
    if not past:
        return {}
    last = past[-1]
    scale = spec.size / last.spec.size
    skip = {name: projected * scale**2 for name, projected in last.skipped.items()}
    earlier = past[-2] if len(past) > 1 else None
    for name, seconds in last.seconds.items():
        if name == BUILD:
            continue
        exponent = 1.0
        if earlier is not None and name in earlier.seconds and earlier.seconds[name] > 0:
            exponent = max(1.0, math.log(seconds / earlier.seconds[name]) / math.log(last.spec.size / earlier.spec.size))
        projected = seconds * scale**exponent
        if projected > limit:
            skip[name] = projected
    return skip


def _sweep(prog: Program) -> None:
    list(iter_ops(prog))


def _fingerprint(prog: Program) -> list[tuple]:
    return [(op.op_type, op.name, tuple(v.name for v in op.outputs)) for op in iter_ops(prog)]


def interpreter_seconds(prog: Program, feeds: dict, repeats: int) -> float:
    """Best CPU seconds of ``mil_passes.reference.evaluate(prog, feeds)``."""
    samples = Samples()
    for _ in range(repeats):
        seconds, _ = cpu_time(lambda: evaluate(prog, feeds))
        samples.add("evaluate", seconds)
    return samples.best("evaluate")


#: How much slower code runs under tracemalloc (building the streaming program: ~4.5x).
TRACE_SLOWDOWN = 5.0


@dataclass
class MemoryCosts:
    """tracemalloc bytes: the program as built, and each pass's peak above it (and what it kept).

    ``skipped`` lists passes not traced because their untraced run already exceeded the limit.
    """

    spec: ProgramSpec
    ops: int
    program_bytes: int
    peak: dict[str, int]
    kept: dict[str, int]
    skipped: list[str] = field(default_factory=list)


def memory_costs(spec: ProgramSpec, skip: set[str] = frozenset()) -> MemoryCosts:
    """Build ``spec`` under tracemalloc, then run ``DCE`` and every package pass on it, the
    streaming rewrite last (the others leave a program without their patterns unchanged)."""
    names = [DCE, *(n for n in mil_passes.PASS_NAMES if n != STREAMING_PASS), STREAMING_PASS]
    peak, kept = {}, {}
    with traced():
        _, program_bytes, prog = traced_step(spec.build)
        ops = op_count(prog)
        for name in names:
            if name in skip:
                continue
            graph_pass = PASS_REGISTRY[name]
            peak[name], kept[name], _ = traced_step(lambda: graph_pass(prog))
    return MemoryCosts(spec, ops, program_bytes, peak, kept, [n for n in names if n in skip])


def too_slow_to_trace(programs: list[ProgramCosts], spec: ProgramSpec, limit: float = LIMIT_SECONDS) -> set[str]:
    """Passes whose run on ``spec`` (as timed, or projected) exceeds ``limit`` once traced."""
    slow = set()
    for costs in programs:
        if costs.spec == spec or (costs.spec.family == spec.family and costs.spec.size == spec.size):
            slow.update(costs.skipped)
            slow.update(n for n, s in costs.seconds.items() if n != BUILD and s * TRACE_SLOWDOWN > limit)
    return slow


@dataclass
class ConversionCosts:
    """Best CPU seconds of ``ct.convert`` of a torch model (tracing included) with coremltools'
    DEFAULT pipeline and with ``mil_passes.pipeline()``; ``passes`` is the package's passes' own
    time inside the latter, by pass; ``interpreter`` evaluates the converted program."""

    name: str
    ops: int
    default: float
    with_passes: float
    passes: dict[str, float] = field(default_factory=dict)
    interpreter: float | None = None


def conversion_costs(workload: TorchWorkload, repeats: int) -> ConversionCosts:
    import coremltools as ct
    from mil_passes.testing.torch_models import convert

    samples, own, model = Samples(), Samples(), None
    for rep in range(repeats):
        runs = [("default", ct.PassPipeline.DEFAULT), ("with_passes", mil_passes.pipeline())]
        for key, pipeline in runs if rep % 2 == 0 else runs[::-1]:
            inside: dict[str, float] = {}
            with _timing_package_passes(inside), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # tracer and renamed-output warnings, every run
                seconds, model = cpu_time(
                    lambda: convert(workload.case, workload.module, workload.examples, pipeline)
                )
            samples.add(key, seconds)
            if key == "with_passes":
                for name in mil_passes.PASS_NAMES:
                    own.add(name, inside.get(name, 0.0))
                converted = model
    prog = converted._mil_program
    feeds = {f"input_{i}": x for i, x in enumerate(workload.examples)}
    return ConversionCosts(
        workload.name,
        op_count(prog),
        samples.best("default"),
        samples.best("with_passes"),
        {name: own.best(name) for name in mil_passes.PASS_NAMES},
        interpreter_seconds(prog, feeds, repeats),
    )


@contextmanager
def _timing_package_passes(sink: dict[str, float]) -> Iterator[None]:
    """While open, each package pass that a pipeline runs adds its CPU seconds to ``sink[name]``."""
    originals = {name: PASS_REGISTRY.passes[name] for name in mil_passes.PASS_NAMES}
    for name, cls in originals.items():
        PASS_REGISTRY.passes[name] = _timed(cls, name, sink)
    try:
        yield
    finally:
        PASS_REGISTRY.passes.update(originals)


def _timed(cls: type, name: str, sink: dict[str, float]) -> type:
    def __call__(self, prog: Program) -> None:
        start = time.process_time()  # no gc.collect() here: it would bill the conversion
        try:
            cls.__call__(self, prog)
        finally:
            sink[name] = sink.get(name, 0.0) + time.process_time() - start

    # Same name as the pass: coremltools records str(pass) in the scope of the ops it makes.
    return type(cls.__name__, (cls,), {"__call__": __call__, "__qualname__": cls.__qualname__})


def run_all(
    specs: list[tuple[ProgramSpec, int]],
    workloads: list[TorchWorkload],
    torch_repeats: int,
    memory_spec: ProgramSpec | None,
    progress: Callable[[dict, str], None] = lambda results, line: None,
) -> dict:
    """Every measurement; ``specs`` pairs each program with its repetitions. ``progress`` gets
    the results so far after each step."""
    results: dict = {"programs": [], "conversions": [], "memory": None}
    programs: list[ProgramCosts] = results["programs"]
    for spec, repeats in specs:
        past = [c for c in programs if (c.spec.family, c.spec.match) == (spec.family, spec.match)]
        skip = projections(past, spec)
        programs.append(program_costs(spec, repeats, interpret=not spec.match, skip=skip))
        form = "every window matches" if spec.match else "nothing matches"
        skipped = "".join(f"; skipped {name}: projected {s:,.0f} s" for name, s in skip.items())
        progress(results, f"measured {spec.label} ({form}){skipped}")
    for workload in workloads:
        results["conversions"].append(conversion_costs(workload, torch_repeats))
        progress(results, f"converted {workload.name}")
    if memory_spec is not None:
        results["memory"] = memory_costs(memory_spec, too_slow_to_trace(programs, memory_spec))
        progress(results, f"traced memory on {memory_spec.label}")
    return results

"""The measurements: pass costs against coremltools' references, conversions, interpreter, memory.

Every figure is the best of several repetitions, and the figures a ratio compares are measured in
the same repetition, on the same freshly built program (never a deepcopy).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

import mil_passes
from mil_passes.ir import iter_ops

from .conversions import conversion_costs
from .measure import Samples, call_count, cpu_time, interpreter_seconds, traced, traced_step
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

    Where nothing matches: ``DCE``, ``SWEEP`` and every package pass, applied one after the
    other to the same program (each pass verified to leave it unchanged), in an order rotated
    every round.
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
    calls: dict[str, int] = field(default_factory=dict)  # function calls of each pass, once


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
                graph_pass = _graph_pass(name)
                seconds, _ = cpu_time(partial(graph_pass, prog))
                samples.add(name, seconds)
                spent[name] = spent.get(name, 0.0) + seconds
                if spec.match:
                    rewritten = graph_pass.last_result.rewritten
                elif _fingerprint(prog) != as_built:
                    raise RuntimeError(f"{name} changed {spec.label}, where nothing should match")
        logger.info("%s: repetition %d of %d", spec.label, rep + 1, repeats)
    measured = [key for key in [BUILD, *names] if samples.count(key)]
    costs = ProgramCosts(
        spec,
        ops,
        {key: samples.best(key) for key in measured},
        {key: samples.count(key) for key in measured},
        skip,
        rewritten,
    )
    if interpret:
        costs.interpreter = interpreter_seconds(prog, spec.inputs(prog), repeats)
    costs.calls = pass_calls(spec, costs, prog, limit)
    return costs


#: How much slower a pass runs under cProfile (the streaming rewrite: ~3x).
PROFILE_SLOWDOWN = 4.0


def pass_calls(spec: ProgramSpec, costs: ProgramCosts, prog: Program, limit: float = LIMIT_SECONDS) -> dict[str, int]:
    """Function calls of each pass measured in ``costs``, counted once under
    cProfile: on ``prog`` where nothing matches (the passes left it as built), on a fresh build
    where everything matches. Passes that would take over ``limit`` under the profiler are left out."""
    names = [n for n in costs.seconds if n != BUILD and costs.seconds[n] * PROFILE_SLOWDOWN <= limit]
    if spec.match and names:
        prog = spec.build()
    return {name: call_count(lambda name=name: _graph_pass(name)(prog)) for name in names}


def _graph_pass(name: str) -> Callable[[Program], None]:
    return _sweep if name == SWEEP else PASS_REGISTRY[name]


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
            exponent = max(
                1.0, math.log(seconds / earlier.seconds[name]) / math.log(last.spec.size / earlier.spec.size)
            )
        projected = seconds * scale**exponent
        if projected > limit:
            skip[name] = projected
    return skip


def _sweep(prog: Program) -> None:
    list(iter_ops(prog))


def _fingerprint(prog: Program) -> list[tuple]:
    return [(op.op_type, op.name, tuple(v.name for v in op.outputs)) for op in iter_ops(prog)]


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
            peak[name], kept[name], _ = traced_step(partial(graph_pass, prog))
    return MemoryCosts(spec, ops, program_bytes, peak, kept, [n for n in names if n in skip])


def too_slow_to_trace(programs: list[ProgramCosts], spec: ProgramSpec, limit: float = LIMIT_SECONDS) -> set[str]:
    """Passes whose run on ``spec`` (as timed, or projected) exceeds ``limit`` once traced."""
    slow = set()
    for costs in programs:
        if costs.spec == spec or (costs.spec.family == spec.family and costs.spec.size == spec.size):
            slow.update(costs.skipped)
            slow.update(n for n, s in costs.seconds.items() if n != BUILD and s * TRACE_SLOWDOWN > limit)
    return slow


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

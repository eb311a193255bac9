"""Run passes on a Program: one registered pass (:func:`run_pass`, the one way the package, verify,
the fuzzer and the tests run a pass), a whole pipeline (:func:`run_pipeline`), or the package's
passes with a report of what changed (:func:`run_passes`; ``package.optimize`` does it for a saved
model)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from .declaration import UnknownPass, resolve_pass  # noqa: F401  (UnknownPass: raised by run_passes)
from .lint import Finding, lint
from .schedule import PIPELINE_ORDER
from .rewriter import Declined, RewriteResult
from .ir import op_counts

CLEANUP = ("common::dead_code_elimination",)


@dataclass
class PassRun:
    """One pass's run: its time, how many rewrites it made, and what it declined and why."""

    name: str
    seconds: float
    rewritten: int | None
    declined: list[Declined] = field(default_factory=list)


@dataclass
class OptimizeReport:
    """Op counts and findings before and after, and each pass's run."""

    ops_before: Counter
    ops_after: Counter
    findings_before: list[Finding]
    findings_after: list[Finding]
    passes: list[PassRun]


def resolve_pass_names(pass_names: Iterable[str] | None = None) -> list[str]:
    """Registry names for ``pass_names`` (default: the package's passes as ``pipeline()`` runs them),
    each by :func:`~mil_passes.declaration.resolve_pass`: a bare name is one of the package's.
    Raises :class:`UnknownPass` naming the first unknown one."""
    if pass_names is None:
        return list(PIPELINE_ORDER)
    return [resolve_pass(name) for name in pass_names]


def run_pass(prog: Program, name: str, options_of: PassPipeline | None = None) -> RewriteResult | None:
    """Run the registered pass ``name`` (a registry name) on ``prog`` in place, with the options the
    pipeline ``options_of`` sets for it: the one way the package, verify, the fuzzer and the tests run
    a pass. Returns what the package's passes report they did (``None`` for coremltools' own)."""
    if not isinstance(name, str):
        raise TypeError(f"run_pass runs one pass by its registry name, got {type(name).__name__} (run_pipeline?)")
    instance = PASS_REGISTRY[name]
    if options_of is not None:
        instance.set_options(options_of.get_options(name))
    instance(prog)
    return getattr(instance, "last_result", None)


def run_pipeline(prog: Program, pipeline: PassPipeline) -> None:
    """Run every pass of ``pipeline`` on ``prog`` in place, as ``ct.convert`` runs it."""
    PassPipelineManager.apply_pipeline(prog, pipeline)


def run_passes(
    prog: Program,
    pass_names: Iterable[str] | None = None,
    *,
    cleanup: bool = True,
    on_pass: Callable[[str], None] | None = None,
) -> OptimizeReport:
    """Apply ``pass_names`` (default: all of the package's, in pipeline order) to ``prog`` in place.

    Unknown names raise :class:`UnknownPass` (a ``ValueError``) before anything runs. With
    ``cleanup``, coremltools' dead-code elimination runs last. ``on_pass(name)`` is called as
    each pass starts (a progress bar).
    """
    names = resolve_pass_names(pass_names)
    ops_before, findings_before = op_counts(prog), lint(prog)
    runs = []
    for name in names + (list(CLEANUP) if cleanup else []):
        if on_pass is not None:
            on_pass(name)
        start = time.perf_counter()
        result = run_pass(prog, name)
        seconds = time.perf_counter() - start
        if result is None:
            runs.append(PassRun(name, seconds, None))
        else:
            runs.append(PassRun(name, seconds, result.rewritten, list(result.declined)))
    prog.validate()
    return OptimizeReport(ops_before, op_counts(prog), findings_before, lint(prog), runs)

"""Run the package's passes on a Program and report what changed (``package.optimize`` does it for a
saved model: the path of the ``optimize`` and ``demo`` commands)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from .lint import Finding, lint
from .pipeline import PASS_NAMES, PIPELINE_ORDER
from .rewriter import Refusal
from .ir import op_counts

CLEANUP = ("common::dead_code_elimination",)


@dataclass
class PassRun:
    """One pass's run: its time, how many rewrites it made, and what it refused and why."""

    name: str
    seconds: float
    rewritten: int | None
    refusals: list[Refusal] = field(default_factory=list)


@dataclass
class OptimizeReport:
    """Op counts and findings before and after, and each pass's run."""

    ops_before: Counter
    ops_after: Counter
    findings_before: list[Finding]
    findings_after: list[Finding]
    passes: list[PassRun]


def _rewritten(instance) -> tuple[int | None, list[Refusal]]:
    result = getattr(instance, "last_result", None)
    if result is not None:
        return result.rewritten, list(result.refusals)
    renames = getattr(instance, "renames", None)
    return (len(renames) if renames is not None else None), []


class UnknownPass(ValueError):
    """A pass name that is not registered."""


def resolve_pass_names(pass_names: Iterable[str] | None = None) -> list[str]:
    """Registry names for ``pass_names`` (default: the package's passes as ``pipeline()`` runs them).

    A name without a namespace is one of the package's (``concat_slice_to_slice_concat`` is
    ``webnn::concat_slice_to_slice_concat``); coremltools' passes are named in full
    (``common::const_elimination``). Raises :class:`UnknownPass` naming the first unknown one.
    """
    if pass_names is None:
        return list(PIPELINE_ORDER)
    names = []
    for name in pass_names:
        full = name if "::" in name else f"webnn::{name}"
        if full not in PASS_REGISTRY:
            known = ", ".join(PASS_NAMES)
            raise UnknownPass(f"unknown pass '{name}' (the package's passes: {known})")
        names.append(full)
    return names


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
        instance = PASS_REGISTRY[name]
        start = time.perf_counter()
        instance(prog)
        seconds = time.perf_counter() - start
        rewritten, refusals = _rewritten(instance)
        runs.append(PassRun(name, seconds, rewritten, refusals))
    prog.validate()
    return OptimizeReport(ops_before, op_counts(prog), findings_before, lint(prog), runs)


def format_report(report: OptimizeReport) -> str:
    """A table like onnxsim's: op counts by type before and after, findings, time per pass."""
    rows = [("op type", "before", "after")]
    for op_type in sorted(set(report.ops_before) | set(report.ops_after)):
        before, after = report.ops_before.get(op_type, 0), report.ops_after.get(op_type, 0)
        rows.append((op_type, str(before), str(after) + (" *" if after != before else "")))
    rows.append(("total", str(sum(report.ops_before.values())), str(sum(report.ops_after.values()))))
    rules = sorted({f.rule for f in report.findings_before + report.findings_after})
    for rule in rules:
        rows.append(
            (
                f"finding {rule}",
                str(sum(f.rule == rule for f in report.findings_before)),
                str(sum(f.rule == rule for f in report.findings_after)),
            )
        )
    lines = _table(rows)
    lines.append("")
    lines.extend(
        _table(
            [("pass", "rewrites", "left", "ms")]
            + [
                (
                    run.name,
                    "-" if run.rewritten is None else str(run.rewritten),
                    str(len(run.refusals)),
                    f"{run.seconds * 1e3:.1f}",
                )
                for run in report.passes
            ]
        )
    )
    return "\n".join(lines)


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    return [fmt(rows[0]), "  ".join("-" * w for w in widths)] + [fmt(row) for row in rows[1:]]


def explain(report: OptimizeReport) -> str:
    """Each match a pass refused, and why, grouped by pass."""
    lines = []
    for run in report.passes:
        if run.refusals:
            lines.append(f"{run.name} left {len(run.refusals)} unchanged:")
            lines.extend(f"  {refusal}" for refusal in run.refusals)
    return "\n".join(lines) if lines else "no pass refused a match"

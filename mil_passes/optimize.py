"""Run the package's passes on a Program and report what changed: the path of ``optimize`` and ``demo``."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from .lint import Finding, lint
from .pipeline import PASS_NAMES
from .rewriter import Refusal
from .testing.equivalence import op_counts

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


def run_passes(prog: Program, pass_names: Iterable[str] | None = None, *, cleanup: bool = True) -> OptimizeReport:
    """Apply ``pass_names`` (default: all of the package's, in pipeline order) to ``prog`` in place.

    Unknown names raise ``ValueError`` before anything runs. With ``cleanup``, coremltools'
    dead-code elimination runs last.
    """
    names = list(PASS_NAMES if pass_names is None else pass_names)
    for name in names:
        try:
            PASS_REGISTRY[name]
        except KeyError:
            known = ", ".join(PASS_NAMES)
            raise ValueError(f"unknown pass '{name}' (the package's passes: {known})") from None
    ops_before, findings_before = op_counts(prog), lint(prog)
    runs = []
    for name in names + (list(CLEANUP) if cleanup else []):
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
    lines.extend(_table([("pass", "rewrites", "left", "ms")] + [
        (
            run.name,
            "-" if run.rewritten is None else str(run.rewritten),
            str(len(run.refusals)),
            f"{run.seconds * 1e3:.1f}",
        )
        for run in report.passes
    ]))
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    fmt = lambda row: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    return [fmt(rows[0]), "  ".join("-" * w for w in widths)] + [fmt(row) for row in rows[1:]]

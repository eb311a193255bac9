"""``optimize`` on a saved model: read it, run the passes, write the result, read it back.

Nothing is written unless every step succeeds: the package is written next to the output path,
read back (the "after" of the report, op counts and findings, is that of the file on disk, read
as ``lint`` reads it), then renamed into place.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from coremltools.converters.mil.mil import Program

from ..lint import by_severity
from .atomic import replacing
from .files import require_existing
from .io import Package, PackageError, check_output_path, read, write_new, write_pipeline
from ..ir import op_counts
from ..runner import OptimizeReport, PassRun, resolve_pass_names, run_passes
from .functions import function_names, function_view, is_multifunction, put_back


@dataclass
class PackageRun:
    """``optimize`` on a saved model: the report (findings include the protobuf check's), the
    paths, and the wall time."""

    source: Path
    output: Path
    report: OptimizeReport
    seconds: float


def check_paths(source: Path, output: Path, *, force: bool) -> None:
    """Refuse a missing input, writing over the input (without ``force``), and writing one
    inside the other; then the checks of :func:`~mil_passes.package.io.check_output_path`."""
    require_existing(source)
    same = output.exists() and os.path.samefile(source, output)
    if same and not force:
        raise PackageError(f"{output}: is the input; refusing to overwrite it (--force replaces it)")
    check_output_path(output, overwrite=force)
    if not same:
        a, b = os.path.realpath(source), os.path.realpath(output)
        if os.path.commonpath([a, b]) in (a, b):
            raise PackageError(f"{output}: lies inside {source} or contains it; choose another path")


def as_read(counts: Counter, op_changes: Counter) -> Counter:
    """Op counts of a program read from a file, put back as the file has them (``op_changes``:
    what reading repaired, see :class:`~mil_passes.package.io.Package`)."""
    counts = Counter(counts)
    counts.update(op_changes)
    return +counts


def optimize_package(
    source: str | Path,
    output: str | Path,
    pass_names: Iterable[str] | None = None,
    *,
    force: bool = False,
    on_step: Callable[[str], None] | None = None,
) -> PackageRun:
    """Read ``source``, run the passes, write ``output``; nothing is written unless all succeed.

    The package is written next to ``output``, read back (the findings after are those of the
    written package: protobuf check and lint), then renamed into place. Raises
    :class:`~mil_passes.package.files.PackageError` and :class:`UnknownPass` before writing.
    """
    start = time.perf_counter()
    step = on_step or (lambda label: None)  # noqa: E731
    names = resolve_pass_names(pass_names)
    source, output = Path(source), Path(output)
    check_paths(source, output, force=force)
    step("read")
    package = read(source)
    report = _run_every_stage(package, names, step)
    with replacing(output) as staged:
        step("write")
        if package.stages:
            write_pipeline(package, staged)
        else:
            write_new(package.program, staged, like=package)
        step("check")
        written = _read_back(staged, output)
        findings_after = written.lint()
    checked = [f for _, part in _ml_programs(package) for f in part.findings]  # the protobuf check's
    report.findings_before = by_severity(checked + report.findings_before)
    report.ops_before = as_read(report.ops_before, _op_changes(package))
    report.ops_after = as_read(_op_counts(written), _op_changes(written))
    report.findings_after = findings_after
    return PackageRun(source, output, report, time.perf_counter() - start)


def _ml_programs(package: Package) -> list[tuple[str | None, Package]]:
    """``(stage, package)`` of each ML Program of ``package``: its stages', or its own (stage None)."""
    if not package.stages:
        return [(None, package)]
    return [(stage.label, stage.package) for stage in package.stages if stage.package is not None]


def _op_counts(package: Package) -> Counter:
    return sum((op_counts(part.program) for _, part in _ml_programs(package)), Counter())


def _op_changes(package: Package) -> Counter:
    changes: Counter = Counter()
    for _, part in _ml_programs(package):
        changes.update(part.op_changes)  # update keeps the negative counts (ops a repair added)
    return changes


def _run_every_stage(package: Package, names: list[str], step: Callable[[str], None]) -> OptimizeReport:
    """The passes on each ML Program of ``package`` (each stage of a pipeline; findings name it)."""
    reports = []
    for stage, part in _ml_programs(package):
        report = _run_every_function(part.program, names, step)
        if stage is not None:
            report.findings_before = [f.located(stage=stage) for f in report.findings_before]
            report.findings_after = [f.located(stage=stage) for f in report.findings_after]
        reports.append(report)
    return merged_report(reports)


def _run_every_function(prog: Program, names: list[str], step: Callable[[str], None]) -> OptimizeReport:
    """The passes on each function of ``prog`` alone (as Core ML reads a multifunction model: its
    names, interface and states are the function's), one report for them all; the findings of a
    multifunction model name their function."""
    reports = []
    for name in function_names(prog):
        view = function_view(prog, name)
        report = run_passes(view, names, on_pass=step)
        put_back(prog, name, view)
        if is_multifunction(prog):
            report.findings_before = [f.located(function=name) for f in report.findings_before]
            report.findings_after = [f.located(function=name) for f in report.findings_after]
        reports.append(report)
    return merged_report(reports)


def merged_report(reports: list[OptimizeReport]) -> OptimizeReport:
    """The reports of several functions as one: op counts summed, findings joined, and each pass's
    runs summed (seconds, rewrites) with what they declined joined."""
    if len(reports) == 1:
        return reports[0]
    runs: dict[str, PassRun] = {}
    for report in reports:
        for run in report.passes:
            known = runs.get(run.name)
            if known is None:
                runs[run.name] = dataclasses.replace(run, declined=list(run.declined))
                continue
            known.seconds += run.seconds
            if run.rewritten is not None:
                known.rewritten = (known.rewritten or 0) + run.rewritten
            known.declined.extend(run.declined)
    return OptimizeReport(
        sum((r.ops_before for r in reports), Counter()),
        sum((r.ops_after for r in reports), Counter()),
        by_severity(f for r in reports for f in r.findings_before),
        by_severity(f for r in reports for f in r.findings_after),
        list(runs.values()),
    )


def _read_back(staged: Path, output: Path) -> Package:
    """The package just written, read as ``lint`` would read ``output``: the report's "after"
    is what the file holds, never what the program in memory holds."""
    try:
        return read(staged)
    except PackageError as error:  # a bug of the writer; said with the user's path
        raise PackageError(str(error).replace(str(staged), str(output))) from None

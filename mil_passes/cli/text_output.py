"""The command's text reports (``json_output`` writes the same as JSON): optimize's op and pass
tables, and verify's rows and summary line."""

from __future__ import annotations

from typing import Sequence

from ..package.untrusted import printable
from ..runner import OptimizeReport
from ..verify import STATUS_ORDER, PassRow, Verification


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
                    str(len(run.declined)),
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
        if run.declined:
            lines.append(f"{run.name} left {len(run.declined)} unchanged:")
            lines.extend(f"  {printable(str(refusal))}" for refusal in run.declined)  # names a line each
    return "\n".join(lines) if lines else "no pass refused a match"


def format_row(row: PassRow, width: int = 46) -> str:
    """One line: the stage of a pipeline and the function of a multifunction model, index, pass
    (padded to ``width``), ops before -> after, seconds, status, then the outputs (or the error)."""
    ops = f"{row.ops_before} -> {row.ops_after}"
    described = [o.describe() for o in row.outputs.values()] + [f"state {s.describe()}" for s in row.states.values()]
    detail = row.error if row.error is not None else "; ".join(described)
    if not row.evaluated:
        detail = f"unchanged, not re-run; {detail}"
    where = _where(row)
    where = f"{where}: " if where else ""
    return f"{where}{row.index:4d}  {row.name:{width}s} {ops:>14s} {row.seconds:8.3f}s  {row.status:9s}  {detail}"


def _where(row: PassRow) -> str:
    """``stage 1``, ``function 'decode'``: what part of the model a row is about ("" for a model of one program)."""
    stage = f"stage {row.stage}" if row.stage is not None else ""
    function = f"function '{row.function}'" if row.function is not None else ""
    return ", ".join(part for part in (stage, function) if part)


def format_summary(verification: Verification) -> str:
    """The last line: the culprit and why, or how many passes kept the outputs (and which pass
    repaired them, or undid a change of an earlier one)."""
    total = len(verification.pass_names)
    culprit = verification.culprit
    if culprit is not None:
        last = max((row for row in verification.rows if _where(row) == _where(culprit)), key=lambda r: r.index)
        left = total - last.index
        ended = f"; then {last.name} (pass {last.index}) {last.status}: {last.reason()}" if last is not culprit else ""
        rest = (
            f"{ended if last.is_culprit else ''}; {left} later pass{'es' if left != 1 else ''} not run" if left else ""
        )
        reason = culprit.reason().rstrip(".")
        where = f"{_where(culprit)}: " if _where(culprit) else ""
        return f"culprit: {where}{culprit.name} (pass {culprit.index} of {total}) {culprit.status}: {reason}{rest}"
    counts = {status: sum(row.status == status for row in verification.rows) for status in STATUS_ORDER}
    counts["undone"] = counts.pop("changed")  # none is a culprit: a later pass undid each
    parts = [f"{counts[s]} {s}" for s in ("same", "precision", "repaired", "undone", "unchecked") if counts[s]]
    head, notes = "no pass changed the outputs", ""
    restored = verification.restored
    if restored is not None and restored.restored_by is not None:
        head = "the pipeline keeps the outputs"
        notes += (
            f"; {_located(restored)} {restored.reason().rstrip('.')}, and {_located(restored.restored_by)} undid it"
        )
    if verification.repair is not None:
        notes += f"; {_located(verification.repair)} {verification.repair.reason()}"
    return (
        f"{head}: {total} pass{'' if total == 1 else 'es'} ({', '.join(parts) or 'none run'}), "
        f"{verification.seconds:.2f} s{notes}"
    )


def _located(row: PassRow) -> str:
    """``function 'decode': common::add_fp16_cast (pass 59)``."""
    where = _where(row)
    return f"{where + ': ' if where else ''}{row.name} (pass {row.index})"

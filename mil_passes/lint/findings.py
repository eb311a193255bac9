"""A finding: one problem lint reports, with a stable rule id, a severity, and the pass that fixes it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

#: Most severe first. error: Core ML will refuse the model or silently run it elsewhere or wrong;
#: warning: likely wrong or slow, and the user can act; info: a tidy-up a pass can do, or why a
#: pass left something.
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One problem: a stable ``rule`` id, its ``severity``, the op it is about, why, and ``fix``:
    the pass that fixes it (``"webnn::…"``), or ``None`` when no pass does.

    ``op_type`` and ``cause`` (the message without what names the op: what findings repeated per
    layer share) serve the grouped text report; the JSON document has the first five."""

    rule: str
    severity: str
    op: str
    message: str
    fix: str | None = None
    op_type: str = field(default="", compare=False)
    cause: str = field(default="", compare=False)
    #: The function of a multifunction model, and the stage of a pipeline, the op is in (None: the model has one)
    function: str | None = None
    stage: str | None = None

    @property
    def location(self) -> str:
        """``stage 1 'name', function 'decode'``: where in a model of several programs; "" in a model of one."""
        stage = f"stage {self.stage}" if self.stage is not None else ""
        function = f"function '{self.function}'" if self.function is not None else ""
        return ", ".join(part for part in (stage, function) if part)

    def located(self, *, function: str | None = None, stage: str | None = None) -> "Finding":
        """This finding in ``function`` / ``stage`` (each kept as it is when None)."""
        return replace(
            self,
            function=self.function if function is None else function,
            stage=self.stage if stage is None else stage,
        )

    def as_dict(self) -> dict[str, str | None]:
        """``rule``, ``severity``, ``op``, ``message``, ``fix``; then ``function`` and ``stage`` when set."""
        document = {
            "rule": self.rule,
            "severity": self.severity,
            "op": self.op,
            "message": self.message,
            "fix": self.fix,
        }
        if self.function is not None:
            document["function"] = self.function
        if self.stage is not None:
            document["stage"] = self.stage
        return document

    def __str__(self) -> str:
        fix = f" (fix: {self.fix})" if self.fix else ""
        where = f"{self.location}: " if self.location else ""
        return f"{self.severity}: [{self.rule}] {where}{self.message}{fix}"


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos; stable within each."""
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))

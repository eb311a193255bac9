"""``--output-format github``: one GitHub Actions workflow command per finding.

``::error file=model.mlpackage,title=ane-gather::gather 'g' …``: ``error`` and ``warning`` as
they are, ``info`` as ``notice``; the title is the rule id. Values are escaped as the Actions
toolkit escapes them (``%`` ``\\r`` ``\\n`` everywhere, and ``:`` ``,`` in properties), after any
character a terminal would act on is made printable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..lint import Finding
from ..package.untrusted import printable

COMMANDS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding, path: str | Path) -> str:
    """The workflow command of ``finding`` in the model at ``path``."""
    message = printable(finding.message + (f" (fix: {finding.fix})" if finding.fix else ""))
    where = f"file={escape_property(printable(str(path)))},title={escape_property(finding.rule)}"
    return f"::{COMMANDS[finding.severity]} {where}::{escape_data(message)}"


def workflow_commands(reports: Iterable[tuple[str | Path, list[Finding]]]) -> list[str]:
    """The workflow commands of the findings of each ``(model path, findings)``."""
    return [annotation(finding, path) for path, findings in reports for finding in findings]

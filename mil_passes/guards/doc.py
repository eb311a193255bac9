"""docs/guards.md, generated from the guards' docstrings: ``python -m mil_passes.guards.doc > docs/guards.md``
(tests/test_guards.py checks that the committed page is this one)."""

from __future__ import annotations

import inspect
import re

from . import GUARDS, int16_narrowing
from .guard import Guard

HEAD = """# Guards of coremltools' passes

Generated from `mil_passes/guards/` by `python -m mil_passes.guards.doc > docs/guards.md`; edit the
docstrings, not this page. Each section is one bug of a pass of coremltools 9.0's DEFAULT pipeline and what
the guard does about it. `mil_passes.pipeline()` runs each guard right before every run of the pass it
protects (`mil_passes/schedule.py`); DEFAULT itself is left as coremltools ships it. How each bug was found,
its reproducer and the fuzzer's figures: [coremltools-passes.md](coremltools-passes.md).
"""


def _markdown(text: str) -> str:
    """Docstring text as Markdown: ``code`` as `code`, :func:`name` as `name`."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text.replace("``", "`"))


def section(guard: Guard) -> str:
    """One guard: what it protects, the bug and the remedy, and which ops each rule looks at."""
    lines = [f"## `{guard.name}`", "", f"Protects `{guard.protects}`.", "", _markdown(guard.doc), ""]
    for rule in guard.rules:
        ops = ", ".join(f"`{op_type}`" for op_type in rule.op_types)
        lines.append(f"- looks at {ops}: match `{rule.match.__name__}`, remedy `{rule.remedy.__name__}`")
    if guard.pass_class is not None:
        lines.append(f"- a pass of its own: `{guard.pass_class.__module__}.{guard.pass_class.__name__}`")
    return "\n".join(lines) + "\n"


def markdown() -> str:
    """The whole page."""
    selector = _markdown(inspect.getdoc(int16_narrowing) or "")
    tail = f"## `common::add_int16_cast`: an option, not a guard\n\n{selector}\n"
    return "\n".join([HEAD, *map(section, GUARDS), tail])


if __name__ == "__main__":
    print(markdown(), end="")

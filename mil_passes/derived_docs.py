"""What the docs derive from the code: the tables of docs/passes.md, docs/rules.md and the README
(from the passes' declarations and the lint catalogue), each between its markers
(``<!-- NAME:begin -->`` … ``<!-- NAME:end -->``), and the whole of docs/guards.md (from the guards'
docstrings). ``python -m mil_passes.derived_docs`` rewrites them; tests/test_derived_docs.py checks
they are current."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from .declaration import declared, pass_names, pipeline_order

ROOT = Path(__file__).resolve().parent.parent


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def readme_passes() -> str:
    """The README's list item of the passes: how many, and one line each."""
    summary = {d.full_name: d.summary for d in declared()}
    names = pass_names(declared())
    rows = [f"  | `{name}` | {_cell(summary[name])} |" for name in names]
    head = f"- the package's {len(names)} passes (`mil_passes.PASS_NAMES`, [docs/passes.md](docs/passes.md)):"
    return "\n".join([head, "", "  | pass | what it does |", "  |---|---|", *rows])


def schedule_table() -> str:
    """docs/passes.md's table: each run in pipeline order, where it goes and why; then the replacements."""
    from .lint.catalog import RULES

    def rules(name: str) -> str:
        return ", ".join(f"`{rule.id}`" for rule in RULES.values() if name in rule.fix.split(", ")) or "—"

    rows = ["| rank | pass | goes before | why there | lint rules |", "|---|---|---|---|---|"]
    for name, slot in pipeline_order(declared()):
        before = f"`{slot.before}`" if slot.before else "everything"
        rows.append(f"| {slot.rank} | `{name}` | {before} | {_cell(slot.why)} | {rules(name)} |")
    rows += ["", "| replacement | runs in place of | why that is safe |", "|---|---|---|"]
    for d in declared():
        if d.replaces is not None:
            rows.append(f"| `{d.full_name}` | `{d.replaces.of}` | {_cell(d.replaces.why)} |")
    return "\n".join(rows)


def rules_table() -> str:
    """docs/rules.md's table: every lint rule of the catalogue."""
    from .lint.catalog import rule_table

    return rule_table()


GUARDS_HEAD = """# Guards of coremltools' passes

Generated from `mil_passes/guards/` by `python -m mil_passes.derived_docs`; edit the docstrings, not
this page. Each section is one bug of a pass of coremltools 9.0's DEFAULT pipeline and what the guard
does about it. `mil_passes.pipeline()` runs each guard right before every run of the pass it protects
(`mil_passes/schedule.py`); DEFAULT itself is left as coremltools ships it. How each bug was found, its
reproducer and the fuzzer's figures: [coremltools-passes.md](coremltools-passes.md).
"""


def _markdown(text: str) -> str:
    """Docstring text as Markdown: ``code`` as `code`, :func:`name` as `name`."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text.replace("``", "`"))


def guards_page() -> str:
    """docs/guards.md: per guard what it protects, the bug and the remedy, and which ops each rule
    looks at; then add_int16_cast's op selector."""
    from . import int16_narrowing
    from .guards import GUARDS

    sections = [GUARDS_HEAD]
    for guard in GUARDS:
        lines = [f"## `{guard.name}`", "", f"Protects `{guard.protects}`.", "", _markdown(guard.doc), ""]
        for rule in guard.rules:
            ops = ", ".join(f"`{op_type}`" for op_type in rule.op_types)
            lines.append(f"- looks at {ops}: match `{rule.finds.__name__}`, remedy `{rule.remedy.__name__}`")
        if guard.pass_class is not None:
            lines.append(f"- a pass of its own: `{guard.pass_class.__module__}.{guard.pass_class.__name__}`")
        sections.append("\n".join(lines) + "\n")
    selector = _markdown(inspect.getdoc(int16_narrowing) or "")
    sections.append(f"## `common::add_int16_cast`: an option, not a guard\n\n{selector}\n")
    return "\n".join(sections)


#: (file, generator) of every page derived whole.
PAGES = (("docs/guards.md", guards_page),)

#: (file, marker name, generator) for every derived section.
SECTIONS = (
    ("README.md", "passes", readme_passes),
    ("docs/passes.md", "schedule", schedule_table),
    ("docs/rules.md", "rules", rules_table),
)


def pattern(name: str) -> re.Pattern[str]:
    """The region between ``name``'s markers, markers included."""
    return re.compile(rf"<!-- {name}:begin -->\n.*?<!-- {name}:end -->", flags=re.S)


def render(name: str, body: str) -> str:
    return f"<!-- {name}:begin -->\n{body}\n<!-- {name}:end -->"


def update(root: Path = ROOT) -> list[str]:
    """Rewrite every derived page and section under ``root``; the files that changed."""
    changed = []
    for file, generate_page in PAGES:
        path = root / file
        page = generate_page()
        if path.read_text() != page:
            path.write_text(page)
            changed.append(file)
    for file, name, generate in SECTIONS:
        path = root / file
        text = path.read_text()
        if not pattern(name).search(text):
            raise ValueError(f"{file} has no <!-- {name}:begin --> … <!-- {name}:end --> markers")
        section = render(name, generate())
        new = pattern(name).sub(section.replace("\\", "\\\\"), text)
        if new != text:
            path.write_text(new)
            changed.append(file)
    return changed


if __name__ == "__main__":
    print("\n".join(update()) or "every derived section is current")

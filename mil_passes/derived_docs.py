"""The tables that docs/passes.md, docs/rules.md and the README derive from the passes' declarations
and the lint catalogue. ``python -m mil_passes.derived_docs`` rewrites each between its markers
(``<!-- NAME:begin -->`` … ``<!-- NAME:end -->``); tests/test_derived_docs.py checks they are current."""

from __future__ import annotations

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
        return ", ".join(f"`{rule.id}`" for rule in RULES.values() if rule.fix == name) or "—"

    rows = ["| run | pass | goes before | why there | lint rules |", "|---|---|---|---|---|"]
    for number, (name, slot) in enumerate(pipeline_order(declared()), start=1):
        before = f"`{slot.before}`" if slot.before else "everything"
        rows.append(f"| {number} | `{name}` | {before} | {_cell(slot.why)} | {rules(name)} |")
    rows += ["", "| replacement | runs in place of | why that is safe |", "|---|---|---|"]
    for d in declared():
        if d.replaces is not None:
            rows.append(f"| `{d.full_name}` | `{d.replaces.of}` | {_cell(d.replaces.why)} |")
    return "\n".join(rows)


def rules_table() -> str:
    """docs/rules.md's table: every lint rule of the catalogue."""
    from .lint.catalog import rule_table

    return rule_table()


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
    """Rewrite every derived section under ``root``; the files that changed."""
    changed = []
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

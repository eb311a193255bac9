"""docs/layout.md matches the tree: every module and folder of the package has a row, every path a row
names exists, and every file a folder's row names is in that folder."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mil_passes"
ROWS = [
    (cells[0], cells[1])
    for line in (ROOT / "docs" / "layout.md").read_text().splitlines()
    if line.startswith("| `") and len(cells := [c.strip() for c in line.strip("|").split(" | ")]) == 2
]


def _paths(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_every_path_a_row_names_exists():
    missing = [path for first, _ in ROWS for path in _paths(first) if not (ROOT / path).exists()]
    assert missing == []


def test_every_module_and_folder_of_the_package_has_a_row():
    named = {path.rstrip("/") for first, _ in ROWS for path in _paths(first)}
    entries = [p for p in PACKAGE.iterdir() if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py")]
    unnamed = sorted(str(p.relative_to(ROOT)) for p in entries if str(p.relative_to(ROOT)) not in named)
    assert unnamed == []


def test_every_file_a_folder_row_names_is_in_that_folder():
    missing = []
    for first, what in ROWS:
        for folder in (ROOT / path for path in _paths(first) if path.endswith("/")):
            files = {p.name for p in folder.rglob("*.py")}
            named = [name for name in _paths(what) if name.endswith(".py")]
            missing += [f"{folder.name}/{n}" for n in named if n not in files and not (folder / n).exists()]
    assert missing == []

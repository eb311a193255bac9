"""The Python examples of the README and of the pages under docs/ run as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (page, number, block)
    for page in PAGES
    for number, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S), start=1)
]


def test_readme_and_docs_have_examples():
    assert any(page.name == "README.md" for page, _, _ in BLOCKS)
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize(
    "page, number, block", BLOCKS, ids=[f"{page.relative_to(ROOT)}:{number}" for page, number, _ in BLOCKS]
)
def test_readme_example_runs(page, number, block):
    exec(compile(block, f"{page.relative_to(ROOT)} example {number}", "exec"), {})


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(ROOT)) for page in PAGES])
def test_relative_links_lead_to_files(page):
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    missing = [t for t in targets if not t.startswith(("http://", "https://")) and not (page.parent / t).exists()]
    assert missing == []

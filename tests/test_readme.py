"""The Python examples of the README and of the pages under docs/ run as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WHOLE_PAGES = ("writing-a-pass.md",)  # one program over several blocks: tests/test_writing_a_pass.py
BLOCKS = [
    (page, number, block)
    for page in PAGES
    if page.name not in WHOLE_PAGES
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


def _synopsis_lines() -> dict[str, str]:
    """docs/cli.md's synopsis: the first line of each `mil-passes COMMAND …` in its first code block."""
    first_block = re.search(r"```\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(), flags=re.S)
    assert first_block is not None
    lines = [line for line in first_block.group(1).splitlines() if line.startswith("mil-passes ")]
    return {line.split()[1]: line for line in lines}


def test_cli_synopsis_names_every_option_of_every_command():
    from mil_passes.cli.main import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if action.dest == "command").choices
    synopsis = _synopsis_lines()
    assert set(commands) <= set(synopsis), sorted(set(commands) - set(synopsis))
    for name, command in commands.items():
        written = set(re.findall(r"(?<![\w-])-{1,2}[a-z][\w-]*", synopsis[name]))
        missing = [
            action.option_strings[-1]
            for action in command._actions
            if action.option_strings and "--help" not in action.option_strings
            if not written & set(action.option_strings)
        ]
        assert not missing, f"docs/cli.md's synopsis of {name} lacks {missing}"

"""The supported-versions matrix: the demo and the suite (or a named subset) on each combination of
coremltools, Python and numpy the package declares, one virtualenv per cell, one cell at a time.

    python benchmarks/matrix.py                          # every cell, the `core` subset
    python benchmarks/matrix.py --suite full --cell ct8.3-py3.11
    python benchmarks/matrix.py --list                   # the cells and the Python each would use

Each cell's virtualenv lives under ``--venvs`` (default ``.matrix/``), is made with that Python's
``venv`` and gets ``pip install -e '.[test]'`` with the cell's coremltools and numpy pinned. torch (with
the ``models`` and ``optests`` extras, as ``make test`` has them) is installed only where ``torch==2.13.0``
has a CPU wheel at hand (``--torch-pythons``, default 3.11): elsewhere pip would pull a multi-GB CUDA
build, so tests that need torch skip with their reason.
Writes ``benchmarks/results/matrix.md`` (``--report``; a run of some cells replaces only their rows),
the table of docs/supported-versions.md (``--no-pages`` to leave it), and exits 1 when
a cell's demo or tests fail.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Cell:
    coremltools: str
    python: str
    numpy: str  # a pip requirement specifier for numpy

    @property
    def name(self) -> str:
        suffix = "" if self.numpy == DEFAULT_NUMPY else "-numpy" + self.numpy.replace("==", "").replace("<", "-lt")
        return f"ct{'.'.join(self.coremltools.split('.')[:2])}-py{self.python}{suffix}"


# The declared range (pyproject.toml): NumPy 2.4 refuses int() of a size-1 array, which both
# coremltools versions' torch frontends do; 1.24 is the lowest numpy the package declares.
DEFAULT_NUMPY = "<2.4"
LOWEST_NUMPY = "==1.24.4"
# coremltools 8.3.0 has no wheel for Python 3.13 (only an sdist, which installs without its native
# libraries and cannot save an ML Program: "BlobWriter not loaded"), so 8.3 is declared for 3.10-3.12.
CELLS = (
    [Cell("9.0", python, DEFAULT_NUMPY) for python in ("3.10", "3.11", "3.12", "3.13")]
    + [Cell("8.3.0", python, DEFAULT_NUMPY) for python in ("3.10", "3.11", "3.12")]
    + [Cell("8.3.0", "3.10", LOWEST_NUMPY), Cell("9.0", "3.11", LOWEST_NUMPY)]
    # coremltools 8's torch frontend refuses a slice with a run-time end under NumPy 2.3 (GPT-2 with a
    # flexible sequence; mil_passes.testing.models.real.FrontendLimitation): the same under NumPy 2.2.
    + [Cell("8.3.0", "3.11", "<2.3")]
)

# The `core` subset: the CLI, the package reader and writer, lint and optimize, every pass, verify, the
# interpreter's own tests and the README's examples — the product end to end, without the kernel
# sweeps, the fuzzer, the real models and the samples of coremltools' suites.
SUITES = {
    "core": [
        "tests/test_readme.py",
        "tests/test_cli.py",
        "tests/test_package.py",
        "tests/test_mlpackage.py",
        "tests/test_milproto.py",
        "tests/test_atomic.py",
        "tests/test_lint_and_optimize.py",
        "tests/test_rewriter.py",
        "tests/test_concat_slice_to_slice_concat.py",
        "tests/test_fold_shape_ops.py",
        "tests/test_canonicalize_uint8_select.py",
        "tests/test_rename_duplicate_temporaries.py",
        "tests/test_band_part_difference_to_select.py",
        "tests/test_runtime_quantization.py",
        "tests/test_verify.py",
        "tests/test_reference_interpreter.py",
        "tests/test_predict.py",
        "tests/test_head_split.py",
        "tests/test_supported_versions.py",
    ],
    "full": ["tests"],
}


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (3.X): on PATH as python3.X, else the newest pyenv build."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:  # a pyenv shim may not run
        return found
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    builds = [p for p in pyenv.glob(f"{version}.*/bin/python") if p.parts[-3].split(".")[-1].isdigit()]
    return str(max(builds, key=lambda p: int(p.parts[-3].split(".")[-1]))) if builds else None


def run(command: list[str], log, **kwargs) -> int:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, **kwargs).returncode


def nice(command: list[str]) -> list[str]:
    return ["nice", *command] if shutil.which("nice") else command


def set_up(cell: Cell, venv: Path, torch: bool, log) -> str | None:
    """Make and fill the cell's virtualenv; the reason it could not, or None."""
    python = find_python(cell.python)
    if python is None:
        return f"no python{cell.python} (on PATH or under pyenv)"
    bin_python = str(venv / "bin" / "python")
    if not (venv / "bin" / "python").exists() and run([python, "-m", "venv", str(venv)], log):
        return "venv failed"
    # Where torch has a CPU wheel at hand, the extras `make test` installs: torch and the real models.
    extras = "test,models,optests" if torch else "test"
    wanted = [f"coremltools=={cell.coremltools}", f"numpy{cell.numpy}", "-e", f"{ROOT}[{extras}]"]
    if run(nice([bin_python, "-m", "pip", "install", "-q", *wanted]), log):
        return "pip install failed (see the log)"
    return None


def versions(bin_python: str) -> dict[str, str]:
    script = (
        "import importlib.metadata as m, platform\n"
        "print('python', platform.python_version())\n"
        "for d in ('coremltools', 'numpy', 'torch'):\n"
        "    try: print(d, m.version(d))\n"
        "    except m.PackageNotFoundError: print(d, '-')\n"
    )
    out = subprocess.run([bin_python, "-c", script], capture_output=True, text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def summary(output: str) -> str:
    """pytest's closing counts (``512 passed, 40 skipped``), or the last line when there are none."""
    lines = [line.strip("= ") for line in output.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if not lines:
        return (output.strip().splitlines() or ["no output"])[-1]
    return re.sub(r", \d+ warnings?", "", re.sub(r" in [\d.]+s.*", "", lines[-1]))


def run_cell(cell: Cell, args, log) -> dict[str, str]:
    venv = args.venvs / cell.name
    torch = cell.python in args.torch_pythons
    problem = set_up(cell, venv, torch, log)
    row = {"cell": cell.name, "suite": args.suite, "python": cell.python, "coremltools": cell.coremltools}
    row["numpy"] = cell.numpy
    if problem:
        return {**row, "demo": "-", "tests": problem, "ok": "no"}
    bin_python = str(venv / "bin" / "python")
    row.update(versions(bin_python))
    row["torch"] = row.get("torch", "-")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as out:
        demo = run(nice([str(venv / "bin" / "mil-passes"), "demo", "--quiet", "--output", out]), log, env=env)
    row["demo"] = "ok" if demo == 0 else f"exit {demo}"
    tests = SUITES[args.suite] if args.suite in SUITES else args.suite.split(",")
    started = time.monotonic()
    log.flush()
    result = subprocess.run(
        nice([bin_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    log.write(result.stdout + result.stderr)
    row["tests"] = summary(result.stdout)
    row["minutes"] = f"{(time.monotonic() - started) / 60:.1f}"
    row["ok"] = "yes" if demo == 0 and result.returncode == 0 else "no"
    return row


COLUMNS = ("cell", "suite", "python", "coremltools", "numpy", "torch", "demo", "tests", "minutes")
# docs/supported-versions.md's table lies between these markers.
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"


def earlier_rows(report: Path) -> list[dict[str, str]]:
    """The rows of an earlier report, so that a run of some cells updates only theirs."""
    if not report.exists():
        return []
    rows = []
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(COLUMNS) and cells[0] != "cell":
            rows.append(dict(zip(COLUMNS, cells)))
    return rows


def table(rows: list[dict[str, str]], columns: tuple[str, ...] = COLUMNS) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row.get(column, "-") for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def write_between_markers(page: Path, text: str) -> None:
    """Replace what lies between the matrix markers of ``page`` (a page without them is left alone)."""
    content = page.read_text()
    if BEGIN in content and END in content:
        head, rest = content.split(BEGIN, 1)
        page.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")


def write_report(args, rows: list[dict[str, str]]) -> None:
    """The report with ``rows`` in place of earlier rows of the same cell and suite, and the pages' tables."""
    ran = {(row["cell"], row["suite"]) for row in rows}
    kept = [row for row in earlier_rows(args.report) if (row["cell"], row["suite"]) not in ran]
    position = {cell.name: index for index, cell in enumerate(CELLS)}
    merged = sorted(kept + rows, key=lambda r: (position.get(r["cell"], len(CELLS)), r["suite"]))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(
        "# Supported-versions matrix\n\nWritten by `python benchmarks/matrix.py` (`make matrix`); last written "
        f"{stamp}. Suites: `core` (see SUITES in benchmarks/matrix.py), `full` (all of tests/).\n\n"
        f"{table(merged)}\n"
    )
    if args.pages:
        write_between_markers(ROOT / "docs" / "supported-versions.md", table(merged))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="core", help="core (default), full, or comma-separated test paths")
    parser.add_argument("--cell", action="append", help="run only this cell (repeatable), e.g. ct8.3-py3.11")
    parser.add_argument("--venvs", type=Path, default=ROOT / ".matrix", help="where the cells' virtualenvs live")
    parser.add_argument("--torch-pythons", default="3.11", help="Pythons that get torch (a CPU wheel at hand)")
    parser.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "results" / "matrix.md")
    parser.add_argument("--report-only", action="store_true", help="rewrite the tables from the report, run nothing")
    parser.add_argument("--no-pages", dest="pages", action="store_false", help="leave docs/supported-versions.md alone")
    parser.add_argument("--list", action="store_true", help="print the cells and their interpreters, run nothing")
    args = parser.parse_args(argv)
    args.torch_pythons = args.torch_pythons.split(",")
    by_name = {c.name: c for c in CELLS}
    unknown = [name for name in args.cell or () if name not in by_name]
    if unknown:
        parser.error(f"unknown cell {unknown[0]!r}; cells: {', '.join(by_name)}")
    cells = [by_name[name] for name in args.cell] if args.cell else CELLS  # in the order asked
    if args.list:
        for cell in cells:
            print(f"{cell.name:28} {find_python(cell.python) or 'missing'}")
        return 0
    args.venvs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, str]] = []
    for cell in [] if args.report_only else cells:
        with open(args.venvs / f"{cell.name}.log", "w") as log:
            print(f"{cell.name}: setting up and running (log: {log.name})", file=sys.stderr, flush=True)
            rows.append(run_cell(cell, args, log))
        print(f"{cell.name}: demo {rows[-1]['demo']}, tests {rows[-1]['tests']}", file=sys.stderr, flush=True)
        write_report(args, rows)  # after each cell: an interrupted run keeps the cells it finished
    write_report(args, rows)
    print(table(rows))
    return 0 if all(row["ok"] == "yes" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the suite runners share (``peer_suite.py``, ``op_tests.py``): pytest sessions under the
reference plugin run side by side, their per-test outcome rows, classified causes, report cells."""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# Outcome columns, in report order (see mil_passes.reference.pytest_plugin.OUTCOMES).
COLUMNS = (
    "agree",
    "disagree",
    "interpreter-error",
    "declined",
    "pass-error",
    "timeout",
    "conversion-failure",
    "failed",
    "converted",
    "skipped",
    "xfail",
    "neural-network",
)
COMPARED = ("agree", "disagree", "interpreter-error")  # converted, then predicted by the interpreter


@dataclass(frozen=True)
class Cause:
    """A classified cause of failure: rows whose ``field`` matches ``pattern`` (and, when given,
    for which ``verify`` confirms the evidence on the row itself)."""

    field: str
    pattern: str
    category: str
    evidence: str
    reproducer: str = ""
    verify: Callable[[dict], bool] | None = None

    def matches(self, row: dict) -> bool:
        if re.search(self.pattern, str(row.get(self.field, ""))) is None:
            return False
        return self.verify is None or self.verify(row)


#: How every suite runner starts a pytest session: quiet, no cache, under the reference plugin.
PYTEST_UNDER_PLUGIN = (
    sys.executable,
    "-m",
    "pytest",
    "-q",
    "-rN",
    "-p",
    "no:cacheprovider",
    "-p",
    "mil_passes.reference.pytest_plugin",
)


def classify(row: dict, causes: tuple[Cause, ...]) -> Cause | None:
    """The first of ``causes`` that matches ``row``."""
    return next((cause for cause in causes if cause.matches(row)), None)


def load_rows(path: Path, key: Callable[[str], str] | None = None) -> dict[str, dict]:
    """The plugin's outcome rows (``--reference-outcomes``), keyed by ``key(nodeid)`` (default:
    the node id without the file)."""
    key = key or (lambda nodeid: nodeid.split("::", 1)[1])
    rows = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows[key(row["nodeid"])] = row
    return rows


def run_sessions(
    commands: dict[str, list[str]], work: Path, jobs: int, env: dict[str, str], cwd: Path, titles: dict[str, str]
) -> tuple[dict[str, float], list[float]]:
    """Run the pytest ``commands`` (``jobs`` at a time, logs in ``work``); their wall seconds, and
    the machine's 1-minute load average once a minute (wall times mean little without it)."""
    started, procs, seconds, loads = {}, {}, {}, []
    pending, ticks = list(commands), 0
    while pending or procs:
        while pending and len(procs) < jobs:
            run = pending.pop(0)
            log = open(work / f"{run}.log", "w")
            print(f"{titles[run]}: log in {log.name}", flush=True)
            procs[run] = (subprocess.Popen(commands[run], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT), log)
            started[run] = time.perf_counter()
        for run, (proc, log) in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            log.close()
            seconds[run] = round(time.perf_counter() - started[run], 1)
            del procs[run]
            if code not in (0, 1):  # 1: some tests failed, which the report is about
                raise SystemExit(f"pytest ({titles[run]}) exited {code}; see {log.name}")
        ticks += 1
        if ticks % 60 == 0 and hasattr(os, "getloadavg"):
            loads.append(os.getloadavg()[0])
        time.sleep(1)
    return seconds, loads


def versions() -> str:
    import coremltools
    import numpy

    try:
        import torch

        torch_version = f"torch {torch.__version__}, "
    except ImportError:
        torch_version = ""
    return (
        f"coremltools {coremltools.__version__}, {torch_version}numpy {numpy.__version__}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.machine()}"
    )


def outcome_texts(columns: tuple[str, ...] = COLUMNS) -> dict[str, str]:
    from mil_passes.reference.pytest_plugin import OUTCOMES

    return {name: OUTCOMES[name] for name in columns}


def agreement(counts: collections.Counter) -> str:
    compared = sum(counts[c] for c in COMPARED)
    return f"{100 * counts['agree'] / compared:.1f}%" if compared else "n/a"


def skips(rows: dict, title: str) -> list[str]:
    """Skips and expected failures, grouped by reason, with what failed in the first case."""
    groups: dict[tuple, list[dict]] = collections.defaultdict(list)
    for row in rows.values():
        if row["outcome"] in ("skipped", "xfail"):
            groups[(row["outcome"], first_line(row.get("reason", "")))].append(row)
    lines = [f"## {title}", ""]
    if not groups:
        return lines + ["None.", ""]
    lines += [
        "Expected failures show what failed: the interpreter may fail where Core ML does.",
        "",
        "| cases | outcome | reason | what failed (first case) |",
        "|---:|---|---|---|",
    ]
    for (outcome, reason), group in sorted(groups.items(), key=lambda item: -len(item[1])):
        first = group[0]
        failed = f"{first.get('error', '')}: {one_line(first.get('message', ''), 100)}" if first.get("error") else ""
        if first.get("where"):
            failed += f" (at `{first['where']}`)"
        lines.append(f"| {len(group)} | {outcome} | {one_line(reason)} | {failed} |")
    return lines + [""]


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def arguments(
    description: str, *, sample: int, sample_env: str, out: Path, work: Path, timeout: float, case_help: str
) -> argparse.ArgumentParser:
    """The options every suite runner takes: --sample, --out, --work, --timeout, --case, --report-only."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--sample",
        type=int,
        default=int(os.environ.get(sample_env, sample)),
        help=f"run every Nth case (env {sample_env}; default {sample}; 1 = all)",
    )
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--work", type=Path, default=work)
    parser.add_argument("--timeout", type=float, default=timeout, help="per-test limit in seconds")
    parser.add_argument("--case", dest="cases", action="append", default=[], metavar="NODE", help=case_help)
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from --work")
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parsed and checked arguments; ``--work`` exists afterwards."""
    args = parser.parse_args(argv)
    if args.sample < 1:
        parser.error("--sample must be a positive integer")
    args.work.mkdir(parents=True, exist_ok=True)
    return args

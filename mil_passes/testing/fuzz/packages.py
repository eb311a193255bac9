"""Fuzz the command with hostile packages: does its promise hold for any bytes on disk?

    python -m mil_passes.testing.fuzz.packages [--variants N] [--seed S]

Each variant is a copy of a small package (two conv layers, weights in ``weight.bin``) with one
mutation of :mod:`.package_mutations` (four families, taken in turn). ``lint`` runs on every
variant, and ``optimize`` or ``verify`` (in turn) too, in this process through the command's
``main``. Each run must:

- exit 0, 1 or 2 (3 is an internal error; any other exception escaped);
- print no traceback, and on exit 2 exactly one line of at most ``MAX_LINE`` characters;
- leave no ``OUT`` (nor any staging folder) after a failure;
- leave the variant and the folder outside it unchanged (by hash; symlinks by target);
- finish within ``MAX_SECONDS`` (a FIFO read would block) and keep the process under ``MAX_RSS_MB``.

Prints the counts per family and each broken promise; exits 1 if any.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import random
import resource
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .package_mutations import FAMILIES

MAX_LINE = 300
MAX_SECONDS = 120.0
MAX_RSS_MB = 3000
COMMANDS = ("optimize", "verify")  # besides lint, one each variant, in turn


@dataclass
class Run:
    """One command on one variant, and the promise it broke (None: all kept)."""

    variant: int
    family: str
    mutation: str
    command: str
    status: int | None
    seconds: float
    problem: str | None = None

    def __str__(self) -> str:
        return (
            f"variant {self.variant} ({self.family}: {self.mutation}) {self.command}: exit {self.status}, "
            f"{self.seconds:.1f} s: {self.problem}"
        )


@dataclass
class PackageFuzzReport:
    """Every run, with counts per family."""

    variants: int = 0
    runs: list[Run] = field(default_factory=list)
    peak_rss_mb: float = 0.0

    @property
    def problems(self) -> list[Run]:
        return [run for run in self.runs if run.problem is not None]

    def lines(self) -> list[str]:
        out = []
        for family in FAMILIES:
            runs = [r for r in self.runs if r.family == family]
            variants = len({r.variant for r in runs})
            statuses = Counter(r.status for r in runs)
            shown = ", ".join(f"exit {s}: {n}" for s, n in sorted(statuses.items(), key=lambda kv: str(kv[0])))
            problems = sum(r.problem is not None for r in runs)
            out.append(f"{family}: {variants} variants, {len(runs)} runs ({shown}), {problems} broken promises")
        slowest = max(self.runs, key=lambda r: r.seconds, default=None)
        out.append(
            f"total: {self.variants} variants, {len(self.runs)} runs, {len(self.problems)} broken promises; "
            f"peak RSS {self.peak_rss_mb:.0f} MB"
            + (f"; slowest run {slowest.seconds:.1f} s ({slowest.command}, {slowest.mutation})" if slowest else "")
        )
        out.extend(f"broken: {run}" for run in self.problems)
        return out


def base_package(folder: Path) -> Path:
    """The package every variant starts from: the streaming-cache example, 2 layers, 8 channels."""
    from ...examples import streaming_cache_program
    from ...package.io import save

    return save(streaming_cache_program(layers=2, channels=8), folder / "base.mlpackage")


def fuzz_packages(variants: int, seed: int = 0, work: Path | None = None) -> PackageFuzzReport:
    """``variants`` mutated packages, each through lint and optimize or verify."""
    report = PackageFuzzReport()
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="package-fuzz-")))
        base = base_package(work)
        rng = random.Random(seed)
        families = list(FAMILIES)
        for index in range(variants):
            family = families[index % len(families)]
            mutation = rng.choice(FAMILIES[family])
            folder = work / f"variant-{index}"
            package, outside = folder / "model.mlpackage", folder / "outside"
            outside.mkdir(parents=True)
            shutil.copytree(base, package)
            said = mutation(rng, package, outside)
            for command in ("lint", COMMANDS[index % len(COMMANDS)]):
                report.runs.append(_checked_run(index, family, said, command, package, folder))
            report.peak_rss_mb = _rss_mb()
            shutil.rmtree(folder)
            report.variants += 1
    return report


class _Hang(BaseException):
    """Raised by the alarm when a run takes longer than MAX_SECONDS."""


def _checked_run(index: int, family: str, said: str, command: str, package: Path, folder: Path) -> Run:
    from ...cli import main

    output = folder / "out.mlpackage"
    argv = {
        "lint": ["lint", str(package)],
        "optimize": ["optimize", str(package), "-o", str(output)],
        "verify": ["verify", str(package), "--feeds", "1"],
    }[command]
    before = tree_digest(folder)
    before_entries = set(os.listdir(folder))
    out, err = io.StringIO(), io.StringIO()
    run = Run(index, family, said, command, None, 0.0)
    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, _raise_hang)
    signal.setitimer(signal.ITIMER_REAL, MAX_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run.status = main(argv)
    except _Hang:
        run.problem = f"still running after {MAX_SECONDS:.0f} s"
    except BaseException as error:  # noqa: BLE001 - what escaped main is the finding
        run.problem = f"{type(error).__name__} escaped main: {str(error)[:200]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    run.seconds = time.monotonic() - started
    if run.problem is None:
        run.problem = _broken_promise(run, out.getvalue(), err.getvalue())
    if run.problem is None and output.exists() and run.status not in (0, 1):
        run.problem = "OUT left after a failure"
    left = set(os.listdir(folder)) - before_entries - {output.name}
    if run.problem is None and left:
        run.problem = f"left {sorted(left)} beside OUT"
    if output.exists():
        shutil.rmtree(output)
    if run.problem is None and tree_digest(folder) != before:
        run.problem = "the input or the folder outside it changed"
    if run.problem is None and _rss_mb() > MAX_RSS_MB:
        run.problem = f"peak RSS {_rss_mb():.0f} MB"
    return run


def _broken_promise(run: Run, out: str, err: str) -> str | None:
    if "Traceback (most recent call last)" in out + err:
        return "printed a traceback"
    if run.status not in (0, 1, 2):
        return f"exit {run.status}: {err.strip()[:200]}"
    if run.status == 2:
        lines = err.splitlines()
        if len(lines) != 1:
            return f"{len(lines)} lines on exit 2"
        if len(lines[0]) > MAX_LINE:
            return f"a line of {len(lines[0])} characters on exit 2"
    return None


def _raise_hang(signum, frame) -> None:
    raise _Hang


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tree_digest(folder: Path) -> str:
    """Names, types, contents and symlink targets of everything under ``folder`` (no link
    followed, no FIFO opened)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            info = os.lstat(path)
            digest.update(f"{os.path.relpath(path, folder)}\0{stat.S_IFMT(info.st_mode)}\0".encode(errors="replace"))
            if stat.S_ISLNK(info.st_mode):
                digest.update(os.readlink(path).encode(errors="replace"))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    prog = "python -m mil_passes.testing.fuzz.packages"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--variants", type=int, default=200, metavar="N", help="mutated packages (default 200)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the mutations (default 0)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = fuzz_packages(args.variants, args.seed)
    for line in report.lines():
        print(line)
    print(f"{time.monotonic() - started:.0f} s")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())

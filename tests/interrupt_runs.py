"""Real runs of ``mil-passes`` interrupted by a SIGINT after a chosen delay, and what each left.

Used by tests/test_interrupts.py, and as a script to count ignored interrupts of any tree::

    python tests/interrupt_runs.py --tree /path/to/checkout --runs 40 --until 3.0

Each run is ``python -m mil_passes.cli optimize IN -o OUT --force --quiet`` in a fresh process
whose SIGINT is Python's default (a child of a background job would otherwise inherit SIG_IGN),
with ``TMPDIR`` pointing at a folder of its own, so anything written to the system's temporary
folder shows. OUT holds an old package before each run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

TOLERANCE_NS = 50_000_000  # ctime is the kernel's coarse clock; a commit held over the signal is µs


def tree_digest(path: Path) -> str:
    """Names and contents of everything under ``path``."""
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        digest.update(str(item.relative_to(path)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@dataclass
class Run:
    delay: float
    signalled: bool
    returncode: int
    out_state: str  # old | new | missing | broken
    written_after_signal: bool
    leftovers: list[str]  # staging beside OUT, files in the run's TMPDIR
    stderr: str
    committed_before_signal: bool = False  # OUT was the new package by the signal (within the clock's 50 ms)

    @property
    def finished_first(self) -> bool:
        """The command had written OUT whole before the signal was sent and then exited 0: the
        signal came as the process was ending (after ``main`` returned, Python runs no handler)."""
        return self.signalled and self.returncode == 0 and self.committed_before_signal

    @property
    def died_starting(self) -> bool:
        """Stopped before the command's code ran: Python's default death by SIGINT, or Python's
        own start failing (exit 1, "Fatal Python error: init_import_site", "init_sys_streams", …)
        when the interrupt lands while the interpreter initializes), or a ``KeyboardInterrupt`` raised
        in Python's own imports before any module of the package but its ``__init__`` ran (the
        command script's ``import re``, the editable install's finder): its handler was not there yet."""
        if self.returncode == -signal.SIGINT or re.search(r"Fatal Python error: init_\w+", self.stderr):
            return True
        before_the_package = re.search(r'File "[^"]*mil_passes/(?!__init__\.py")', self.stderr) is None
        return self.returncode == 1 and self.stderr.rstrip().endswith("KeyboardInterrupt") and before_the_package

    @property
    def ignored(self) -> bool:
        """The command was interrupted but did not end as interrupted."""
        return self.signalled and not self.died_starting and not self.finished_first and self.returncode != 130

    @property
    def escaped_main(self) -> bool:
        """A ``KeyboardInterrupt`` traceback through the command's own ``main``: never allowed."""
        return re.search(r'cli/main\.py", line \d+, in _?main', self.stderr) is not None

    @property
    def kept_its_promise(self) -> bool:
        if self.escaped_main:
            return False
        if not self.signalled:
            return self.returncode in (0, 1) and self.out_state == "new" and not self.leftovers
        return (
            (self.returncode == 130 or self.died_starting or self.finished_first)
            and self.out_state in ("old", "new")
            and not self.written_after_signal
            and not self.leftovers
        )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def out_state(out: Path, old_digest: str) -> str:
    if not out.exists():
        return "missing"
    if tree_digest(out) == old_digest:
        return "old"
    model = out / "Data" / "com.apple.CoreML" / "model.mlmodel"
    if (out / "Manifest.json").is_file() and model.is_file() and model.stat().st_size > 0:
        return "new"
    return "broken"


def interrupted_run(tree: Path, argv: list[str], workdir: Path, delay: float | None, *, old: Path | None = None) -> Run:
    """``mil-passes ARGV`` of ``tree``'s code, run in ``workdir`` (``OUT`` in ``argv`` means
    ``workdir/out.mlpackage``, a copy of ``old`` at the start), interrupted after ``delay``
    seconds (None: not interrupted)."""
    workdir.mkdir(parents=True)
    out, tmp = workdir / "out.mlpackage", workdir / "tmp"
    if old is not None:
        shutil.copytree(old, out)
    tmp.mkdir()
    old_digest = tree_digest(out) if old is not None else ""
    env = dict(os.environ, PYTHONPATH=str(tree), TMPDIR=str(tmp))
    command = [sys.executable, "-m", "mil_passes.cli", *(str(out) if a == "OUT" else a for a in argv)]
    child = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    sent, signalled = 0, False
    if delay is not None:
        try:
            child.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            sent = time.time_ns()
            child.send_signal(signal.SIGINT)
            signalled = True
    _, stderr = child.communicate(timeout=300)
    state = out_state(out, old_digest) if old is not None else "new"
    written_after = signalled and state == "new" and old is not None and out.stat().st_ctime_ns > sent + TOLERANCE_NS
    committed_before = (
        signalled and state == "new" and old is not None and out.stat().st_ctime_ns <= sent + TOLERANCE_NS
    )
    leftovers = [p.name for p in workdir.iterdir() if p.name.startswith(".")]
    leftovers += [f"TMPDIR/{p.name}" for p in tmp.iterdir()]
    return Run(delay or 0.0, signalled, child.returncode, state, written_after, leftovers, stderr, committed_before)


def optimize_argv(source: Path) -> list[str]:
    return ["optimize", str(source), "-o", "OUT", "--force", "--quiet"]


def interrupted_runs(
    tree: Path, argv: list[str], delays: list[float | None], *, old: Path | None = None, jobs: int = 2
) -> list[Run]:
    """One run per delay, ``jobs`` at a time, each in a folder of its own."""
    with tempfile.TemporaryDirectory(prefix="mil-passes-interrupts-") as scratch:
        with ThreadPoolExecutor(jobs) as pool:
            futures = [
                pool.submit(interrupted_run, tree, argv, Path(scratch) / f"run{i}", delay, old=old)
                for i, delay in enumerate(delays)
            ]
            return [future.result() for future in futures]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--from", dest="start", type=float, default=0.05, help="first delay, s")
    parser.add_argument("--until", type=float, default=3.0, help="last delay, s")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree))
    from mil_passes.examples import streaming_cache_program
    from mil_passes.package import io as mlpackage

    with tempfile.TemporaryDirectory() as folder:
        source = mlpackage.save(streaming_cache_program(layers=2, channels=8), Path(folder) / "in.mlpackage")
        old = mlpackage.save(streaming_cache_program(layers=1, channels=8), Path(folder) / "old.mlpackage")
        step = (args.until - args.start) / max(args.runs - 1, 1)
        delays = [args.start + i * step for i in range(args.runs)]
        runs = interrupted_runs(args.tree, optimize_argv(source), list(delays), old=old, jobs=args.jobs)
    signalled = [run for run in runs if run.signalled]
    print(
        f"tree {args.tree}: {len(runs)} runs, delays {args.start:.2f}-{args.until:.2f} s, {len(signalled)} interrupted"
    )
    print(f"  ignored (exit {sorted({r.returncode for r in signalled if r.ignored})}): {sum(r.ignored for r in runs)}")
    print(f"  exit codes: {sorted(r.returncode for r in signalled)}")
    print(f"  stopped before the command ran (signal death, Python's start): {sum(r.died_starting for r in runs)}")
    print(f"  OUT: {sorted(r.out_state for r in runs)}")
    print(f"  written after the signal: {sum(r.written_after_signal for r in runs)}")
    print(
        f"  runs with leftovers: {sum(bool(r.leftovers) for r in runs)} {[r.leftovers for r in runs if r.leftovers][:3]}"
    )
    broken = [r for r in runs if not r.kept_its_promise]
    print(f"  broke a promise: {len(broken)}")
    for run in broken[:3]:
        print(f"    delay {run.delay:.2f} s, exit {run.returncode}, OUT {run.out_state}: {run.stderr[-1500:]}")


if __name__ == "__main__":
    main()

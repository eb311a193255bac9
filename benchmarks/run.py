"""Run every benchmark; write ``benchmarks.md`` and ``benchmarks.png`` under ``benchmarks/results/``.

Usage:

    .venv/bin/python -m benchmarks.run            # what `make bench` runs (< 10 minutes on 2 cores)
    .venv/bin/python -m benchmarks.run --quick    # tiny programs, one repetition: a smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' progress bars, once per conversion
ROOT = Path(__file__).resolve().parent.parent

import coremltools as ct  # noqa: E402

from .plot import plot  # noqa: E402
from .programs import ProgramSpec, torch_workloads  # noqa: E402
from .report import checks, markdown  # noqa: E402
from .suites import run_all  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PARTIAL = "benchmarks.partial.md"
QUICK = {
    "layers": [4, 16],
    "repeats": [1, 1],
    "levels": [2, 8],
    "level_repeats": [1, 1],
    "torch_cases": ["streaming_conv"],
    "torch_repeats": 1,
}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--layers",
        type=int,
        nargs="+",
        default=[250, 1000, 4000],
        help="streaming program sizes, in layers (default: 250 1000 4000)",
    )
    parser.add_argument(
        "--repeats", type=int, nargs="+", default=[5, 3, 2], help="repetitions per streaming size (default: 5 3 2)"
    )
    parser.add_argument(
        "--levels", type=int, nargs="+", default=[20, 80], help="nested program sizes, in levels (default: 20 80)"
    )
    parser.add_argument(
        "--level-repeats", type=int, nargs="+", default=[5, 3], help="repetitions per nested size (default: 5 3)"
    )
    parser.add_argument(
        "--torch-cases", nargs="*", default=None, help="torch models to convert (default: every case of the test suite)"
    )
    parser.add_argument("--torch-repeats", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="skip the torch conversions")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output directory (default: {RESULTS})")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny programs, one repetition, one torch model (sizes given explicitly win)",
    )
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    args = parser.parse_args(argv)
    if args.quick:  # quick sizes, unless given explicitly
        parser.set_defaults(**QUICK)
        args = parser.parse_args(argv)
    for sizes, repeats, flag in (
        (args.layers, args.repeats, "--repeats"),
        (args.levels, args.level_repeats, "--level-repeats"),
    ):
        if len(sizes) != len(repeats):
            parser.error(f"{flag} needs one count per size: {len(sizes)} sizes, {len(repeats)} counts")
    return args


def specs(args: argparse.Namespace) -> list[tuple[ProgramSpec, int]]:
    """Each size where nothing matches, then where every window matches."""
    result = []
    for family, sizes, repeats in (
        ("streaming", args.layers, args.repeats),
        ("nested", args.levels, args.level_repeats),
    ):
        for size, count in zip(sizes, repeats):
            result += [(ProgramSpec(family, size, False), count), (ProgramSpec(family, size, True), count)]
    return result


def context(args: argparse.Namespace, wall: float, cpu: float, loads: tuple) -> str:
    repeats = ", ".join(f"{size:,} layers: {n}" for size, n in zip(args.layers, args.repeats))
    return (
        f"Measured by `make bench` ({time.strftime('%Y-%m-%d')}): coremltools {ct.__version__}, "
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores "
        f"(load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end). Figures are CPU "
        f"seconds of this process, the best of several repetitions ({repeats}; torch models: "
        f"{args.torch_repeats}), each from cold CPU caches; every ratio compares figures measured "
        f"side by side in one run, each repetition on a freshly built program. The run took {wall / 60:.1f} min wall, "
        f"{cpu / 60:.1f} min CPU. `ops` counts every op of every block, consts included."
    )


def to_json(results: dict) -> dict:
    def plain(value):
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        return value

    return plain(results)


def write(results: dict, args: argparse.Namespace, text: str) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "benchmarks.md").write_text(text)
    (args.out / "benchmarks.json").write_text(json.dumps(to_json(results), indent=1) + "\n")
    plot(results["programs"], args.out / "benchmarks.png")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    start_wall, start_cpu, load_start = time.perf_counter(), time.process_time(), os.getloadavg()[0]

    def report(results: dict) -> str:
        wall, cpu = time.perf_counter() - start_wall, time.process_time() - start_cpu
        return markdown(results, context(args, wall, cpu, (load_start, os.getloadavg()[0])))

    def progress(results: dict, line: str) -> None:
        print(f"[{time.perf_counter() - start_wall:6.0f} s] {line}", file=sys.stderr, flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / PARTIAL).write_text(report(results))  # what an interrupted run measured

    workloads = [] if args.no_torch else torch_workloads(args.torch_cases)
    # Everything imported so far lives to the end: out of the collector's way, a collection
    # costs what the programs measured cost, not what torch and coremltools hold.
    gc.freeze()
    try:
        results = run_all(
            specs(args),
            workloads,
            args.torch_repeats,
            memory_spec=ProgramSpec("streaming", max(args.layers), True),
            progress=progress,
        )
    finally:
        gc.unfreeze()
    text = report(results)
    write(results, args, text)
    (args.out / PARTIAL).unlink(missing_ok=True)
    print(text)
    missed = [check for check in checks(results) if check.status == "MISSED"]
    for check in missed:
        print(f"target missed: {check.figure}: {check.worst:.2f}x > {check.bound:g}x ({check.where})")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())

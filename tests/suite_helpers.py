"""What the suite-sample tests share: loading a runner from ``benchmarks/`` and running it on chosen
cases."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py``, loaded as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_cases(runner: ModuleType, cases: list[str], work: Path, report: str) -> int:
    """``runner.main`` on every one of ``cases`` (no sampling), its work and report in ``work``."""
    argv = ["--sample", "1", "--work", str(work), "--out", str(work / report), "--timeout", "120"]
    for case in cases:
        argv += ["--case", case]
    return runner.main(argv)

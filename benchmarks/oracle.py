"""How fast the oracle is on real models: the interpreter against torch eager, verify against optimize.

    .venv/bin/python -m benchmarks.oracle [--models resnet18 ...] [--repeats 3] [--no-verify]

On the full-size real-model set (:mod:`benchmarks.oracle_models`: resnet18 and mobilenet_v3_small
at 224x224, GPT-2 124M and BERT-base at sequence 128, random weights), one thread each
(``torch.set_num_threads(1)``; numpy's BLAS limited by ``OPENBLAS_NUM_THREADS=1`` and friends,
set before numpy loads):

- ``mil_passes.reference.evaluate`` ÷ torch eager, on the program ``ct.convert`` makes at FLOAT32
  and at FLOAT16; CPU seconds, the best of ``--repeats``, the two interleaved;
- ``mil-passes verify --pipeline default`` ÷ ``mil-passes optimize`` on the package converted with
  ``PassPipeline.EMPTY``; CPU seconds of each command (a child process, startup included), once.

Every ratio compares figures measured side by side in one run. Writes ``oracle.md`` and
``oracle.json`` under ``benchmarks/results/``; exits 1 with ``--check`` when a target is missed.
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"  # before numpy loads its BLAS
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"fp32": 2.5, "fp16": 4.0, "verify": 15.0}
GPT2_VERIFY_SECONDS = 60.0


@dataclass
class ModelFigures:
    """One model's figures (CPU seconds) and ratios."""

    name: str
    torch: float = 0.0
    interpreter: dict[str, float] = field(default_factory=dict)  # precision -> seconds
    verify: float | None = None
    verify_wall: float | None = None
    optimize: float | None = None
    culprit: str | None = None

    def ratio(self, what: str) -> float | None:
        if what == "verify":
            return None if self.verify is None or not self.optimize else self.verify / self.optimize
        seconds = self.interpreter.get(what)
        return None if seconds is None else seconds / self.torch


def _cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def time_interpreter(prepared, precisions: tuple[str, ...], repeats: int) -> tuple[float, dict[str, float]]:
    """Best CPU seconds of torch eager and of ``evaluate`` per precision, interleaved."""
    import torch

    from mil_passes.reference import evaluate

    torch.set_num_threads(1)
    tensors = [torch.from_numpy(x) for x in prepared.inputs.values()]
    feeds = {
        precision: dict(zip(prepared.programs[precision].functions["main"].inputs, prepared.inputs.values()))
        for precision in precisions
    }

    def eager():
        with torch.no_grad():
            prepared.module(*tensors)

    eager()  # warm up: first calls allocate
    for precision in precisions:
        evaluate(prepared.programs[precision], feeds[precision])
    best_torch, best = float("inf"), {precision: float("inf") for precision in precisions}
    for _ in range(repeats):
        best_torch = min(best_torch, _cpu(eager))
        for precision in precisions:
            seconds = _cpu(lambda p=precision: evaluate(prepared.programs[p], feeds[p]))
            best[precision] = min(best[precision], seconds)
    return best_torch, best


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(args: list[str]) -> tuple[float, float, str]:
    """CPU seconds, wall seconds and stdout of ``python -m mil_passes.cli *args`` (one thread)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cpu, wall = _child_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mil_passes.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )
    cpu, wall = _child_cpu() - cpu, time.perf_counter() - wall
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mil-passes {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return cpu, wall, done.stdout


def time_verify(figures: ModelFigures, package: Path) -> None:
    """``verify --pipeline default`` and ``optimize`` on ``package``, one after the other."""
    with tempfile.TemporaryDirectory() as folder:
        figures.optimize, _, _ = run_command(
            ["optimize", str(package), "-o", str(Path(folder) / "out.mlpackage"), "--quiet"]
        )
    figures.verify, figures.verify_wall, out = run_command(["verify", str(package), "--pipeline", "default"])
    last = out.strip().splitlines()[-1] if out.strip() else ""
    figures.culprit = last if last.startswith("culprit") else None


def markdown(rows: list[ModelFigures], context: str) -> str:
    lines = [
        "# The oracle on real models",
        "",
        context,
        "",
        "| model | torch eager (s) | interpreter fp32 (s) | ÷ torch | interpreter fp16 (s) | ÷ torch "
        "| optimize (s) | verify default (s) | ÷ optimize |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def figure(value: float | None, digits: int = 3) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    def ratio(value: float | None) -> str:
        return "—" if value is None else f"{value:.2f}x"

    for row in rows:
        lines.append(
            f"| {row.name} | {figure(row.torch)} | {figure(row.interpreter.get('fp32'))} | {ratio(row.ratio('fp32'))} "
            f"| {figure(row.interpreter.get('fp16'))} | {ratio(row.ratio('fp16'))} | {figure(row.optimize, 1)} "
            f"| {figure(row.verify, 1)} | {ratio(row.ratio('verify'))} |"
        )
    lines += ["", "Targets: " + "; ".join(check for check, _ in checks(rows)), ""]
    culprits = [f"{row.name}: {row.culprit}" for row in rows if row.culprit]
    if culprits:
        lines += ["verify named a culprit: " + "; ".join(culprits), ""]
    return "\n".join(lines)


def checks(rows: list[ModelFigures]) -> list[tuple[str, bool]]:
    """Each target, worded with its worst figure, and whether it holds."""
    result = []
    for what, bound in TARGETS.items():
        measured = [(row.ratio(what), row.name) for row in rows if row.ratio(what) is not None]
        if not measured:
            continue
        worst, where = max(measured)
        label = {"fp32": "interpreter fp32 ÷ torch", "fp16": "interpreter fp16 ÷ torch", "verify": "verify ÷ optimize"}
        ok = worst <= bound
        result.append((f"{label[what]} ≤ {bound:g}x: worst {worst:.2f}x ({where}) {'held' if ok else 'MISSED'}", ok))
    gpt2 = next((row for row in rows if row.name == "gpt2_124m" and row.verify is not None), None)
    if gpt2 is not None:
        ok = gpt2.verify_wall is not None and gpt2.verify_wall < GPT2_VERIFY_SECONDS
        result.append(
            (
                f"GPT-2 124M verified in under {GPT2_VERIFY_SECONDS:g} s: {gpt2.verify_wall:.1f} s wall "
                f"({gpt2.verify:.1f} s CPU) {'held' if ok else 'MISSED'}",
                ok,
            )
        )
    return result


def main(argv: list[str] | None = None) -> int:
    from benchmarks import oracle_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[m.name for m in oracle_models.MODELS])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-verify", action="store_true", help="skip verify and optimize")
    parser.add_argument("--cache", type=Path, default=None, help="keep converted packages there (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    unknown = [name for name in args.models if name not in oracle_models.BY_NAME]
    if unknown:
        parser.error(f"unknown model {unknown[0]} (known: {', '.join(oracle_models.BY_NAME)})")
    start, load = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as temporary:
        cache = args.cache or Path(temporary)
        rows = []
        for name in args.models:
            prepared = oracle_models.prepare(oracle_models.BY_NAME[name], cache)
            figures = ModelFigures(name)
            figures.torch, figures.interpreter = time_interpreter(prepared, ("fp32", "fp16"), args.repeats)
            prepared.programs.clear()  # the programs held only for the interpreter
            if not args.no_verify:
                time_verify(figures, prepared.package)
            rows.append(figures)
            print(f"[{time.perf_counter() - start:6.0f} s] {name}: {figures}", file=sys.stderr, flush=True)
    context = (
        f"Measured by `python -m benchmarks.oracle` ({time.strftime('%Y-%m-%d')}): Python "
        f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} cores (load average {load:.1f} at "
        f"the start, {os.getloadavg()[0]:.1f} at the end), one thread each. CPU seconds; the interpreter and "
        f"torch are the best of {args.repeats}, interleaved; verify and optimize are one run of each command "
        f"(startup included). The run took {(time.perf_counter() - start) / 60:.1f} min wall."
    )
    text = markdown(rows, context)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "oracle.md").write_text(text)
    (args.out / "oracle.json").write_text(json.dumps([asdict(row) for row in rows], indent=1) + "\n")
    print(text)
    return 1 if args.check and not all(ok for _, ok in checks(rows)) else 0


if __name__ == "__main__":
    sys.exit(main())

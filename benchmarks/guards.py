"""What the guards of ``mil_passes.pipeline()`` cost on real models: ops, error vs torch, time.

Each model (mil_passes.testing.models.real) is converted at FLOAT32 and FLOAT16 under
``pipeline()`` and under the same pipeline without its guards (``unguarded()``: no
``webnn::guard_*`` pass, no op_selector for ``common::add_int16_cast``, coremltools' own
``fuse_layernorm_or_instancenorm``), the two conversions
alternating, best CPU seconds of ``repeats``. Run: ``python -m benchmarks.guards [MODEL ...]``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass
from functools import partial

import mil_passes
from mil_passes.schedule import GUARD_NAMES, INT16_NARROWING, REPLACEMENTS

from .measure import Samples, cpu_time
from .programs import op_count

DEFAULT_MODELS = ("resnet18", "mobilenet_v3_small", "bert", "gpt2", "gpt2_flexible")


def unguarded():
    """``mil_passes.pipeline()`` without its guards (and with coremltools' passes it replaces):
    the package's pipeline before them."""
    from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

    guarded = mil_passes.pipeline()
    original = {new: old for old, new in REPLACEMENTS}
    names = [original.get(n, n) for n in guarded.passes if n not in GUARD_NAMES]
    result = PassPipeline(pass_names=names, pipeline_name="unguarded")
    result._pass_options = {k: v for k, v in guarded.get_all_options().items() if k != INT16_NARROWING}
    return result


@dataclass
class GuardCost:
    """One model at one precision: ops, error vs torch and best CPU seconds, without / with guards."""

    model: str
    fp16: bool
    ops: tuple[int, int]
    error: tuple[float, float]
    seconds: tuple[float, float]

    @property
    def ratio(self) -> float:
        return self.seconds[1] / self.seconds[0]

    def row(self) -> str:
        precision = "fp16" if self.fp16 else "fp32"
        ops = f"{self.ops[0]} → {self.ops[1]}"
        error = f"{self.error[0]:.1e} → {self.error[1]:.1e}"
        seconds = f"{self.seconds[0]:.2f} → {self.seconds[1]:.2f}"
        return f"| {self.model} | {precision} | {ops} | {error} | {seconds} | {self.ratio:.2f}x |"


HEADER = (
    "| model | precision | ops (unguarded → pipeline()) | max rel. error vs torch | convert CPU s | ratio |\n"
    "|---|---|---|---|---|---|"
)


def guard_cost(name: str, fp16: bool, repeats: int) -> GuardCost:
    from mil_passes.testing.models.real import BY_NAME, convert, max_error, prepare

    ready = prepare(BY_NAME[name])
    samples, models = Samples(), {}
    runs = [("unguarded", unguarded), ("pipeline", mil_passes.pipeline)]
    for rep in range(repeats):
        for key, make in runs if rep % 2 == 0 else runs[::-1]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run = partial(convert, ready.model, ready.traced, ready.inputs, fp16=fp16, pass_pipeline=make())
                seconds, models[key] = cpu_time(run)
            samples.add(key, seconds)
    keys = ("unguarded", "pipeline")
    return GuardCost(
        name,
        fp16,
        tuple(op_count(models[k]._mil_program) for k in keys),  # type: ignore[arg-type]
        tuple(max_error(models[k], ready.trials) for k in keys),  # type: ignore[arg-type]
        tuple(samples.best(k) for k in keys),  # type: ignore[arg-type]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(HEADER)
    for name in args.models:
        for fp16 in (False, True):
            print(guard_cost(name, fp16, args.repeats).row(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

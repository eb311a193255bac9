"""The dispatch-independent fp16 kernels against plain numpy (one run).

    .venv/bin/python benchmarks/fp16_kernels.py [--values 4194304]

For each op, the seconds of the reference interpreter on one fp16 tensor of ``--values`` values
in [-8, 8) (positive for log), and of the plain numpy computation in float64 rounded to fp16 (what
a kernel without tables would do; its last bits depend on numpy's CPU dispatch). Prints their
ratio; target: at most 2 for every op (elu and softmax pay the boundary check, 1.2-1.5). The last
column is numpy's own fp16 loop, where it has one (on a CPU with AVX-512 FP16, a native SIMD loop:
fast, and different bits elsewhere).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from coremltools.converters.mil import Builder as mb  # noqa: E402
from kernel_helpers import run  # noqa: E402

TARGET_RATIO = 2.0


def _sigmoid(x):
    z = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def _gelu_tanh(x):
    return x * _sigmoid(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))


def _elu(x):
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


# op -> (builder of the op, the float64 function, numpy's fp16 loop or None, whether x must be positive)
CASES: dict[str, tuple[Callable, Callable, Callable | None, bool]] = {
    "exp": (lambda v: mb.exp(x=v), np.exp, np.exp, False),
    "tanh": (lambda v: mb.tanh(x=v), np.tanh, np.tanh, False),
    "sin": (lambda v: mb.sin(x=v), np.sin, np.sin, False),
    "atan": (lambda v: mb.atan(x=v), np.arctan, np.arctan, False),
    "log": (lambda v: mb.log(x=v), np.log, np.log, True),
    "sigmoid": (lambda v: mb.sigmoid(x=v), _sigmoid, None, False),
    "gelu TANH": (lambda v: mb.gelu(x=v, mode="TANH_APPROXIMATION"), _gelu_tanh, None, False),
    "elu": (lambda v: mb.elu(x=v, alpha=np.float16(1.0)), _elu, None, False),
    "softmax": (lambda v: mb.softmax(x=v, axis=-1), _softmax, None, False),
}


def interpreter_seconds(build: Callable, data: np.ndarray) -> float:
    def evaluate_op(x):
        return build(x)

    run(evaluate_op, {"x": data[:1]})  # tables are built once per process
    return best_of(lambda: run(evaluate_op, {"x": data}))


def numpy_seconds(function: Callable, data: np.ndarray, wide: bool) -> float:
    with np.errstate(all="ignore"):
        if wide:
            return best_of(lambda: function(data.astype(np.float64)).astype(np.float16))
        return best_of(lambda: function(data))


def best_of(fn: Callable, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=1 << 22)
    options = parser.parse_args()
    rng = np.random.default_rng(0)
    x = (rng.integers(-(2**15), 2**15, (options.values // 16384, 16384)) / 2**12).astype(np.float16)
    positive = np.abs(x) + np.float16(0.5)
    print(f"{'op':12s} {'kernel s':>9s} {'float64 s':>9s} {'ratio':>6s} {'fp16 loop s':>11s}")
    worst = 0.0
    for name, (build, function, fp16_loop, needs_positive) in CASES.items():
        data = positive if needs_positive else x
        kernel = interpreter_seconds(build, data)
        wide = numpy_seconds(function, data, wide=True)
        native = f"{numpy_seconds(fp16_loop, data, wide=False):11.3f}" if fp16_loop else f"{'-':>11s}"
        worst = max(worst, kernel / wide)
        print(f"{name:12s} {kernel:9.3f} {wide:9.3f} {kernel / wide:6.2f} {native}")
    verdict = "holds" if worst <= TARGET_RATIO else "MISSED"
    print(f"worst ratio {worst:.1f} (target at most {TARGET_RATIO:g}): {verdict}")
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    raise SystemExit(main())

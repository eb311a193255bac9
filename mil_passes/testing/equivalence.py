"""Feeds, equivalence checks and the ``check_pass`` harness every pass test uses."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping

import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline, PassPipelineManager
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..reference import evaluate
from ..reference.interpreter import numpy_dtype
from ..rewriter import iter_ops

DEFAULT_SIZE_CHOICES = (1, 2, 3, 5)


def random_inputs(
    prog: Program,
    seed: int = 0,
    sizes: Mapping[str, int] | int | None = None,
    function: str = "main",
) -> dict[str, np.ndarray]:
    """Feeds for ``prog``'s inputs.

    Symbolic dims get ``sizes[name]`` (or ``sizes`` itself when an int, else a size drawn from
    1, 2, 3, 5 per symbol); floats are standard normal, ints a small signed range (unsigned:
    0..9), bools both values.
    """
    rng = np.random.default_rng(seed)
    func = prog.functions[function]
    chosen: dict[str, int] = {}

    def size_of(dim) -> int:
        if not is_symbolic(dim):
            return int(dim)
        key = str(dim)
        if key not in chosen:
            if isinstance(sizes, int):
                chosen[key] = sizes
            elif sizes is not None and key in sizes:
                chosen[key] = int(sizes[key])
            else:
                chosen[key] = int(rng.choice(DEFAULT_SIZE_CHOICES))
        return chosen[key]

    feeds = {}
    for name, var in func.inputs.items():
        shape = tuple(size_of(d) for d in var.shape) if types.is_tensor(var.sym_type) else ()
        feeds[name] = random_array(rng, numpy_dtype(var), shape)
    return feeds


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Values of ``dtype`` that exercise signs, zeros and both booleans."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(size=shape).astype(dtype)
    if np.issubdtype(dtype, np.unsignedinteger):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.integers(-5, 6, size=shape).astype(dtype)


def _dims(var) -> tuple[str, ...]:
    if not types.is_tensor(var.sym_type):
        return ()
    return tuple("?" if is_symbolic(d) else str(d) for d in var.shape)


def interface(prog: Program, function: str = "main") -> dict[str, list[tuple[str, str, tuple]]]:
    """Input and output names, dtypes and shapes (symbolic dims as ``?``)."""
    func = prog.functions[function]

    def entry(name, var):
        dtype = types.builtin_to_string(var.dtype) if var.sym_type is not None else "?"
        return (name, dtype, _dims(var))

    return {
        "inputs": [entry(n, v) for n, v in func.inputs.items()],
        "outputs": [entry(v.name, v) for v in func.outputs],
    }


def assert_same_interface(before: Program, after: Program, function: str = "main") -> None:
    """Same input and output names, dtypes and shapes."""
    a, b = interface(before, function), interface(after, function)
    for side in ("inputs", "outputs"):
        if a[side] != b[side]:
            raise AssertionError(f"{side} changed:\n  before: {a[side]}\n  after:  {b[side]}")


def _compare(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> None:
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        raise AssertionError(
            f"output '{name}': before is {want.dtype}{list(want.shape)}, after is {got.dtype}{list(got.shape)}"
        )
    if want.size == 0:
        return
    if np.issubdtype(want.dtype, np.floating):
        w, g = want.astype(np.float64), got.astype(np.float64)
        both_nan = np.isnan(w) & np.isnan(g)
        if rtol == 0 and atol == 0:
            bad = ~(both_nan | ((w == g) & (np.signbit(w) == np.signbit(g))))
            error = np.where(bad, 1.0, 0.0)
        else:
            with np.errstate(invalid="ignore"):
                error = np.abs(w - g) - (atol + rtol * np.abs(w))
                same_inf = np.isinf(w) & (w == g)
                error = np.where(both_nan | same_inf, -1.0, np.nan_to_num(error, nan=np.inf))
            bad = error > 0
    else:
        bad = want != got
        error = bad.astype(np.float64)
    if bad.any():
        worst = np.unravel_index(int(np.argmax(error)), want.shape) if want.ndim else ()
        raise AssertionError(
            f"output '{name}' differs at {int(bad.sum())} of {want.size} elements; worst at index "
            f"{tuple(int(i) for i in worst)}: before {want[worst]!r}, after {got[worst]!r}"
            + ("" if rtol == 0 and atol == 0 else f" (rtol={rtol}, atol={atol})")
        )


def assert_equivalent(
    before: Program,
    after: Program,
    inputs: Mapping[str, Any] | None = None,
    *,
    rtol: float = 0,
    atol: float = 0,
    trials: int = 3,
    seed: int = 0,
    sizes: Mapping[str, int] | int | None = None,
    function: str = "main",
) -> None:
    """Same interface and equal outputs on every trial; exact (bit for bit) by default."""
    assert_same_interface(before, after, function)
    feeds_list = (
        [dict(inputs)]
        if inputs is not None
        else [random_inputs(before, seed=seed + t, sizes=sizes, function=function) for t in range(trials)]
    )
    for feeds in feeds_list:
        want = evaluate(before, feeds, function)
        got = evaluate(after, feeds, function)
        for name in want:
            _compare(name, want[name], got[name], rtol, atol)


def apply_pass(prog: Program, pass_name: str | PassPipeline) -> None:
    """Run a registered pass (``"webnn::..."``) or a whole PassPipeline on ``prog``."""
    if isinstance(pass_name, PassPipeline):
        PassPipelineManager.apply_pipeline(prog, pass_name)
    else:
        PASS_REGISTRY[pass_name](prog)


def check_pass(
    build: Callable[[], Program],
    pass_name: str | PassPipeline,
    *,
    inputs: Mapping[str, Any] | None = None,
    trials: int = 3,
    seed: int = 0,
    sizes: Mapping[str, int] | int | None = None,
    rtol: float = 0,
    atol: float = 0,
) -> Program:
    """Build the program twice, run the pass on one, check it, and return it.

    Checks: ``validate()`` passes, every function is kept with its interface and equivalent
    outputs (``inputs`` feed ``main``; other functions get random feeds), and a second run
    changes nothing (the printed program is identical).
    """
    before, after = build(), build()
    apply_pass(after, pass_name)
    after.validate()
    if list(after.functions) != list(before.functions):
        raise AssertionError(f"functions changed: before {list(before.functions)}, after {list(after.functions)}")
    for function in before.functions:
        assert_equivalent(
            before, after, inputs if function == "main" else None,
            rtol=rtol, atol=atol, trials=trials, seed=seed, sizes=sizes, function=function,
        )
    printed = str(after)
    apply_pass(after, pass_name)
    again = str(after)
    if again != printed:
        raise AssertionError(f"{pass_name} is not idempotent: a second run changed\n{printed}\ninto\n{again}")
    return after


def op_counts(prog: Program) -> Counter:
    """How many ops of each type ``prog`` holds, nested blocks included (consts excluded)."""
    return Counter(op.op_type for op in iter_ops(prog) if op.op_type != "const")


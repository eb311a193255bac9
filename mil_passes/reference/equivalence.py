"""Do two programs compute the same thing? Same interface, equal outputs under the interpreter."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from .feeds import random_inputs
from .interpreter import evaluate


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


def compare_output(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> None:
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
            compare_output(name, want[name], got[name], rtol, atol)

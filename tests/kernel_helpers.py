"""What the kernel tests share: small programs run by the reference interpreter, and the checks
of their results (exact, or within one ulp of a float64 truth)."""

from __future__ import annotations

from typing import Callable

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function, Program, types

from mil_passes.reference import evaluate


def program_of(build: Callable, inputs: dict[str, np.ndarray], opset=ct.target.iOS17) -> Program:
    """The program ``build(**input_vars)`` with one input of each array's shape and dtype."""
    placeholders = {
        name: mb.placeholder(
            shape=value.shape,
            dtype=types.numpy_type_to_builtin_type(value.dtype),
            allow_rank0_input=True,
        )
        for name, value in inputs.items()
    }
    with Function(placeholders, opset) as func:
        outputs = build(**func.inputs)
        func.set_outputs(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
    prog = Program()
    prog.add_function("main", func)
    return prog


def run(build: Callable, inputs: dict[str, np.ndarray], opset=ct.target.iOS17) -> list[np.ndarray]:
    """Evaluate the program ``build(**input_vars)`` on ``inputs``."""
    return list(evaluate(program_of(build, inputs, opset), inputs).values())


def run_one_op(build: Callable, x: np.ndarray, opset=ct.target.iOS17) -> np.ndarray:
    """Evaluate ``build(x)`` as the only op of a program with input ``x``."""
    (out,) = run(lambda x: build(x), {"x": x}, opset)
    return out


def assert_same(got: np.ndarray, want) -> None:
    """``got`` equals ``want`` exactly, dtype included."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


def assert_faithful(actual: np.ndarray, exact: np.ndarray, dtype, noise: float | np.ndarray = 0.0) -> None:
    """``actual`` has ``dtype`` and is within one ulp (of that dtype) of the float64 ``exact``,
    give or take ``noise`` (float64 rounding where the output cancels to ~0)."""
    assert actual.dtype == dtype, f"dtype {actual.dtype}, expected {np.dtype(dtype)}"
    exact = np.asarray(exact, dtype=np.float64)
    assert actual.shape == exact.shape
    tolerance = np.spacing(np.abs(exact).astype(dtype)).astype(np.float64) + noise
    error = np.abs(actual.astype(np.float64) - exact)
    bad = ~(error < tolerance)
    if bad.any():
        i = np.unravel_index(np.argmax(bad), bad.shape)
        raise AssertionError(
            f"{int(bad.sum())} of {bad.size} values off by an ulp or more; at {i}: "
            f"got {actual[i]!r}, exact {exact[i]!r}"
        )

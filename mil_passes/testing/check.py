"""The ``check_pass`` harness every pass test uses, on top of the interpreter's equivalence checks."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

from ..ir import op_counts
from ..runner import run_pass, run_pipeline
from ..reference.equivalence import assert_equivalent, assert_same_interface, compare_output, interface
from ..reference.feeds import random_array, random_inputs

__all__ = [
    "assert_equivalent",
    "assert_same_interface",
    "check_pass",
    "compare_output",
    "interface",
    "op_counts",
    "random_array",
    "random_inputs",
]


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
    _run(after, pass_name)
    after.validate()
    if list(after.functions) != list(before.functions):
        raise AssertionError(f"functions changed: before {list(before.functions)}, after {list(after.functions)}")
    for function in before.functions:
        assert_equivalent(
            before,
            after,
            inputs if function == "main" else None,
            rtol=rtol,
            atol=atol,
            trials=trials,
            seed=seed,
            sizes=sizes,
            function=function,
        )
    printed = str(after)
    _run(after, pass_name)
    again = str(after)
    if again != printed:
        raise AssertionError(f"{pass_name} is not idempotent: a second run changed\n{printed}\ninto\n{again}")
    return after


def _run(prog: Program, target: str | PassPipeline) -> None:
    """Run a registered pass, or a whole pipeline."""
    if isinstance(target, PassPipeline):
        run_pipeline(prog, target)
    else:
        run_pass(prog, target)

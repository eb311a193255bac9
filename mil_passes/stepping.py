"""Stepping a stateful program (iOS18 states) for ``verify``: several predictions from fresh states.

A stateful model's outputs depend on the predictions before: ``verify`` runs it ``steps`` times per
feed from zero states (as ``MLModel.make_state()`` starts them) and compares every step's outputs and
the states after every step. A :class:`SteppedFeed` holds one feed: per input, one array per step
(:class:`PerStep`), and per state its starting value. :func:`stepped_values` runs it and gives each
output and each state stacked over the steps (a leading step axis).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Program

from .reference.feeds import random_inputs
from .reference.interpreter import output_values
from .reference.kernels.state import StateCell
from .reference.state import state_inputs, zero_states

__all__ = ["PerStep", "SteppedFeed", "is_stateful", "stepped_feed", "random_stepped_feed", "stepped_values"]

#: Stepped random feeds draw ints from this range: in a stateful model an int input is mostly a
#: position or a token, and a negative position writes outside a cache.
STEP_INT_RANGE = (0, 5)


class PerStep(tuple):
    """An input's value at each step."""


class SteppedFeed(dict):
    """One feed of a stateful program: input name -> :class:`PerStep`, state name -> start value."""

    def __init__(self, values: Mapping[str, Any], steps: int):
        super().__init__(values)
        self.steps = steps

    def renamed(self, names: Mapping[str, str]) -> "SteppedFeed":
        """The same feed with each key ``old`` as ``names[old]``."""
        return SteppedFeed({names[old]: value for old, value in self.items()}, self.steps)


def is_stateful(prog: Program, function: str = "main") -> bool:
    """Whether ``function`` of ``prog`` has state inputs."""
    return bool(state_inputs(prog.functions[function]))


def stepped_feed(prog: Program, feed: Mapping[str, Any], steps: int) -> SteppedFeed:
    """``feed`` given at every one of ``steps`` steps, from zero states."""
    values: dict[str, Any] = {name: PerStep([np.asarray(value)] * steps) for name, value in feed.items()}
    values.update(zero_states(prog))
    return SteppedFeed(values, steps)


def random_stepped_feed(prog: Program, seed: int, steps: int, sizes: int | None = None) -> SteppedFeed:
    """Random inputs drawn afresh for each step (seeds ``seed * steps + step``; ints in
    :data:`STEP_INT_RANGE`; flexible dims at ``sizes`` when given), from zero states."""
    per_step = [
        random_inputs(prog, seed=seed * steps + step, sizes=sizes, int_range=STEP_INT_RANGE, fit=True)
        for step in range(steps)
    ]
    values: dict[str, Any] = {name: PerStep([feed[name] for feed in per_step]) for name in per_step[0]}
    values.update(zero_states(prog))
    return SteppedFeed(values, steps)


def stepped_values(
    prog: Program, feed: SteppedFeed, on_step: Callable[[int], None] | None = None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``main``'s outputs (by position: two outputs may be one var) and states (in input order) at
    each step, each stacked over the steps. ``on_step`` gets each step's index as it starts."""
    func = prog.functions["main"]
    cells = {name: StateCell(name, np.array(feed[name], copy=True)) for name in state_inputs(func)}
    outputs: list[list[np.ndarray]] = []
    states: list[list[np.ndarray]] = []
    for step in range(feed.steps):
        if on_step is not None:
            on_step(step)
        inputs = {name: value[step] for name, value in feed.items() if name not in cells}
        outputs.append([np.asarray(value) for value in output_values(prog, inputs, states=cells)])
        states.append([cell.value for cell in cells.values()])
    stacked_outputs = [np.stack([step[i] for step in outputs]) for i in range(len(func.outputs))]
    stacked_states = [np.stack([step[i] for step in states]) for i in range(len(cells))]
    return stacked_outputs, stacked_states

"""States (iOS18) on the reference interpreter: ``MLState``'s contract, and stepping a program.

Core ML keeps a stateful model's states (``ct.StateType``: fp16 tensors read with ``read_state``
and written with ``coreml_update_state``) in an ``MLState`` made by ``MLModel.make_state()``,
zero at the start, and ``MLModel.predict(data, state=)`` updates it in place. Here:

- :func:`make_state` (``MLModel.make_state``) gives a :class:`State`, an ``MLState`` with
  ``read_state(name)`` / ``write_state(name, value)`` that
  :func:`~mil_passes.reference.predict.predict` updates in place;
- :func:`evaluate_step` is the functional form for a Program: outputs and the new states from the
  given ones (zeros where not given), nothing changed in place;
- :func:`evaluate_steps` runs a program on a list of feeds from one state, as a stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from coremltools.converters.mil.mil import Program
from coremltools.models.model import MLState

from .interpreter import describe_type, evaluate, state_array, state_inputs
from .kernels.state import StateCell
from .model_program import model_program

__all__ = ["State", "StateError", "make_state", "evaluate_step", "evaluate_steps", "state_inputs", "zero_states"]


class StateError(RuntimeError):
    """A state name, shape or dtype that does not fit the model (``MLState`` raises ``RuntimeError``)."""


class State(MLState):
    """The states of one model function: an ``MLState`` whose values live in numpy.

    ``read_state(name)`` returns a copy of a state's value; ``write_state(name, value)`` sets it
    (shape as declared; a float array is cast to the state's fp16, as Core ML takes it).
    """

    def __init__(self, prog: Program, function: str = "main"):
        super().__init__(proxy=None)
        self._vars = state_inputs(prog.functions[function])
        self.function = function
        self.cells = {name: StateCell(name, state_array(var)) for name, var in self._vars.items()}

    @property
    def names(self) -> list[str]:
        """The state names, in the function's input order."""
        return list(self.cells)

    def _check_name(self, name: str) -> None:
        if name not in self.cells:
            known = ", ".join(self.cells) or "none"
            raise StateError(f"no state named '{name}' (the model's states: {known})")

    def read_state(self, name: str) -> np.ndarray:
        """A copy of state ``name``'s current value."""
        self._check_name(name)
        return self.cells[name].value.copy()

    def write_state(self, name: str, value: np.ndarray) -> None:
        """Set state ``name`` to ``value`` (its declared shape; floats are cast to fp16)."""
        self._check_name(name)
        try:
            self.cells[name].value = state_array(self._vars[name], _as_array(value))
        except ValueError as error:
            raise StateError(str(error)) from None

    def values(self) -> dict[str, np.ndarray]:
        """A copy of every state's value, by name."""
        return {name: cell.value.copy() for name, cell in self.cells.items()}

    def __repr__(self) -> str:
        kinds = ", ".join(f"{name}: {describe_type(var)}" for name, var in self._vars.items())
        return f"State({kinds})"


def _as_array(value: Any) -> np.ndarray:
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def make_state(model: Any) -> State:
    """A fresh :class:`State` (every state zero) for a stateful ``MLModel`` (its function, for a
    multi-function model loaded with ``function_name``) or a Program's ``main``; as
    ``MLModel.make_state()``. Raises ``ValueError`` for a model without states."""
    if isinstance(model, Program):
        prog, function = model, "main"
    else:
        prog, function = model_program(model)
    state = State(prog, function)
    if not state.cells:
        raise ValueError(f"the model has no states (function '{function}' has no ct.StateType input)")
    return state


def zero_states(prog: Program, function: str = "main") -> dict[str, np.ndarray]:
    """Every state of ``function`` at zero, as Core ML starts them."""
    return {name: state_array(var) for name, var in state_inputs(prog.functions[function]).items()}


def evaluate_step(
    prog: Program,
    inputs: Mapping[str, Any],
    states: Mapping[str, Any] | None = None,
    function: str = "main",
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One prediction of ``function``: its outputs and its new states, from ``states`` (arrays by
    name; a state not given is zero). ``states`` is not changed."""
    cells = {name: StateCell(name, value) for name, value in _initial(prog, function, states).items()}
    outputs = evaluate(prog, inputs, function, states=cells)
    return outputs, {name: cell.value for name, cell in cells.items()}


def evaluate_steps(
    prog: Program,
    feeds: Iterable[Mapping[str, Any]],
    states: Mapping[str, Any] | None = None,
    function: str = "main",
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """Run ``function`` on each feed in turn from ``states`` (zeros where not given), each step
    starting from the states the one before left; the outputs and the states after each step."""
    current = _initial(prog, function, states)
    outputs, after = [], []
    for feed in feeds:
        step_outputs, current = evaluate_step(prog, feed, current, function)
        outputs.append(step_outputs)
        after.append({name: value.copy() for name, value in current.items()})
    return outputs, after


def _initial(prog: Program, function: str, states: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    if function not in prog.functions:
        names = ", ".join(sorted(prog.functions))
        raise ValueError(f"program has no function '{function}' (it has: {names})")
    declared = state_inputs(prog.functions[function])
    given = {} if states is None else dict(states)
    for name in given:
        if name not in declared:
            known = ", ".join(declared) or "none"
            raise ValueError(f"unexpected state '{name}': the function's states are {known}")
    return {name: state_array(var, given.get(name)) for name, var in declared.items()}

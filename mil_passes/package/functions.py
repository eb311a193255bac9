"""The functions of a multifunction ML Program (iOS18: ``ct.utils.save_multifunction``), one at a time.

coremltools' passes read the function named ``main`` (``common::sanitize_input_output_names``
among them), and so do lint, the passes of this package and verify, whose scopes are one
function's. :func:`function_view` gives one function as a Program of its own whose only
function is named ``main``: the same ``Function`` object, so what a pass does to the view it
does to the program; :func:`put_back` puts the view's function back under its own name (a pass
may have replaced the object). Names repeated across functions are then judged per function, as
Core ML reads them.
"""

from __future__ import annotations

import copy
import dataclasses

from coremltools.converters.mil.mil import Program

from ..lint.placement import Placement

__all__ = [
    "default_function",
    "function_names",
    "is_multifunction",
    "function_view",
    "put_back",
    "function_description",
    "merged_placement",
]

MAIN = "main"


def function_names(prog: Program) -> list[str]:
    """``prog``'s functions, in the file's order."""
    return list(prog.functions)


def default_function(prog: Program) -> str:
    """The function Core ML calls when none is named (``main`` in a program of one function)."""
    return getattr(prog, "default_function_name", MAIN) or MAIN


def is_multifunction(prog: Program) -> bool:
    """Whether ``prog`` is written as a multifunction model (its description lists functions)."""
    return bool(getattr(prog, "export_as_multifunction", False)) or list(prog.functions) not in ([], [MAIN])


def function_view(prog: Program, name: str) -> Program:
    """``prog``'s function ``name`` as the function ``main`` of a Program of its own (not a copy)."""
    if name not in prog.functions:
        raise KeyError(f"the program has no function '{name}' (it has: {', '.join(prog.functions)})")
    if list(prog.functions) == [MAIN] and name == MAIN:
        return prog
    view = Program()
    view.add_function(MAIN, prog.functions[name])
    return view


def put_back(prog: Program, name: str, view: Program) -> None:
    """Put the function of ``view`` (from :func:`function_view`) back into ``prog`` as ``name``."""
    if view is not prog:
        prog.functions[name] = view.functions[MAIN]


def function_description(spec, name: str):
    """The description of function ``name`` in a Model protobuf: its ``FunctionDescription`` in a
    multifunction model, else the model's description (inputs, outputs, states at the top)."""
    for described in spec.description.functions:
        if described.name == name:
            return described
    return spec.description


def merged_placement(placements: list[Placement]) -> Placement:
    """One placement for several functions (or stages): each count summed, each list joined (a list
    of names once each), each dict of counts summed by key; the chips are the first's."""
    if len(placements) == 1:
        return placements[0]
    merged = copy.copy(placements[0])
    for item in dataclasses.fields(Placement):
        values = [getattr(placement, item.name) for placement in placements]
        first = values[0]
        if isinstance(first, bool) or not isinstance(first, (int, list, dict)):
            continue
        if isinstance(first, int):
            joined: object = sum(values)
        elif isinstance(first, list):
            every = [element for value in values for element in value]
            joined = list(dict.fromkeys(every)) if all(isinstance(e, str) for e in every) else every
        else:
            counts: dict = {}
            for value in values:
                for key, count in value.items():
                    counts[key] = counts.get(key, 0) + count
            joined = counts
        setattr(merged, item.name, joined)
    return merged

"""Run-time dims in the user's words: "input 'input_ids' axis 1 (flexible, 1–64)", never a
coremltools symbol such as ``is0`` (which changes from one read of a model to the next)."""

from __future__ import annotations

import re
from typing import Any, Mapping

from coremltools.converters.mil.mil import Program
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

#: A symbol coremltools made up (``is240``), not one a user named.
_MADE_UP = re.compile(r"\bis\d+\b")


class DimNames:
    """Maps each symbol of a program's flexible inputs to the input and axis that declare it.

    ``enumerated`` names the inputs whose flexibility is a set of shapes (``ct.EnumeratedShapes``)
    rather than a range."""

    def __init__(self, words: Mapping[str, str], enumerated: frozenset[str] = frozenset()) -> None:
        self.words = dict(words)
        self.enumerated = enumerated
        names = sorted(self.words, key=len, reverse=True)
        self._pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None
        self._short: dict[str, str] = {}

    @classmethod
    def of_program(cls, prog: Program, ranges: Mapping[tuple[str, int], str] | None = None) -> DimNames:
        """Every symbolic input dim of ``prog``: the first input (main function first) and axis that
        has it. ``ranges[(input, axis)]`` (e.g. ``"1–64"``) is added when given, else the range of
        the function's input types (``ct.RangeDim``) when it has them."""
        words: dict[str, str] = {}
        enumerated = {name for (name, _), extent in (ranges or {}).items() if extent.startswith("one of")}
        functions = sorted(prog.functions.items(), key=lambda item: item[0] != "main")
        for _, func in functions:
            enumerated |= _enumerated_inputs(func)
            declared = _declared_ranges(func)
            for name, var in func.inputs.items():
                for axis, dim in enumerate(getattr(var, "shape", ()) or ()):
                    if not is_symbolic(dim) or str(dim) in words:
                        continue
                    extent = (ranges or {}).get((name, axis)) or declared.get((name, axis))
                    detail = f"flexible, {extent}" if extent else "flexible"
                    words[str(dim)] = f"input '{name}' axis {axis} ({detail})"
        return cls(words, frozenset(enumerated))

    def flexible(self) -> str:
        """The flexible input axes, in words (``input 'ids' axis 1 (flexible, 1–64), …``); "" if none."""
        return ", ".join(dict.fromkeys(self.words.values()))

    def __call__(self, text: str) -> str:
        """``text`` with every known symbol replaced by its words, and made-up ones (sizes computed
        at run time, which no input declares) by short names ``n1``, ``n2``… in order of first
        use."""
        if self._pattern is not None:
            text = self._pattern.sub(lambda m: self.words[m.group(1)], text)
        return _MADE_UP.sub(lambda m: self._short.setdefault(m.group(0), f"n{len(self._short) + 1}"), text)


def _enumerated_inputs(func: Any) -> set[str]:
    """Inputs a conversion declared with ``ct.EnumeratedShapes``."""
    return {t.name for t in getattr(func, "input_types", None) or () if hasattr(getattr(t, "shape", None), "shapes")}


def _declared_ranges(func: Any) -> dict[tuple[str, int], str]:
    """``(input, axis) -> "lo–hi"`` from the ``ct.TensorType`` inputs a conversion recorded."""
    ranges: dict[tuple[str, int], str] = {}
    for input_type in getattr(func, "input_types", None) or ():
        shape = getattr(getattr(input_type, "shape", None), "shape", None) or ()
        for axis, dim in enumerate(shape):
            lower, upper = getattr(dim, "lower_bound", None), getattr(dim, "upper_bound", None)
            if lower is not None and upper is not None:
                ranges[(input_type.name, axis)] = f"{lower}–{'any' if upper < 0 else upper}"
    return ranges


def ranges_of_description(description: Any) -> dict[tuple[str, int], str]:
    """``(input, axis) -> "lo–hi"`` (or ``"one of 1, 8, 64"``) from a model description's inputs."""
    ranges: dict[tuple[str, int], str] = {}
    for feature in description.input:
        array = feature.type.multiArrayType
        if not feature.type.HasField("multiArrayType"):
            continue
        if array.HasField("shapeRange"):
            for axis, size in enumerate(array.shapeRange.sizeRanges):
                if size.lowerBound != size.upperBound:
                    upper = "any" if size.upperBound < 0 else str(size.upperBound)
                    ranges[(feature.name, axis)] = f"{size.lowerBound}–{upper}"
        elif array.HasField("enumeratedShapes"):
            shapes = [list(s.shape) for s in array.enumeratedShapes.shapes]
            for axis in range(len(shapes[0]) if shapes else 0):
                sizes = sorted({s[axis] for s in shapes if axis < len(s)})
                if len(sizes) > 1:
                    ranges[(feature.name, axis)] = "one of " + ", ".join(map(str, sizes))
    return ranges

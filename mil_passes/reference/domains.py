"""The values an input can take, as the program shows them: rows of a table it indexes, or a mask.

An integer input that reaches (through ops that only move or cast values) the ``indices`` of a
``gather`` or ``gather_along_axis`` whose table has a known number of rows on that axis indexes
that table: its domain is ``[0, rows)`` (the smallest table when it indexes several). An input
that reaches a mask's use is a mask, ``{0, 1}``: ``sub(1, m)`` (``(1 - mask) * min``, the
attention mask of BERT-style models), a ``cast`` to bool, the ``cond`` of ``select``, a logical op,
or a comparison with 0 or 1 (``mask == 0``).

Random feeds are drawn within these domains (:func:`~mil_passes.reference.feeds.random_inputs`
with ``fit=True``), and a feed of one's own outside them is refused naming the input's domain:
a token id past the vocabulary is the feed's fault, not a pass's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Program, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

__all__ = ["Domain", "input_domains"]

#: Ops whose output holds the values of the input they are given (moved, sliced or cast).
_CARRIERS = {
    "cast": "x",
    "reshape": "x",
    "expand_dims": "x",
    "squeeze": "x",
    "transpose": "x",
    "slice_by_index": "x",
    "slice_by_size": "x",
    "identity": "x",
    "tile": "x",
    "gather": "x",
}
#: Ops that pass on one of two of their inputs: ``select`` (a negative index wrapped to the end, as
#: coremltools lowers torch's ``embedding``: ``select(ids >= 0, ids, ids + rows)``).
_CHOOSERS = {"select": ("a", "b")}
_INDEXING = {"gather": "indices", "gather_along_axis": "indices"}
_LOGICAL = frozenset({"logical_and", "logical_or", "logical_xor", "logical_not"})
_COMPARISONS = frozenset({"equal", "not_equal"})


@dataclass(frozen=True)
class Domain:
    """Values ``low`` to ``high - 1`` (a mask: 0 and 1), and ``reason``: the op that shows it."""

    low: int
    high: int
    reason: str
    mask: bool = False

    def describe(self) -> str:
        """``takes values in [0, 96) (it indexes gather 'embed' of 96 rows)``."""
        values = "0 or 1" if self.mask else f"values in [{self.low}, {self.high})"
        return f"takes {values} ({self.reason})"

    def outside(self, array: np.ndarray) -> np.ndarray:
        """The values of ``array`` outside the domain (none: an empty array)."""
        values = np.asarray(array).reshape(-1)
        return np.unique(values[(values < self.low) | (values >= self.high)])


def input_domains(prog: Program, function: str = "main") -> dict[str, Domain]:
    """The domain of each input of ``prog``'s ``function`` that the program shows one for."""
    domains = {}
    for name, var in prog.functions[function].inputs.items():
        if types.is_state(var.sym_type) or not types.is_tensor(var.sym_type):
            continue
        domain = _domain(var)
        if domain is not None:
            domains[name] = domain
    return domains


def _domain(var: Var) -> Domain | None:
    integer = types.is_int(var.dtype)
    rows: list[tuple[int, str]] = []
    mask: str | None = None
    seen: set[int] = set()
    frontier = [var]
    while frontier:
        current = frontier.pop()
        for op in current.child_ops:
            if id(op) in seen:
                continue
            seen.add(id(op))
            reads = {param for param, value in op.inputs.items() if value is current}
            if _INDEXING.get(op.op_type) in reads and integer:
                size = _table_rows(op)
                if size is not None:
                    rows.append((size, f"it indexes {op.op_type} '{op.name}' of {size} rows"))
            if mask is None:
                mask = _mask_use(op, reads)
            if _CARRIERS.get(op.op_type) in reads or reads & set(_CHOOSERS.get(op.op_type, ())):
                frontier.extend(op.outputs)
    if rows:
        size, reason = min(rows)
        return Domain(0, size, reason)
    if mask is not None:
        return Domain(0, 2, mask, mask=True)
    return None


def _table_rows(op) -> int | None:
    axis = int(op.axis.val) if op.axis is not None and op.axis.val is not None else 0
    shape = op.x.shape
    if not shape or not -len(shape) <= axis < len(shape) or is_symbolic(shape[axis]):
        return None
    return int(shape[axis])


def _mask_use(op, reads: set[str]) -> str | None:
    """Why ``op`` uses the value it reads in ``reads`` as a mask, or None."""
    kind = op.op_type
    if kind == "sub" and "y" in reads and _constant_is(op.x, 1):
        return f"it is a mask: sub '{op.name}' computes 1 - it"
    if kind == "cast" and op.dtype.val == "bool":
        return f"it is a mask: cast '{op.name}' makes it bool"
    if kind == "select" and "cond" in reads:
        return f"it is a mask: the cond of select '{op.name}'"
    if kind in _LOGICAL:
        return f"it is a mask: {kind} '{op.name}' reads it"
    if kind in _COMPARISONS:
        other = op.y if "x" in reads else op.x
        if _constant_is(other, 0) or _constant_is(other, 1):
            return f"it is a mask: {kind} '{op.name}' compares it with {int(np.asarray(other.val).reshape(-1)[0])}"
    return None


def _constant_is(var: Var, value: float) -> bool:
    constant = var.val if var is not None else None
    if constant is None:
        return False
    array = np.asarray(constant)
    return array.dtype.kind in "biuf" and array.size > 0 and bool(np.all(array == value))

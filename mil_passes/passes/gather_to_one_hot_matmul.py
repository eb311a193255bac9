"""``webnn::gather_to_one_hot_matmul``: a run-time gather from a small constant table as a one-hot
matmul, which the Neural Engine runs.

Given (an embedding lookup of a table of D rows, its index already an integer in fp16, as
``webnn::gather_index_guard_in_fp16`` leaves it)::

    %rows = gather(x=%table, indices=cast(x=%index_fp16, dtype="int16"), axis=0)   # %table: (D, H)

Result::

    %rows_keep = greater_equal(x=%index_fp16, y=0.0)                    # if the index may be negative:
    %rows_wrapped = add(x=%index_fp16, y=D)                              # row D + i, from the end
    %rows_number = select(cond=%rows_keep, a=%index_fp16, b=%rows_wrapped)
    %rows_index = expand_dims(x=%rows_number, axes=[-1])
    %rows_hit = equal(x=%rows_index, y=[0, 1, …, D-1])                  # fp16
    %rows_one_hot = cast(x=%rows_hit, dtype="fp16")                     # the table's dtype
    %rows = matmul(x=%rows_one_hot, y=%table)

Core ML runs a gather on the CPU (roboflow/rf-detr#1495; pytorch/executorch#19252 lists
``ios17.gather``); FluidInference/mobius publishes this rewrite, a gather as an fp16 one-hot
matmul, which moved it onto the Neural Engine. Exact, bit for bit, for every index in range: each
output element is a sum of one product ``1 * table[k, j]`` and D-1 products ``0 * table[i, j]``,
and a sum of one value and signed zeros is that value, in any order, unless the value is ``-0``
(``+0 + -0`` is ``+0``) or another product is NaN (``0 * inf``). So the table must be a constant
with no ``-0``, inf or NaN, which is checked. The index must be an integer in the float dtype:
it is traced back through ``add``/``sub``/``minimum``/``maximum``/``select`` with integer
constants to casts of int16 or narrower ids, with its range bounded, and the table has at most
:data:`MAX_ROWS` rows, so every row number and every index the cast to int16 could read as one is
an integer the float dtype holds exactly. A negative index in ``[-D, 0)`` reads row ``D + i``, as a
gather does before iOS17 and the reference interpreter does at every opset (iOS17's gather calls it
out of range, so the guard before it, but a signed cast passes it on): ``i + D`` is an integer in
``[0, D)``, exact, and computed with fp16 ops the Neural Engine runs (a ``logical_or`` of two
one-hots would not run there). The index's bounds, rounded to its dtype, lie within the range of
the integer cast the gather reads (a value outside would wrap, maybe onto a row). An index out of
range (undefined for a gather with ``validate_indices=False``; the reference interpreter raises)
reads a row of zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types

from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="gather_to_one_hot_matmul",
    summary="Rewrite every run-time gather from a small constant table as a one-hot matmul.",
    slots=(
        Slot(
            127,
            "common::canonicalize_inplace_pattern",
            "after gather_index_guard_in_fp16, which leaves the gather's index an integer in fp16",
        ),
    ),
    fixes=("ane-gather",),
)

MAX_ROWS = 2048  # row numbers 0..2047: integers fp16 holds exactly
#: The integer ranges of the ids a cast to a float dtype reads exactly (and finitely in fp16).
_INT_RANGES = {
    types.int16: (-(2**15), 2**15 - 1),
    types.uint16: (0, 2**16 - 1),
    types.int8: (-(2**7), 2**7 - 1),
    types.uint8: (0, 2**8 - 1),
    types.bool: (0, 1),
}
_EXACT = {types.fp16: 2**11, types.fp32: 2**24}  # every integer of at most this magnitude is exact
_FINITE = {types.fp16: 65504, types.fp32: 2**24}
_DEPTH = 8
#: The casts to an integer that a gather's index may be, and the values each reads as themselves (a
#: value outside wraps, maybe onto a row: the index's bounds, rounded, must lie within).
_CAST_RANGES = {"int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1), "int32": (-(2**31), 2**31 - 1)}


@dataclass(frozen=True)
class OneHot:
    """The gather as a one-hot matmul: the integer-valued float ``index`` the gather's cast reads, and
    whether it may be a negative row number (counted from the end)."""

    index: Var
    from_end: bool


def _const_int(var: Var) -> int | None:
    value = var.val
    if value is None or np.size(value) != 1 or not float(np.asarray(value).reshape(())).is_integer():
        return None
    return int(np.asarray(value).reshape(()))


Bounds = tuple[int, int]


def integer_range(var: Var, depth: int = _DEPTH, known: dict[Var, Bounds] | None = None) -> Bounds | None:
    """Bounds of ``var`` when every value it can take is an integer its float dtype holds finitely,
    or None when that is not shown (``known``: bounds already narrowed, as in a branch of a select).

    Integers stay integers in a float dtype while finite (rounding an integer gives an integer, and
    rounding is monotonic), so the bounds are those of the exact arithmetic, and every intermediate
    value must stay finite: each node's bounds are checked, not only the last one's."""
    known = known or {}
    if var in known:
        return known[var]
    op = var.op
    if depth == 0 or op is None or var.dtype not in _FINITE:
        return None
    bounds: Bounds | None
    if op.op_type == "cast":
        bounds = _INT_RANGES.get(op.x.dtype)
    elif op.op_type == "select":
        bounds = _select_range(op, depth, known)
    elif op.op_type in ("add", "sub", "minimum", "maximum"):
        x, y = (integer_range(v, depth - 1, known) if v.val is None else _point(v) for v in (op.x, op.y))
        if x is None or y is None:
            return None
        (lo_x, hi_x), (lo_y, hi_y) = x, y
        bounds = {
            "add": (lo_x + lo_y, hi_x + hi_y),
            "sub": (lo_x - hi_y, hi_x - lo_y),
            "minimum": (min(lo_x, lo_y), min(hi_x, hi_y)),
            "maximum": (max(lo_x, lo_y), max(hi_x, hi_y)),
        }[op.op_type]
    else:
        return None
    if bounds is None or max(-bounds[0], bounds[1]) > _FINITE[var.dtype]:
        return None
    return bounds


def _select_range(op: Operation, depth: int, known: dict[Var, Bounds]) -> Bounds | None:
    """A select's bounds: the union of its branches', each branch narrowed by the condition when it
    is ``t >= 0`` (the negative-index guard: ``a`` sees ``t >= 0``, ``b`` sees ``t < 0``)."""
    known_a, known_b = known, known
    cond = op.cond.op
    if cond is not None and cond.op_type == "greater_equal" and cond.x.val is None and _const_int(cond.y) == 0:
        tested = integer_range(cond.x, depth - 1, known)
        if tested is not None:
            known_a = {**known, cond.x: (max(tested[0], 0), tested[1])}
            known_b = {**known, cond.x: (tested[0], min(tested[1], -1))}
    a, b = integer_range(op.a, depth - 1, known_a), integer_range(op.b, depth - 1, known_b)
    return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))


def _point(var: Var) -> tuple[int, int] | None:
    value = _const_int(var)
    return None if value is None else (value, value)


def table_refusal(table: np.ndarray) -> str | None:
    """Why a one-hot matmul of ``table`` would not be exact, or None."""
    if not np.all(np.isfinite(table)):
        return "its table holds inf or NaN (0 * inf is NaN in the matmul)"
    if np.any((table == 0) & np.signbit(table)):
        return "its table holds -0 (+0 + -0 is +0 in the matmul)"
    return None


class GatherOfSmallTable(RewritePattern[OneHot]):
    """``gather(table, cast(index))``, ``index`` an integer in a float dtype, ``table`` a constant of
    at most :data:`MAX_ROWS` rows → ``matmul(one_hot(index), table)``."""

    op_types = ("gather",)
    rule = "ane-gather"
    cause = "gathers from a small constant table by run-time indices: a one-hot matmul runs on the Neural Engine"

    def match(self, op: Operation) -> OneHot | Declined | None:
        cast = op.indices.op
        if cast is None or cast.op_type != "cast" or cast.x.dtype not in _EXACT or cast.dtype.val not in _CAST_RANGES:
            return None  # constant indices are gather_to_slice's; integer ones stay gathers
        index, table = cast.x, op.x.val
        if index.val is not None:
            return None  # indices known before run time: gather_to_slice's, or folded (a one-hot of them would
            # hand canonicalize_uint8_select a select of constants on the pipeline's second run)
        if table is None or op.x.dtype not in _EXACT or op.x.rank != 2:
            return Declined(op, "its table is not a constant matrix of floats")
        batch_dims, validate = (getattr(op, name, None) for name in ("batch_dims", "validate_indices"))
        if op.axis.val not in (0, -2) or (batch_dims is not None and batch_dims.val != 0):
            return Declined(op, "it gathers along another axis than the rows, or with batch axes")
        if validate is not None and validate.val:
            return Declined(op, "it validates its indices: an index out of range is an error, not a row of zeros")
        rows = table.shape[0]
        if rows > MAX_ROWS or rows > _EXACT[index.dtype]:
            return Declined(op, f"the table has {rows} rows: the index's dtype holds row numbers only up to {MAX_ROWS}")
        if index.rank == 0:
            return Declined(op, "its index is a scalar")
        bounds = integer_range(index)
        if bounds is None:
            return Declined(op, "its index is not shown to be an integer its float dtype holds")
        rounded = [float(np.array(b, types.nptype_from_builtin(index.dtype))) for b in bounds]
        low, high = _CAST_RANGES[cast.dtype.val]
        if not low <= rounded[0] <= rounded[1] <= high:
            return Declined(op, f"its index may fall outside {cast.dtype.val}, which would wrap it to another row")
        refusal = table_refusal(table)
        return Declined(op, refusal) if refusal else OneHot(index, bounds[0] < 0)

    def detail(self, op: Operation, match: OneHot) -> str:
        return f"a table of {op.x.shape[0]} rows"

    def rewrite(self, op: Operation, match: OneHot, rewriter: Rewriter) -> Var:
        out, rows = op.outputs[0], op.x.shape[0]
        index_dtype = types.nptype_from_builtin(match.index.dtype)
        number = match.index
        if match.from_end:
            keep = rewriter.add("greater_equal", f"{out.name}_keep", x=number, y=index_dtype(0))
            wrapped = rewriter.add("add", f"{out.name}_wrapped", x=number, y=index_dtype(rows))
            number = rewriter.add("select", f"{out.name}_number", cond=keep, a=number, b=wrapped)
        index = rewriter.add("expand_dims", f"{out.name}_index", x=number, axes=[-1])
        hit = rewriter.add("equal", f"{out.name}_hit", x=index, y=np.arange(rows).astype(index_dtype))
        one_hot = rewriter.add("cast", f"{out.name}_one_hot", x=hit, dtype=types.builtin_to_string(op.x.dtype))
        return rewriter.add("matmul", out.name, x=one_hot, y=op.x)


@register(DECLARATION)
class GatherToOneHotMatmul(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [GatherOfSmallTable()]

"""``webnn::gather_index_guard_in_fp16``: the negative-index guard of a small table's gather in fp16.

Pipeline slot: after ``common::guard_negative_gather_indices`` and the ``add_int16_cast`` and
``cast_optimization`` after it (the guard and its casts are in place then); lint rule
``ane-int32-compute``.

Given (an embedding lookup after coremltools' ``guard_negative_gather_indices``; D rows)::

    %ids32 = cast(x=%ids16, dtype="int32")                   # %ids16: int16
    %keep = greater_equal(x=%ids32, y=0)
    %wrapped = add(x=%ids32, y=D)
    %index = select(cond=%keep, a=%ids32, b=%wrapped)
    %index16 = cast(x=%index, dtype="int16")
    %rows = gather(x=%table, indices=%index16, axis=0)

Result::

    %ids_fp16 = cast(x=%ids16, dtype="fp16")
    %keep = greater_equal(x=%ids_fp16, y=np.float16(0))
    %wrapped = add(x=%ids_fp16, y=D)
    %capped = minimum(x=%ids_fp16, y=D)
    %index_fp16 = select(cond=%keep, a=%capped, b=%wrapped)
    %index16 = cast(x=%index_fp16, dtype="int16")

iOS17's ``gather`` takes no negative index, so coremltools guards signed indices with int32
``greater_equal``/``add``/``select`` (its comment: "As of iOS18, greater_equal & select & add do not
support int16"), and Core ML runs int32 ops off the Neural Engine. fp16 holds every integer of
magnitude up to 2048 exactly, so for a table of at most :data:`MAX_ROWS` rows every index the
gather can take in range, ``[-2D, D)`` counting the guard's wrap, and its wrapped value are
computed exactly; an index out of that range stays out of range (``minimum`` caps the large
ones at D, so the cast back to int16 cannot overflow). The gather reads the same rows. Only the
guard's form, on int16 (or narrower) ids, every result cast to 16 bits for gathers along an
axis of D rows. Tables of real vocabularies (32,000 rows and more) are refused: fp16 cannot
hold their indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="gather_index_guard_in_fp16",
    summary="Rewrite the int32 negative-index guard of every gather of a small table in fp16.",
    slots=(
        Slot(
            125,
            "common::canonicalize_inplace_pattern",
            "after common::guard_negative_gather_indices and the add_int16_cast and cast_optimization after it: the "
            "guard's int32 select and its cast back to 16 bits are in place then",
        ),
    ),
    fixes=("ane-int32-compute",),
)

MAX_ROWS = 1023  # every index of [-2 * rows, rows] is an integer fp16 holds (|i| <= 2048)
_NARROW_IDS = (types.int16, types.int8, types.uint8, types.bool)
_GATHERS = ("gather", "gather_along_axis")


@dataclass(frozen=True)
class Guard:
    """The guarded ids (int16 or narrower), the table's rows and the casts to 16 bits that read the index."""

    ids: Var
    rows: int
    casts: tuple[Operation, ...]


def _const_int(var: Var) -> int | None:
    return int(var.val) if var.val is not None and getattr(var.val, "size", 1) == 1 else None


def _other(op: Operation, var: Var) -> Var | None:
    return op.y if op.x is var else op.x if op.y is var else None


def _gathered_rows(cast: Operation) -> set[int | None]:
    """The size of the gathered axis of every gather reading ``cast`` as its indices (None: another reader)."""
    sizes: set[int | None] = set()
    for reader in cast.outputs[0].child_ops:
        if reader.op_type not in _GATHERS or reader.indices is not cast.outputs[0] or reader.x.shape is None:
            sizes.add(None)
            continue
        axis = int(reader.axis.val) if reader.axis is not None and reader.axis.val is not None else 0
        dim = reader.x.shape[axis]
        sizes.add(None if is_symbolic(dim) else int(dim))
    return sizes


class GuardOfSmallTable(RewritePattern[Guard]):
    """``select(ids >= 0, ids, ids + D)`` of int16 ids read by gathers of D ≤ 1023 rows → the same in fp16."""

    op_types = ("select",)
    rule = "ane-int32-compute"
    cause = "guards negative gather indices in int32: for a small table, the guard runs in fp16"

    def match(self, op: Operation) -> Guard | Declined | None:
        ids, cond, wrapped = op.a, op.cond.op, op.b.op
        if ids.dtype != types.int32 or cond is None or wrapped is None:
            return None
        if cond.op_type != "greater_equal" or cond.x is not ids or _const_int(cond.y) != 0:
            return None
        if wrapped.op_type != "add" or _other(wrapped, ids) is None:
            return None
        rows = _const_int(_other(wrapped, ids))
        if rows is None:
            return None
        source = ids.op
        if source is None or source.op_type != "cast" or source.x.dtype not in _NARROW_IDS:
            return Declined(op, "its ids are int32 (not a cast of int16 or narrower): fp16 may not hold them")
        if not 0 < rows <= MAX_ROWS:
            return Declined(op, f"the table has {rows} rows: fp16 holds its indices exactly only up to {MAX_ROWS} rows")
        casts = tuple(op.outputs[0].child_ops)
        if not casts or op.outputs[0].consuming_blocks:
            return Declined(op, "its index is an output: the int32 guard would stay for it")
        if any(c.op_type != "cast" or c.dtype.val not in ("int16", "uint16") for c in casts):
            return Declined(op, "its index is read as int32, not cast to 16 bits for a gather")
        if any(_gathered_rows(c) != {rows} for c in casts):
            return Declined(op, f"its index is read by more than gathers of {rows} rows")
        return Guard(source.x, rows, casts)

    def detail(self, op: Operation, match: Guard) -> str:
        return f"a table of {match.rows} rows, whose indices fp16 holds exactly"

    def rewrite(self, op: Operation, match: Guard, rewriter: Rewriter) -> dict[Var, Var]:
        """The guard in fp16, and for each cast that reads it (the gathers' indices) a cast of that."""
        name = op.outputs[0].name
        ids = rewriter.add("cast", f"{name}_ids_fp16", x=match.ids, dtype="fp16")
        keep = rewriter.add("greater_equal", f"{name}_keep", x=ids, y=np.float16(0))
        wrapped = rewriter.add("add", f"{name}_wrapped", x=ids, y=np.float16(match.rows))
        capped = rewriter.add("minimum", f"{name}_capped", x=ids, y=np.float16(match.rows))
        index = rewriter.add("select", f"{name}_fp16", cond=keep, a=capped, b=wrapped)
        return {
            cast.outputs[0]: rewriter.add("cast", cast.outputs[0].name, x=index, dtype=cast.dtype.val)
            for cast in match.casts
        }


@register(DECLARATION)
class GatherIndexGuardInFp16(PatternPass):
    """Rewrite the int32 negative-index guard of every gather of a small table in fp16."""

    def patterns(self) -> list[RewritePattern]:
        return [GuardOfSmallTable()]

"""The op table of the random-program generator.

Each :class:`OpEntry` states which var its first input accepts (``accepts``), what the op
produces (``output``, in words) and how its other arguments are drawn (``add``, in
``op_args*.py``: picks vars that fit or draws consts, then emits the op through the
:class:`Grower`, which builds it with coremltools' builder). Sizes stay small
(``MAX_ELEMENTS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from coremltools.converters.mil.mil import Var

from . import ops_elementwise as elementwise
from . import ops_compute as compute
from . import ops_movement as movement
from .grower import BASIC, FLOAT, NUMERIC, SMALL_INT, Grower, dtype_of, shape_of
from .ops_base import movable
from .recipe import Ref

Accepts = Callable[[Grower, Var], bool]
Add = Callable[[Grower, str, Ref], "list[Ref] | None"]


@dataclass(frozen=True)
class OpEntry:
    op_type: str
    accepts: Accepts | None  # None: the op has no tensor input to pick (fill)
    output: str
    add: Add


def _of(dtypes: Callable[[Grower], tuple[str, ...]] | tuple[str, ...], min_rank: int = 0) -> Accepts:
    def accepts(g: Grower, var) -> bool:
        allowed = dtypes(g) if callable(dtypes) else dtypes
        return dtype_of(var) in allowed and len(shape_of(var)) >= min_rank

    return accepts


def not_folded(accepts: Accepts) -> Accepts:
    """``accepts``, for vars whose value coremltools does not know at build time (its reduce
    value inference breaks on some folded values: ``'float' object has no attribute 'astype'``)."""
    return lambda g, var: var.val is None and accepts(g, var)


def _castable(g: Grower) -> tuple[str, ...]:
    return BASIC + SMALL_INT if g.ios17 else BASIC


def _gatherable(g: Grower) -> tuple[str, ...]:
    return NUMERIC + SMALL_INT if g.ios17 else NUMERIC


NUMERIC_X, FLOAT_X, BOOL_X = _of(NUMERIC), _of(FLOAT), _of(("bool",))
MOVABLE_X, MOVABLE_TENSOR = _of(movable), _of(movable, min_rank=1)
BASIC_TENSOR, NUMERIC_TENSOR = _of(BASIC, min_rank=1), _of(NUMERIC, min_rank=1)
BROADCAST = "x's dtype, broadcast shape"
COMPARED = "bool, broadcast shape"

OP_TABLE: tuple[OpEntry, ...] = (
    *(OpEntry(t, NUMERIC_X, BROADCAST, elementwise.add_binary) for t in ("add", "sub", "mul", "maximum", "minimum")),
    OpEntry("real_div", FLOAT_X, BROADCAST, elementwise.add_binary),
    *(OpEntry(t, FLOAT_X, "x's type", elementwise.add_unary) for t in ("relu", "tanh", "sigmoid")),
    *(
        OpEntry(t, NUMERIC_X, COMPARED, elementwise.add_binary)
        for t in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
    ),
    *(OpEntry(t, BOOL_X, COMPARED, elementwise.add_binary) for t in ("logical_and", "logical_or", "logical_xor")),
    OpEntry("logical_not", BOOL_X, "x's type", elementwise.add_unary),
    OpEntry("select", BOOL_X, "a's dtype, broadcast of a and b (which cover cond)", elementwise.add_select),
    OpEntry("cast", _of(_castable), "x's shape, a drawn dtype", elementwise.add_cast),
    OpEntry("concat", MOVABLE_TENSOR, "x's dtype, sizes summed on the axis", movement.add_concat),
    OpEntry(
        "slice_by_index", MOVABLE_TENSOR, "x's dtype, window lengths, squeezed axes gone", movement.add_slice_by_index
    ),
    OpEntry("slice_by_size", MOVABLE_TENSOR, "x's dtype, the sizes", movement.add_slice_by_size),
    OpEntry("split", BASIC_TENSOR, "2 or more tensors of x's dtype", movement.add_split),
    OpEntry("stack", MOVABLE_X, "x's dtype, one new axis", movement.add_stack),
    OpEntry("transpose", MOVABLE_TENSOR, "x's dtype, permuted shape", movement.add_transpose),
    OpEntry("reshape", MOVABLE_TENSOR, "x's dtype, a drawn shape of the same size", movement.add_reshape),
    OpEntry("expand_dims", MOVABLE_X, "x's dtype, 1-2 new unit axes", movement.add_expand_dims),
    OpEntry("squeeze", MOVABLE_TENSOR, "x's dtype, unit axes gone", movement.add_squeeze),
    OpEntry("shape", BASIC_TENSOR, "int32 [rank of x]", elementwise.add_unary),
    OpEntry(
        "gather", _of(_gatherable, min_rank=1), "x's dtype, the axis replaced by indices' shape", movement.add_gather
    ),
    OpEntry("fill", None, "a drawn dtype, a const or computed shape", elementwise.add_fill),
    OpEntry("tile", BASIC_TENSOR, "x's dtype, dims times reps", movement.add_tile),
    OpEntry("conv", compute.conv_input, "x's dtype, [N, C_out, spatial...]", compute.add_conv),
    OpEntry("matmul", NUMERIC_TENSOR, "x's dtype, the matrix product", compute.add_matmul),
    OpEntry(
        "reduce_sum", not_folded(NUMERIC_TENSOR), "x's dtype, reduced axes dropped or kept", elementwise.add_reduce_sum
    ),
)

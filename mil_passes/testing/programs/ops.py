"""The op table of the random-program generator.

Each :class:`OpEntry` names the input its op takes from the program's vars (``input``), what the
op produces (``output``, in words) and how its other arguments are drawn (``add``, in
``ops_*.py``: picks vars that fit or draws consts, then emits the op through the
:class:`Grower`, which builds it with coremltools' builder). The dtypes that input accepts are
the op's own type domain in the drawn opset (:mod:`.type_domains`), narrowed only where an entry
says why. Sizes stay small (``MAX_ELEMENTS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from coremltools.converters.mil.mil import Var

from . import ops_elementwise as elementwise
from . import ops_compute as compute
from . import ops_movement as movement
from .grower import FLOAT, Grower, dtype_of, shape_of
from .recipe import Ref
from .type_domains import accepted_dtypes

Add = Callable[[Grower, str, Ref], "list[Ref] | None"]


@dataclass(frozen=True)
class OpEntry:
    op_type: str
    output: str
    add: Add
    input: str | None = "x"  # None: the op takes no var from the program (fill)
    min_rank: int = 0
    narrower: tuple[str, ...] | None = None  # a part of the domain the entry keeps to (said where)
    also: Callable[[Grower, Var], bool] | None = None  # what else the var must be

    def dtypes(self, g: Grower) -> tuple[str, ...]:
        """The dtypes ``input`` takes: the op's type domain in ``g``'s opset (narrowed)."""
        if self.input is None:
            return ()
        domain = accepted_dtypes(self.op_type, self.input, g.opset)
        return domain if self.narrower is None else tuple(d for d in domain if d in self.narrower)

    def accepts(self, g: Grower, var: Var) -> bool:
        """``var`` can be this op's ``input``."""
        return (
            dtype_of(var) in self.dtypes(g)
            and len(shape_of(var)) >= self.min_rank
            and (self.also is None or self.also(g, var))
        )


def not_folded(g: Grower, var: Var) -> bool:
    """A var whose value coremltools does not know at build time (its reduce value inference
    breaks on some folded values: ``'float' object has no attribute 'astype'``)."""
    return var.val is None


BROADCAST = "x's dtype, broadcast shape"
COMPARED = "bool, broadcast shape"
MOVED = "x's dtype"

OP_TABLE: tuple[OpEntry, ...] = (
    *(OpEntry(t, BROADCAST, elementwise.add_binary) for t in ("add", "sub", "mul", "maximum", "minimum")),
    # int32 real_div by a drawn zero has no defined result to compare
    OpEntry("real_div", BROADCAST, elementwise.add_binary, narrower=FLOAT),
    *(OpEntry(t, "x's type", elementwise.add_unary) for t in ("relu", "tanh", "sigmoid")),
    *(
        OpEntry(t, COMPARED, elementwise.add_binary)
        for t in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
    ),
    *(OpEntry(t, COMPARED, elementwise.add_binary) for t in ("logical_and", "logical_or", "logical_xor")),
    OpEntry("logical_not", "x's type", elementwise.add_unary),
    OpEntry("select", "a's dtype, broadcast of a and b (which cover cond)", elementwise.add_select, input="cond"),
    OpEntry("cast", "x's shape, a drawn dtype", elementwise.add_cast),
    OpEntry("concat", f"{MOVED}, sizes summed on the axis", movement.add_concat, input="values", min_rank=1),
    OpEntry("slice_by_index", f"{MOVED}, window lengths, squeezed axes gone", movement.add_slice_by_index, min_rank=1),
    OpEntry("slice_by_size", f"{MOVED}, the sizes", movement.add_slice_by_size, min_rank=1),
    OpEntry("split", "2 or more tensors of x's dtype", movement.add_split, min_rank=1),
    OpEntry("stack", f"{MOVED}, one new axis", movement.add_stack, input="values"),
    OpEntry("transpose", f"{MOVED}, permuted shape", movement.add_transpose, min_rank=1),
    OpEntry("reshape", f"{MOVED}, a drawn shape of the same size", movement.add_reshape, min_rank=1),
    OpEntry("expand_dims", f"{MOVED}, 1-2 new unit axes", movement.add_expand_dims),
    OpEntry("squeeze", f"{MOVED}, unit axes gone", movement.add_squeeze, min_rank=1),
    OpEntry("shape", "int32 [rank of x]", elementwise.add_unary, min_rank=1),
    OpEntry("gather", f"{MOVED}, the axis replaced by indices' shape", movement.add_gather, min_rank=1),
    OpEntry("fill", "a drawn dtype, a const or computed shape", elementwise.add_fill, input=None),
    OpEntry("tile", f"{MOVED}, dims times reps", movement.add_tile, min_rank=1),
    OpEntry("conv", "x's dtype, [N, C_out, spatial...]", compute.add_conv, also=compute.conv_input),
    OpEntry("matmul", "x's dtype, the matrix product", compute.add_matmul, min_rank=1),
    OpEntry(
        "reduce_sum", "x's dtype, reduced axes dropped or kept", elementwise.add_reduce_sum, min_rank=1, also=not_folded
    ),
)

"""``webnn::share_runtime_shapes``: a ``shape`` of a var whose run-time dims an earlier var has
reads that earlier var's shape, so every layer's shape arithmetic is one computation.

Given (a stateful decoder: each layer slices its cache to the write position ``%end``)::

    %k0 = slice_by_index(x=%cache0, begin=[0, 0, 0, 0], end=%end, end_mask=[T, T, F, T])  # [1, 2, is1, 64]
    %k1 = slice_by_index(x=%cache1, begin=[0, 0, 0, 0], end=%end, end_mask=[T, T, F, T])  # [1, 2, is2, 64]
    %s0 = shape(x=%k0)
    %s1 = shape(x=%k1)

Result::

    %s0 = shape(x=%k0)
    %s1 = shape(x=%k0)      # coremltools' remove_redundant_ops then makes it %s0, and merges what reads both

Why the dims are equal. Each var gets a key per axis: its size when static, else a key that stands
for one number at run time. A function input's symbol is its own key. An op's output dim takes the
key of the input axes whose symbol it carries when the op is one whose shape rule copies dims
(``COPIES_DIMS``: elementwise ops broadcast a symbol only against 1 or the same symbol, movement
ops move axes). A symbol stands for one number except where a clamping op or an op with blocks
carries it (``LOOSE_SYMBOLS``: a ``slice_by_size`` to x's length keeps x's symbol, and the run time
clamps it; a ``cond`` has its true branch's type): such a symbol is carried only where its input
axes agree on the key. Every other symbolic dim (a
fresh symbol, or one coremltools derived from a value, as a slice's end: the run time clamps the
slice, the symbol does not) is keyed by the op's shape signature: its type, the output and axis,
and per input its dims, plus its value unless the op's output shape reads only that input's shape
(``SHAPE_ONLY``). Values are numbered the same way (a ``shape``'s value is its input's dims).
An op's output shape is a function of its inputs' shapes and values, so two ops with one signature
have outputs of one shape (random ops, state reads and ops with blocks get signatures of their
own). So ``is1`` and ``is2`` above share one key, and two vars whose keys agree axis by axis have
equal shapes at run time. ``shape(x)`` becomes ``shape`` of the first var (function inputs first,
then the block in order) with x's keys: it is defined before x, so before the op. Only ops of a
function's top block are rewritten (a loop body's symbols change per iteration). ``shape`` values
are int32 sizes: bit-exact.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Block, Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic

from ..declaration import LintRule, PassDeclaration, Slot
from ..ir import iter_ops
from ..rewriter import PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="share_runtime_shapes",
    summary="Read each run-time shape from the first var with the same dims, so each layer's shape arithmetic merges.",
    slots=(
        Slot(
            101,
            "common::remove_redundant_ops",
            "right before remove_redundant_ops, which then merges the layers' identical shape arithmetic; after "
            "fold_shape_ops and gather_to_slice, which leave the shape ops that stay",
        ),
    ),
    rules=(
        LintRule(
            "repeated-runtime-shape",
            "info",
            "a `shape` of a var whose run-time dims an earlier var has: each layer computes the same sizes again",
            "each layer's copy of int32 shape arithmetic is its own CPU island between Neural Engine ops",
        ),
    ),
)

_BINARY = ("add", "sub", "mul", "real_div", "floor_div", "mod", "pow", "maximum", "minimum")
_COMPARE = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
_LOGICAL = ("logical_and", "logical_or", "logical_xor")
_UNARY = (
    "abs", "ceil", "clip", "cos", "erf", "exp", "floor", "gelu", "inverse", "log", "logical_not", "relu",
    "round", "rsqrt", "sigmoid", "sign", "silu", "sin", "softmax", "sqrt", "square", "tanh",
)  # fmt: skip
_MOVES = ("cast", "expand_dims", "identity", "reshape", "slice_by_index", "slice_by_size", "squeeze", "tile")
#: Inputs whose shape alone (not their value) goes into the op's output shape, by op type.
SHAPE_ONLY: dict[str, frozenset[str]] = {
    **{t: frozenset({"x", "y"}) for t in _BINARY + _COMPARE + _LOGICAL},
    **{t: frozenset({"x"}) for t in _UNARY + _MOVES + ("shape", "transpose", "reduce_mean", "reduce_sum")},
    "select": frozenset({"cond", "a", "b"}),
    "matmul": frozenset({"x", "y"}),
    "linear": frozenset({"x", "weight", "bias"}),
    "concat": frozenset({"values"}),
    "gather": frozenset({"x", "indices"}),
    "layer_norm": frozenset({"x", "gamma", "beta"}),
}
#: Ops whose output dims with an input's symbol are that input's dim (coremltools' shape rules copy
#: them, or broadcast them against 1); other ops' symbols are keyed by the op (a slice's end read
#: from a shape value gets a symbol of it, but the run time clamps the slice to its input).
COPIES_DIMS = frozenset(_BINARY + _COMPARE + _LOGICAL + _UNARY) | {
    "cast", "expand_dims", "gather", "identity", "layer_norm", "linear", "matmul", "reduce_mean",
    "reduce_sum", "select", "squeeze", "transpose",
}  # fmt: skip
#: Ops whose output may carry a symbol of its inputs' values on a dim of another run-time size
#: (``slice_by_size`` to a length longer than its input: the run time clamps it); so may every op
#: with blocks (a ``cond`` has its true branch's type, whichever branch runs), and such ops nested in
#: blocks. Their symbols are carried only where every input axis with one has one key.
LOOSE_SYMBOLS = frozenset({"slice_by_size"})
#: Ops whose outputs differ from one op to the next with the same inputs.
_OWN = ("read_state", "coreml_update_state")
_SMALL = 256  # consts up to this many elements are keyed by value, larger ones by identity


class DimKeys:
    """The keys of one function block's vars: ``dims[var]`` one key per axis, and ``first[dims]``
    the first var with those keys (function inputs, then the block's ops in order)."""

    def __init__(self, block: Block) -> None:
        self._ids: dict[tuple, int] = {}
        self.dims: dict[Var, tuple] = {}
        self.value: dict[Var, int] = {}
        self.first: dict[tuple, Var] = {}
        self.loose = {
            str(size)
            for op in iter_ops(block)
            if op.op_type in LOOSE_SYMBOLS or op.blocks
            for out in op.outputs
            if types.is_tensor(out.sym_type)
            for size in out.sym_type.get_shape()
            if is_symbolic(size)
        }
        for name, var in block.inputs.items() if isinstance(block.inputs, dict) else ():
            self._add(var, self._id(("input", name)), {}, None)
        for op in block.operations:
            value, shape = self._signatures(op)
            carried = {} if op.op_type not in COPIES_DIMS else self._carried(op)
            for index, out in enumerate(op.outputs):
                self._add(out, self._const(out) or self._id(("value", value, index)), carried, (shape, index))

    def _id(self, key: tuple) -> int:
        return self._ids.setdefault(key, len(self._ids))

    def _const(self, var: Var) -> int | None:
        if var.val is None or not (types.is_tensor(var.sym_type) or types.is_scalar(var.sym_type)):
            return None
        array = np.asarray(var.val)
        if array.dtype == object or array.size > _SMALL:
            return None
        return self._id(("const", array.dtype.str, array.shape, array.tobytes()))

    def _carried(self, op: Operation) -> dict[str, tuple | None]:
        """Each symbol on an input of ``op`` and the key of the first input axis that has it; for a
        symbol a clamping op carries (``LOOSE_SYMBOLS``), ``None`` where its axes have different
        keys: the output dim is then keyed by the op, as an output axis may copy either."""
        carried: dict[str, tuple | None] = {}
        for given in op.inputs.values():
            for var in given if isinstance(given, (list, tuple)) else (given,):
                if types.is_tensor(var.sym_type) and var in self.dims:
                    for size, key in zip(var.sym_type.get_shape(), self.dims[var]):
                        if is_symbolic(size):
                            name = str(size)
                            if name not in self.loose:
                                carried.setdefault(name, key)
                            elif carried.get(name, key) != key:
                                carried[name] = None
                            else:
                                carried[name] = key
        return carried

    def _add(self, var: Var, value: int, carried: dict[str, tuple | None], made_by: tuple | None) -> None:
        self.value[var] = value
        sym_type = var.sym_type
        if types.is_scalar(sym_type):
            self.dims[var] = ()
            return
        if not types.is_tensor(sym_type):
            self.dims[var] = (("own", value),)  # a state, a list: no shape to share
            return
        dims = []
        for axis, size in enumerate(sym_type.get_shape()):
            if not is_symbolic(size):
                dims.append(("size", int(size)))
            elif made_by is None:
                dims.append(("dim", self._id(("input", str(size)))))
            else:
                dims.append(carried.get(str(size)) or ("dim", self._id(("dim", *made_by, axis))))
        self.dims[var] = tuple(dims)
        if any(kind == "dim" for kind, _ in dims):
            self.first.setdefault(self.dims[var], var)

    def _signatures(self, op: Operation) -> tuple[int, int]:
        """Two numbers for ``op``: equal for two ops whose outputs have equal values, and equal
        for two ops whose outputs have equal shapes."""
        if op.blocks or op.op_type in _OWN or op.op_type.startswith("random"):
            own = self._id(("own", id(op)))
            return own, own
        shape_only = SHAPE_ONLY.get(op.op_type, frozenset())
        values, shapes = [], []
        for name, given in op.inputs.items():
            for var in given if isinstance(given, (list, tuple)) else (given,):
                if var not in self.dims:
                    own = self._id(("own", id(op)))  # from an outer block: not numbered here
                    return own, own
                values.append((name, self.dims[var], self.value[var]))
                shapes.append((name, self.dims[var], None if name in shape_only else self.value[var]))
        shape = self._id((op.op_type, "shape", tuple(shapes)))
        return (
            shape if op.op_type == "shape" else self._id((op.op_type, tuple(values)))
        ), shape  # a shape's value is x's dims


class ShapeOfFirstCarrier(RewritePattern[Var]):
    """``shape(x)`` → ``shape(first)``, ``first`` the first var whose dims are x's (keys above)."""

    op_types = ("shape",)
    rule = "repeated-runtime-shape"
    cause = "reads run-time dims an earlier var has: it reads that var's shape, one computation for every layer"

    def __init__(self) -> None:
        self._keys: dict[Block, DimKeys] = {}

    def match(self, op: Operation) -> Var | None:
        block = op.enclosing_block
        if block.outer_op is not None:
            return None  # a nested block: its symbols may change per iteration
        if block not in self._keys:
            self._keys[block] = DimKeys(block)
        keys = self._keys[block]
        dims = keys.dims.get(op.x)
        first = keys.first.get(dims) if dims is not None else None
        return None if first is None or first is op.x else first

    def rewrite(self, op: Operation, first: Var, rewriter: Rewriter) -> Var:
        return rewriter.shared(("shape", first), lambda: rewriter.add("shape", f"{first.name}_shape", x=first))

    def detail(self, op: Operation, first: Var) -> str:
        return f"of '{op.x.name}', the dims of '{first.name}'"


@register(DECLARATION)
class ShareRuntimeShapes(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def patterns(self) -> list[RewritePattern]:
        return [ShapeOfFirstCarrier()]

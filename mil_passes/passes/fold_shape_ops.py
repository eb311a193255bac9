"""``webnn::fold_shape_ops``: turn shape arithmetic into constants and const reshape targets.

Given::

    %dims = shape(x=%x)                                           # x: [B, S, 32], B, S run-time
    %lead = slice_by_index(x=%dims, begin=[0], end=[2])           # [B, S]
    %last = gather(x=%dims, indices=[2], axis=0)                  # [32]
    %per_head = floor_div(x=%last, y=4)                           # [8]
    %target = concat(values=(%lead, [4], %per_head), axis=0)      # [B, S, 4, 8]
    %heads = reshape(x=%x, shape=%target)

Result::

    %heads_expanded = expand_dims(x=%x, axes=[3])                 # [B, S, 32, 1]
    %heads = reshape(x=%heads_expanded, shape=[0, 0, 4, 8])       # [B, S, 4, 8]

1. A ``shape`` of a tensor whose dims are all static becomes an int32 const, in any pipeline.
2. A value computed from ``shape`` outputs (``gather``, ``slice_by_index``, ``slice_by_size``,
   ``split``, ``squeeze``, ``reshape``, ``cast``, ``add``, ``sub``, ``mul``, ``floor_div``,
   ``real_div``, ``reduce_prod``, ``concat``, ``fill``, ``tile``, …; see ``_shape_values``) whose
   elements depend on static dims only becomes a const.
3. A ``reshape`` whose target is computed from ``shape`` ops gets a const target of static sizes,
   at most one ``-1``, and, when one ``-1`` is not enough, ``0`` for each run-time dim it shares
   with x (same symbol; the most such dims in the same order). ``0`` copies the same index before
   iOS17 and is matched from the right from iOS17 on (docs/evidence.md §3); the two agree when target
   and x have the same length and the shared dims the same positions, so size-1 axes are added to
   get there (``expand_dims`` on x, ``squeeze`` after). A reshape with zeros never reads another
   reshape's output directly (one more size-1 axis): coremltools' ``merge_consecutive_reshapes``
   turns ``reshape(reshape(a, s), t)`` into ``reshape(a, t)``, reading t's zeros against ``a``.
   The shape chain that fed the target is left dead and removed.
4. Everything else stays; each surviving op's reason (for a ``shape`` op: which ops still read
   its run-time dims) is in debug logging. What no const can express: a target of run-time sizes
   that x holds only as their product (``reshape(matmul(reshape(a, [-1, K]), W), shape(a)[:-1] + [N])``,
   how transformers' GPT-2 ``Conv1D`` reads: coremltools gives the product new symbols), a slice
   end or ``range_1d``/``fill``/``tile`` size that is a run-time dim. ``reshape_like`` would name the
   dims by reference, but coremltools 9.0 refuses it with run-time dims ("Output shape of a
   reshape_like op ... must not be symbolic"), and moving the ``matmul`` past the reshape changes
   its accumulation order, so its last bits.

Types: coremltools 9.0 types ``reshape(x[B, S, 32, 1], [0, 0, 4, 8])`` as ``[0, 0, 4, 8]``, and
``ct.convert`` saves that (docs/evidence.md §3). Each reshape made here gets its true type (the
replaced reshape's, where that one is not wrong) from a type inference set on the op instance:
coremltools' own, with the zeros resolved against x by the op's opset rule. It runs when the op
is made and whenever a later pass infers types again (``reduce_transposes`` re-infers every op of
a block; a type written into the var once would be overwritten with the zeros). A pass that makes
a new reshape from one made here gets coremltools' type, zeros and all: ``common::add_fp16_cast``
re-creates every op of a FLOAT16 conversion, and what reads the zeros then types its output with
them, a ``shape`` of them even folds to zeros. So each run first gives every reshape with a const
0 target its true type and infers again the ops that read it, and the pipeline runs the pass again
right after ``add_fp16_cast``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, get_new_symbol, types
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic

from ..type_repair import INFERENCE_HOLES, repair_types, reshape_output_shape
from ..ir import is_used
from ..rewriter import PatternPass, Declined, RewritePattern, Rewriter
from ..semantics import reshape_zeros
from ..declaration import LintRule, PassDeclaration, Slot
from . import register
from ._shape_values import RULES, Dim, ShapeValue, Values, dim_of, numpy_dtype, trackable

DECLARATION = PassDeclaration(
    name="fold_shape_ops",
    summary="Fold `shape` ops and the arithmetic on their outputs into constants.",
    slots=(
        Slot(
            30,
            "common::remove_symbolic_reshape",
            "shape chains fold after const_elimination and before remove_symbolic_reshape, which gives up "
            "once two dims are symbolic",
        ),
        Slot(
            50,
            "common::remove_symbolic_reshape",
            "again after concat_slice_to_slice_concat: a window on a concat of shape vectors becomes slices "
            "of shape outputs, which fold (found by the fuzzer: without this run the pipeline is not idempotent)",
        ),
        Slot(
            110,
            "common::add_int16_cast",
            "again right after common::add_fp16_cast, before const_elimination: it re-creates every reshape, "
            "and coremltools types a 0 target literally (found converting GPT-2 at fp16); this run gives them "
            "their true types again before anything reads the 0s as sizes",
        ),
    ),
    rules=(
        LintRule(
            "runtime-shape",
            "info",
            "shape arithmetic a pass folds to constants, or a `shape` op that stays and why (in the user's "
            "names of flexible inputs)",
            "WebNN has no MIL lowering of `shape`; coremltools folds shape chains only in DEFAULT and with at most "
            "one run-time dim",
        ),
    ),
)


def _show(elements) -> str:
    return "[" + ", ".join("?" if e is None else str(e) for e in elements) + "]"


# -- reshape targets ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReshapePlan:
    """``squeeze(reshape(expand_dims(x, expand_axes), target), squeeze_axes)``; ``reshaped``: the
    true type of the reshape's output."""

    expand_axes: tuple[int, ...]
    target: tuple[int, ...]
    squeeze_axes: tuple[int, ...]
    reshaped: type


def plan_reshape(op: Operation, values: Values) -> ReshapePlan | Declined | None:
    """How ``op`` (a reshape with a computed target) reads with a const target, why it cannot
    (a :class:`Declined`), or None when it is no candidate (its target is const already, or not
    computed from shape ops)."""
    if op.shape.val is not None:
        return None
    if not types.is_tensor(op.x.sym_type) or any_variadic(op.x.shape):
        return Declined(op, "x has no fixed rank")
    value = values.of(op.shape)
    if value is None or value.elements.ndim != 1:
        return Declined(op, "target has no static length")
    if not value.from_shape:
        return None
    x_dims = [dim_of(d) for d in op.x.shape]
    try:  # a literal 0 copies a dim of x, by the op's own opset rule
        wanted = reshape_zeros(op.opset_version, x_dims, list(value.elements))
    except ValueError:
        return Declined(op, f"target {_show(value.elements)} holds a 0 but not x's rank")
    dims: list[int | Dim | None] = []  # None: a size only the run time knows
    for element in wanted:
        if isinstance(element, Dim) or element is None or element == -1:
            dims.append(None if element == -1 else element)
        elif element > 0:
            dims.append(int(element))
        else:
            return Declined(op, f"target {_show(value.elements)} holds {element}")
    zeros = sum(not isinstance(d, int) for d in dims) > 1  # else one -1 is enough
    x_slots: list[int | None]
    t_slots: list[int | None]
    if not zeros:
        x_slots, t_slots = list(range(len(x_dims))), list(range(len(dims)))
    else:
        x_slots, t_slots = _align(x_dims, dims)
        if None not in x_slots and op.x.op is not None and op.x.op.op_type == "reshape":
            x_slots, t_slots = x_slots + [None], t_slots + [None]  # see the module docstring
    plan = _plan(op, x_slots, t_slots, dims, zeros)
    if plan.target.count(-1) > 1:
        inferred = [wanted[s] for t, s in zip(plan.target, t_slots) if t == -1 and s is not None]
        return Declined(
            op,
            f"target {_show(wanted)} of x {_show(x_dims)}: {_show(inferred)[1:-1]} are run-time sizes a const "
            "target can neither copy from x in place (0) nor infer (-1 stands for one size only)",
        )
    return plan


def _align(x_dims: list, dims: list) -> tuple[list, list]:
    """x's axes and the target's positions side by side (None: a size-1 axis added), such that
    the run-time dims the two share, in order, sit at the same positions in both."""
    x_slots, t_slots, i0, j0 = [], [], 0, 0
    for i, j in _shared_dims(x_dims, dims) + [(len(x_dims), len(dims))]:
        gap_x, gap_t = list(range(i0, i)), list(range(j0, j))
        width = max(len(gap_x), len(gap_t))
        x_slots += gap_x + [None] * (width - len(gap_x)) + [i]
        t_slots += gap_t + [None] * (width - len(gap_t)) + [j]
        i0, j0 = i + 1, j + 1
    return x_slots[:-1], t_slots[:-1]  # without the end marker


def _shared_dims(x_dims: list, dims: list) -> list[tuple[int, int]]:
    """The most run-time dims that x and the target have in the same order, as (axis, position)."""
    n, m = len(x_dims), len(dims)

    def same(i: int, j: int) -> bool:
        return isinstance(dims[j], Dim) and dims[j] == x_dims[i]

    longest = [[0] * (m + 1) for _ in range(n + 1)]  # from (i, j) on
    for i in reversed(range(n)):
        for j in reversed(range(m)):
            longest[i][j] = max(longest[i + 1][j], longest[i][j + 1], longest[i + 1][j + 1] + same(i, j))
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if same(i, j) and longest[i][j] == longest[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif longest[i + 1][j] >= longest[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _plan(op: Operation, x_slots: list, t_slots: list, dims: list, zeros: bool) -> ReshapePlan:
    x_shape = list(op.x.shape)
    old_shape = list(op.outputs[0].shape)  # as long as the target: its length is static
    xs = [x_shape[s] if s is not None else 1 for s in x_slots]
    x_dims = [dim_of(d) for d in xs]
    target = []
    for p, s in enumerate(t_slots):
        dim = dims[s] if s is not None else 1
        copies = zeros and isinstance(dim, Dim) and dim == x_dims[p]
        target.append(dim if isinstance(dim, int) else 0 if copies else -1)
    target = _size_of_minus_one(target, x_dims)
    true_dims = [
        1 if s is None else _true_dim(t if t > 0 else xs[p] if t == 0 else None, old_shape[s])
        for p, (t, s) in enumerate(zip(target, t_slots))
    ]
    return ReshapePlan(
        tuple(p for p, s in enumerate(x_slots) if s is None),
        tuple(target),
        tuple(p for p, s in enumerate(t_slots) if s is None),
        types.tensor(op.outputs[0].dtype, tuple(true_dims)),
    )


def _size_of_minus_one(target: list[int], x_dims: list) -> list[int]:
    """``target`` with its -1 replaced by the size it stands for, when the run-time dims cancel
    (``[0, 0, 4, -1]`` of ``[B, S, 32, 1]`` is ``[0, 0, 4, 8]``)."""
    if -1 not in target:
        return target
    others = [x_dims[i] if t == 0 else t for i, t in enumerate(target) if t != -1]
    runtime = sorted(str(d) for d in x_dims if isinstance(d, Dim))
    if runtime != sorted(str(d) for d in others if isinstance(d, Dim)):
        return target
    volume = int(np.prod([d for d in x_dims if isinstance(d, int)], dtype=np.int64))
    rest = int(np.prod([d for d in others if isinstance(d, int)], dtype=np.int64))
    if rest == 0 or volume % rest:
        return target
    return [volume // rest if t == -1 else t for t in target]


def _true_dim(size, old):
    """The replaced reshape's dim ``old`` unless it contradicts ``size`` (what the target says:
    a static size, x's dim, or None for a -1): a symbol is always true, a literal 0 never."""
    if is_symbolic(old) or (int(old) > 0 and (size is None or size == int(old))):
        return old
    return size if size is not None else get_new_symbol()


def _agree(dims: tuple, wanted: tuple) -> bool:
    return len(dims) == len(wanted) and all(
        is_symbolic(d) or is_symbolic(w) or int(d) == int(w) for d, w in zip(dims, wanted)
    )


class _ReshapeTypeInference:
    """Type inference of one reshape made here: coremltools' own with each 0 of the target
    resolved against ``x`` by the op's opset rule, or ``reshaped`` when the two agree."""

    def __init__(self, op: Operation, reshaped: type):
        self.op, self.reshaped = op, reshaped

    def __call__(self):
        op = self.op
        inferred = type(op).type_inference(op)
        target = op.shape.val
        if target is None or not types.is_tensor(inferred):
            return inferred
        target = [int(t) for t in target]
        try:
            copied = reshape_zeros(op.opset_version, list(op.x.shape), target)
        except ValueError:
            return inferred
        dims = tuple(c if t == 0 else d for t, c, d in zip(target, copied, inferred.get_shape()))
        if _agree(dims, self.reshaped.get_shape()):
            return self.reshaped
        return types.tensor(inferred.get_primitive(), dims)


def declare_reshape_type(op: Operation, reshaped: type) -> None:
    """Give a reshape made here its true type, now and whenever its type is inferred again."""
    op.type_inference = _ReshapeTypeInference(op, reshaped)
    op.type_value_inference(overwrite_output=True)


# -- patterns ----------------------------------------------------------------------------------


class FoldReshapeTarget(RewritePattern[ReshapePlan]):
    """A reshape whose target is computed from shape ops → a reshape with a const target."""

    op_types = ("reshape",)
    rule = "runtime-shape"
    declined_because = "depends on sizes known only at run time"

    def __init__(self, values: Values | None = None) -> None:
        self.values = values if values is not None else Values()

    def match(self, op: Operation) -> ReshapePlan | Declined | None:
        return plan_reshape(op, self.values)

    def detail(self, op: Operation, plan: ReshapePlan) -> str:
        expand = f" of x with size-1 axes {list(plan.expand_axes)} added" if plan.expand_axes else ""
        return f"reads a target computed from shape ops: it gets the const target {list(plan.target)}{expand}"

    def rewrite(self, op: Operation, plan: ReshapePlan, rewriter: Rewriter) -> Var:
        source, name = op.x, op.name
        if plan.expand_axes:
            source = rewriter.add("expand_dims", f"{name}_expanded", x=source, axes=list(plan.expand_axes))
        result = rewriter.add("reshape", name, x=source, shape=np.array(plan.target, np.int32))
        declare_reshape_type(result.op, plan.reshaped)
        if plan.squeeze_axes:
            result = rewriter.add("squeeze", f"{name}_squeezed", x=result, axes=list(plan.squeeze_axes))
        return result


class FoldShapeValue(RewritePattern[list]):
    """A ``shape`` op or shape arithmetic whose value is known before run time → a const."""

    op_types = tuple(RULES)
    rule = "runtime-shape"
    declined_because = "depends on sizes known only at run time"

    def __init__(self, values: Values | None = None) -> None:
        self.values = values if values is not None else Values()

    def match(self, op: Operation):
        values = self.values
        used = [v for v in op.outputs if is_used(v)]
        folds = []
        for var in used:
            value = values.of(var)
            if value is not None and value.from_shape and value.is_known:
                dtype = numpy_dtype(var)
                assert dtype is not None, "a var with a shape value is numeric"
                folds.append((var, value.array(dtype)))
        if folds:
            return folds
        if op.op_type == "shape":
            reason = _why_shape_stays(op, values)
            return Declined(op, reason) if reason else None  # None: every use folds, it goes as dead code
        if not any(trackable(v) for v in used):
            return None  # not a shape value: no small static numeric output in use
        value = _value(values, next(v for v in used if trackable(v)))
        if value.is_known or not _reads_shape(op, values):
            return None  # not computed from shape ops
        return Declined(op, f"value {_show(value.elements.flat)} is not known before run time")

    def detail(self, op: Operation, folds: list) -> str:
        values = ", ".join(f"'{var.name}' = {array.tolist()}" for var, array in folds)
        return f"computes a shape value known before run time: it folds to {values}"

    def rewrite(self, op: Operation, folds: list, rewriter: Rewriter) -> tuple[Var | None, ...]:
        folded = {}
        for var, array in folds:
            val = array if types.is_tensor(var.sym_type) else array.reshape(())[()]
            folded[var] = rewriter.const(val, var.name)
        return tuple(folded.get(out) for out in op.outputs)


def _value(values: Values, var: Var) -> ShapeValue:
    """The value of a var that :func:`trackable` accepts (every such var has one)."""
    value = values.of(var)
    assert value is not None, f"trackable var '{var.name}' has no shape value"
    return value


def _reads_shape(op: Operation, values: Values) -> bool:
    """Whether any input of ``op`` carries a value computed from a ``shape`` op."""
    for var in op.get_flattened_inputs():
        value = values.of(var) if trackable(var) else None
        if value is not None and value.from_shape:
            return True
    return False


def _why_shape_stays(op: Operation, values: Values) -> str | None:
    """Which ops will still read the run-time dims of this ``shape`` op after the pass; None when
    every use folds."""
    if not types.is_tensor(op.x.sym_type) or any_variadic(op.x.shape):
        return "x has no fixed rank"
    runtime = [str(d) for d in op.x.shape if is_symbolic(d)]
    reads, seen, stack = [], set(), [op.outputs[0]]
    while stack:
        var = stack.pop()
        if var.consuming_blocks:
            reads.append(f"'{var.name}' is a block output")
        for child in var.child_ops:
            if child in seen:
                continue
            seen.add(child)
            if child.op_type == "reshape" and child.shape is var and child.x is not var:
                plan = plan_reshape(child, values)
                if isinstance(plan, Declined):
                    reads.append(f"reshape '{child.name}': {plan.reason}")
            elif child.op_type in RULES and all(trackable(v) for v in child.outputs):
                stack.extend(v for v in child.outputs if is_used(v) and not _value(values, v).is_known)
            else:
                read = _show(_value(values, var).elements.flat)
                reads.append(f"{child.op_type} '{child.name}' reads {read}")
    if not reads:
        return None
    return f"dims {', '.join(runtime)} of '{op.x.name}' are run-time; " + "; ".join(reads[:3])


# -- types of reshapes with a 0 target ---------------------------------------------------------


def _literal_zero_shape(op: Operation) -> tuple | None:
    """The true shape of a reshape whose declared one has a literal 0 for a copied dim (two names
    of a run-time dim do not contradict: keeping them keeps a second run a no-op)."""
    shape = reshape_output_shape(op)
    declared = op.outputs[0].shape
    if shape is None or all(
        is_symbolic(d) or (not is_symbolic(t) and int(t) == int(d)) for t, d in zip(shape, declared)
    ):
        return None
    return shape


_RESHAPE_HOLE = {"reshape": (_literal_zero_shape, INFERENCE_HOLES["reshape"][1])}


def _declare_shape(op: Operation, shape: tuple) -> None:
    declare_reshape_type(op, types.tensor(op.outputs[0].dtype, shape))


def retype_zero_targets(prog) -> int:
    """Give each reshape whose const 0 target coremltools typed literally its true type (for good:
    through :func:`declare_reshape_type`), and infer again what reads it; how many were retyped."""
    return len(repair_types(prog, _RESHAPE_HOLE, _declare_shape))


@register(DECLARATION)
class FoldShapeOps(PatternPass):
    """What ``DECLARATION`` declares, as a pass: its patterns."""

    def apply(self, prog) -> None:
        # Types first: a literal 0 read as a size would fold into wrong constants.
        retyped = retype_zero_targets(prog)
        super().apply(prog)
        assert self.last_result is not None  # PatternPass.apply sets it
        self.last_result.rewritten += retyped

    def patterns(self) -> list[RewritePattern]:
        # One memo for the whole run: each var's value is computed once (a fresh memo per match
        # walks every op's whole chain again, quadratic in the chain's length). A rewrite only
        # replaces a var by one of equal value, so what the memo holds stays true.
        values = Values()
        return [FoldShapeValue(values), FoldReshapeTarget(values)]

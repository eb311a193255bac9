"""``webnn::dynamic_state_update_to_mask``: a state written at run-time positions becomes a masked
blend of the whole state.

Given (a KV cache written at the run-time position ``%pos``, as coremltools converts
``k_cache[:, :, pos:pos + T, :] = k``)::

    %cache = read_state(input=%k_cache)                                  # (1, 2, 16, 8) fp16
    %begin = concat(values=([0, 0], %pos, [0]), axis=0)
    %end = concat(values=([1, 2], %pos_end, [8]), axis=0)
    %written = slice_update(x=%cache, update=%k, begin=%begin, end=%end)   # %k: (1, 2, T, 8)
    %new = coreml_update_state(state=%k_cache, value=%written)

Result (the mask and the one-hot placement built once per block for each run-time offset, and
shared by every layer that writes there)::

    %start = minimum(maximum(select(less(%p, 0), %p + 16, %p), 0), 16)  # numpy's reading,
    %stop = ... the same of %pos_end ...                  # %p = cast(%pos, "fp16"): exact to 2048
    %m = mul(clip(arange(16) - %start + 1, 0, 1), clip(%stop - arange(16), 0, 1))   # (1, 1, 16, 1)
    %keep = sub(x=1, y=%m)                                                       # (1, 1, 16, 1)
    %P = relu(1 - abs(arange(16)[:, None] - %start - arange(T)))                 # (16, T) one-hot
    %placed = matmul(x=%P, y=%k)                                                 # (1, 2, 16, 8)
    %written = add(x=mul(x=%cache, y=%keep), y=mul(x=%placed, y=%m))
    %new = coreml_update_state(state=%k_cache, value=%written)

Positions are counted in the state's dtype (fp16 holds every integer up to 2048), so the mask is
built by ops the Neural Engine runs; on an axis longer than 2048 they are counted in int32
(comparisons, ``logical_and``, a cast). One new row (``T`` = 1, a decode step) is placed by
broadcasting, without the matmul; the matmul's batch axes are merged to rank 3. A rank-5 state
is blended in rank 4 (a singleton axis merged into its neighbour, reshaped back). Axes written
at constant positions narrower than the state (the layer of a ``[layers, …]`` cache) multiply
the mask by a constant one; their rows are padded with zeros (or broadcast, a single row).

Exact for finite values: every kept element is multiplied by 1 and gets ``+ 0``, every written
one is ``0 + u`` and each output of the one-hot matmul has one nonzero term. Not exact for
non-finite ones: an inf or NaN in the cache where the window writes becomes NaN (``inf * 0``),
and an inf or NaN row of the update makes NaN of the whole column it is multiplied along
(``0 * inf`` in the matmul and in ``placed * 0``). A ``-0`` in the cache or the update may come
out ``+0`` (``-0 + +0``). A cache of finite fp16 values, as every write of finite keys and values
keeps it, is written bit for bit.

The Neural Engine rejects a state written at a run-time offset (apple/coreai-torch#6); the
blend of the whole state is elementwise and runs there (Apple's ``neural_engine_rules.md``: no
cache writes at run-time positions inside the model). Refused: a strided write, masks that are
not constants, a state of run-time shape, run-time bounds on more than one axis, an integer state.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var
from coremltools.converters.mil.mil.types.symbolic import any_symbolic, is_symbolic

from ..declaration import PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register
from ._position_masks import inside_and_keep, one_hot, window
from ._state_writes import Write, constant_mask, merged, padding, plan, singleton_merge

DECLARATION = PassDeclaration(
    name="dynamic_state_update_to_mask",
    summary="Rewrite every state written at run-time positions as a masked blend of the whole state.",
    slots=(
        Slot(
            103,
            "common::dedup_op_and_var_names",
            "after remove_redundant_ops, which makes the layers' copies of the run-time offset one var (so one "
            "mask serves every layer); before add_fp16_cast (the mask is built in the state's compute dtype) and "
            "add_int16_cast (which narrows its int32 positions where exact)",
        ),
    ),
    fixes=("ane-dynamic-state-update",),
)


class RuntimeStateWrite(RewritePattern[Write]):
    """``slice_update`` of a state at run-time positions → ``state * (1 - m) + placed(update) * m``."""

    op_types = ("slice_update",)
    rule = "ane-dynamic-state-update"
    cause = "writes a state at run-time positions, which the Neural Engine rejects: a masked blend of the whole state"

    def match(self, op: Operation) -> Write | Declined | None:
        return plan(op)

    def detail(self, op: Operation, match: Write) -> str:
        return f"on axis {match.axis}, with a position mask shared by every layer"

    def rewrite(self, op: Operation, match: Write, rewriter: Rewriter) -> Var:
        out, shape, dtype = op.outputs[0], tuple(int(d) for d in op.x.shape), op.x.dtype
        update = op.update
        if match.squeezed:
            update = rewriter.add("expand_dims", f"{out.name}_update", x=update, axes=list(match.squeezed))
        zeros = padding(match.windows, shape)
        if zeros is not None:
            update = rewriter.add("pad", f"{out.name}_padded", x=update, pad=zeros, mode="constant")
        merge = singleton_merge(shape, update.shape, match.axis)
        blend_shape = shape if merge is None else merged(shape, merge)
        axis = match.axis if merge is None or match.axis <= merge else match.axis - 1
        masks = window(rewriter, match.begin, match.end, axis, len(blend_shape), shape[match.axis], dtype)
        placed = update if match.rows == 1 else self._placed(op, update, masks, match, rewriter)
        constant = constant_mask(match.windows, shape, dtype)
        state = op.x
        if merge is not None:  # the blend in rank 4: a singleton axis merged into its neighbour
            constant = None if constant is None else constant.reshape(merged(constant.shape, merge))
            state = rewriter.add("reshape", f"{out.name}_rank4", x=state, shape=np.array(blend_shape, np.int32))
            target = np.array(merged(tuple(int(d) for d in placed.shape), merge), np.int32)
            placed = rewriter.add("reshape", f"{out.name}_placed_rank4", x=placed, shape=target)
        mask, keep = inside_and_keep(rewriter, masks, constant)
        kept = rewriter.add("mul", f"{out.name}_kept", x=state, y=keep)
        written = rewriter.add("mul", f"{out.name}_written", x=placed, y=mask)
        blend_name = out.name if merge is None else f"{out.name}_blend"
        result = rewriter.add("add", blend_name, x=kept, y=written)
        if merge is not None:
            result = rewriter.add("reshape", out.name, x=result, shape=np.array(shape, np.int32))
        return result

    def _placed(self, op: Operation, update, masks, match: Write, rewriter: Rewriter):
        """The update's rows at their run-time positions along the axis: a one-hot matmul, on the
        last two axes (the written axis moved next to last unless it is last), its batch axes
        merged into one where the tensor has more than 4 (the Neural Engine's matmul takes rank 4)."""
        placing = one_hot(rewriter, masks, match.rows)
        rank, axis, name = len(op.x.shape), match.axis, f"{op.outputs[0].name}_placed"
        perm = None
        if axis < rank - 2:
            perm = list(range(rank))
            perm[axis], perm[rank - 2] = rank - 2, axis
            update = rewriter.add("transpose", f"{name}_moved", x=update, perm=perm)
        last = axis == rank - 1
        lead, rows_at = tuple(update.shape[:-2]), rank - 1 if last else rank - 2
        other = update.shape[rank - 2 if last else rank - 1]
        merged = rank > 4 and not any_symbolic(lead) and not is_symbolic(other)
        if merged:
            target = [
                int(np.prod(lead)),
                *(-1 if i == rows_at else int(d) for i, d in enumerate(update.shape) if i >= rank - 2),
            ]
            update = rewriter.add("reshape", f"{name}_batched", x=update, shape=np.array(target, np.int32))
        if last:
            product = rewriter.add("matmul", f"{name}_rows", x=update, y=placing, transpose_y=True)
        else:
            product = rewriter.add("matmul", f"{name}_rows", x=placing, y=update)
        if merged:
            tail = (int(other), masks.size) if last else (masks.size, int(other))
            product = rewriter.add(
                "reshape", f"{name}_unbatched", x=product, shape=np.array([*map(int, lead), *tail], np.int32)
            )
        if perm is not None:
            product = rewriter.add("transpose", name, x=product, perm=perm)
        return product


@register(DECLARATION)
class DynamicStateUpdateToMask(PatternPass):
    """Rewrite every state written at run-time positions as a masked blend of the whole state."""

    def patterns(self) -> list[RewritePattern]:
        return [RuntimeStateWrite()]

"""webnn::fuse_layernorm_or_instancenorm — coremltools' pass, refusing the matches it gets wrong.

``common::fuse_layernorm_or_instancenorm`` matches five spellings of a layer / instance norm
(from ``reduce_mean`` or ``reduce_sum``), writes one ``layer_norm`` / ``instance_norm`` and deletes
the matched ops. It checks that none of them is a block output, not that no other op reads one:
when one does (a debug output of the shift ``beta - mean * scale``, a shared ``rsqrt``), it raises
``ValueError: Cannot delete op ... with active output`` (docs/coremltools-passes.md). And it does
not compare the variance's axes with the mean's: a mean over ``[-2, -1]`` and a variance over
``[-1]`` become one ``layer_norm`` over ``[-2, -1]`` (a miscompile). This subclass, which
``mil_passes.pipeline()`` runs in its place, refuses both kinds of match (the ops stay as written)
and fuses every other one exactly as coremltools does.

Given (pattern 1, the shift read by a ``relu`` too)::

    %mean = reduce_mean(x=%x, axes=[-1], keep_dims=True)
    ... %scale = mul(x=rsqrt(add(variance, 1e-5)), y=%gamma)
    %shift = sub(x=%beta, y=mul(x=%mean, y=%scale))
    %y = add(x=mul(x=%x, y=%scale), y=%shift)
    %other = relu(x=%shift)

Result: the same program (coremltools' pass raised here). Without the ``relu`` it becomes
``%y = layer_norm(x=%x, axes=[-1], gamma=%gamma, beta=%beta, epsilon=1e-5)``, as under DEFAULT.
"""

from __future__ import annotations

from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.passes.defs.optimize_normalization import (
    fuse_layernorm_or_instancenorm as CoremltoolsFuseLayernormOrInstancenorm,
)

from . import register


def _negative_axes(op: Operation) -> list[int]:
    rank = len(op.x.shape)
    return sorted(a - rank if a >= 0 else a for a in op.axes.val)


def reduces_elsewhere(reduce_op: Operation, ops: list[Operation]) -> Operation | None:
    """The first reduction of ``ops`` over other axes than ``reduce_op`` (the mean), or None: a
    variance over other axes is not the variance a layer / instance norm divides by."""
    axes = _negative_axes(reduce_op)
    for op in ops:
        if op.op_type in ("reduce_mean", "reduce_sum") and op.axes is not None and op.axes.val is not None:
            if _negative_axes(op) != axes:
                return op
    return None


def read_outside(ops: list[Operation], end_op: Operation) -> Operation | None:
    """The first op of ``ops`` (but ``end_op``, whose uses the fused op takes over) that an op
    outside ``ops`` or a block output reads; None if there is none."""
    inside = set(ops)
    for op in ops:
        if op is end_op:
            continue
        for out in op.outputs:
            if out.consuming_blocks or any(reader not in inside for reader in out.child_ops):
                return op
    return None


@register("fuse_layernorm_or_instancenorm")
class FuseLayernormOrInstancenorm(CoremltoolsFuseLayernormOrInstancenorm):
    """coremltools' ``fuse_layernorm_or_instancenorm``, refusing shared ops and mismatched reduction axes."""

    @staticmethod
    def _try_apply_transform(reduce_op, block, gamma_var, beta_var, epsilon_var, end_op, ops_to_remove):
        candidates = list(ops_to_remove)
        rank = len(reduce_op.x.shape)
        axes = [a - rank if a >= 0 else a for a in reduce_op.axes.val]
        if rank == 4 and axes == [-3]:  # coremltools then deletes the gamma / beta consts too
            candidates += [v.op for v in (gamma_var, beta_var) if v is not None and v.op is not None]
        if read_outside(candidates, end_op) is not None or reduces_elsewhere(reduce_op, candidates) is not None:
            return False
        return CoremltoolsFuseLayernormOrInstancenorm._try_apply_transform(
            reduce_op, block, gamma_var, beta_var, epsilon_var, end_op, ops_to_remove
        )

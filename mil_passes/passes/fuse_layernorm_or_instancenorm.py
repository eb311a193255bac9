"""webnn::fuse_layernorm_or_instancenorm — coremltools' pass, refusing the matches it gets wrong.

``common::fuse_layernorm_or_instancenorm`` matches five spellings of a layer / instance norm
(from ``reduce_mean`` or ``reduce_sum``), writes one ``layer_norm`` / ``instance_norm`` and deletes
the matched ops. It checks that none of them is a block output, not that no other op reads one:
when one does (a debug output of the shift ``beta - mean * scale``, a shared ``rsqrt``), it raises
``ValueError: Cannot delete op ... with active output`` (docs/coremltools-passes.md). And it does
not compare the variance's axes with the mean's: a mean over ``[-2, -1]`` and a variance over
``[-1]`` become one ``layer_norm`` over ``[-2, -1]`` (a miscompile). Nor does it check where
``gamma`` / ``beta`` broadcast: an ``instance_norm`` takes ``squeeze(gamma)`` per channel whatever
axis the written ``gamma`` lay along, and a ``[1, 2]`` gamma that widened a ``[1, 1, 1, 1]`` input
to ``[1, 1, 1, 2]`` becomes an ``instance_norm`` typed ``[1, 1, 1, 1]`` (the output's shape
changes). And on fp16 data the written ops round after each step and cancel
(``x * scale + (beta - mean * scale)``) where the fused op rounds once: on inputs whose mean is
large against their spread the two differ by far more than fp16's precision (6.6% of the output's
scale at mean 100, spread 0.5; the fused op is the one closer to the exact value), which the pass
cannot rule out. This subclass, which ``mil_passes.pipeline()`` runs in its place, refuses these
four kinds of match (the ops stay as written) and fuses every other one exactly as coremltools
does. (``ct.convert`` fuses before ``add_fp16_cast``, in fp32, so conversions at fp16 still fuse.)

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

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types
from coremltools.converters.mil.mil.types.symbolic import is_symbolic
from coremltools.converters.mil.mil.passes.defs.optimize_normalization import (
    fuse_layernorm_or_instancenorm as CoremltoolsFuseLayernormOrInstancenorm,
)

from ..declaration import PassDeclaration, Replacement
from . import register

DECLARATION = PassDeclaration(
    name="fuse_layernorm_or_instancenorm",
    summary="coremltools' `fuse_layernorm_or_instancenorm`, refusing the matches it deletes or computes wrong.",
    replaces=Replacement(
        "common::fuse_layernorm_or_instancenorm",
        "safe to replace: ct.convert never names this pass, and neither coremltools' frontend nor backend "
        "pipeline runs it",
    ),
)


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


def _fused_route(reduce_op: Operation, gamma_var: Var | None, beta_var: Var | None) -> tuple[int, ...] | None:
    """The axes of x along which coremltools' fused op applies gamma / beta (its own choice of
    ``layer_norm`` or ``instance_norm``, ``_try_apply_transform``), or None when it fuses nothing."""
    rank = len(reduce_op.x.shape)
    axes = _negative_axes(reduce_op)
    ranks = [v.rank if v is not None else -1 for v in (gamma_var, beta_var)]
    is_layernorm = ranks == [len(axes)] * 2 and axes == list(range(-len(axes), 0))
    if rank == 4 and axes == [-3]:
        is_layernorm = ranks in ([-1, -1], [1, 1])
    if rank == 4 and axes in ([-2, -1], [-3, -2]) and gamma_var is not None and beta_var is not None:
        if all(v.val is not None and np.squeeze(v.val).ndim == 1 for v in (gamma_var, beta_var)):
            return (1,) if axes == [-2, -1] else (3,)  # instance_norm: per channel (NCHW / NHWC)
    if is_layernorm:
        return tuple(a + rank for a in axes)
    return None


def misplaced_parameter(reduce_op: Operation, gamma_var: Var | None, beta_var: Var | None) -> Var | None:
    """The first of gamma / beta that the fused op would apply along other axes than the written
    program broadcasts it along, or that widens x (written: right-aligned numpy broadcasting
    against x; fused: exactly ``x``'s sizes along the axes of :func:`_fused_route`); None if both
    are in place."""
    applied = _fused_route(reduce_op, gamma_var, beta_var)
    if applied is None:
        return None  # coremltools' pass refuses it itself
    x_shape = list(reduce_op.x.shape)
    for var in (gamma_var, beta_var):
        if var is None:
            continue
        if var.rank > len(x_shape):
            return var
        written = [1] * (len(x_shape) - var.rank) + list(var.shape)
        for axis, (size, x_size) in enumerate(zip(written, x_shape)):
            if axis in applied and (is_symbolic(x_size) or size != x_size):
                return var
            if axis not in applied and size != 1:
                return var
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


@register(DECLARATION)
class FuseLayernormOrInstancenorm(CoremltoolsFuseLayernormOrInstancenorm):
    """coremltools' ``fuse_layernorm_or_instancenorm``, refusing shared ops, mismatched reduction
    axes, misplaced gamma / beta and fp16 data."""

    @staticmethod
    def _try_apply_transform(reduce_op, block, gamma_var, beta_var, epsilon_var, end_op, ops_to_remove):
        candidates = list(ops_to_remove)
        rank = len(reduce_op.x.shape)
        axes = [a - rank if a >= 0 else a for a in reduce_op.axes.val]
        if rank == 4 and axes == [-3]:  # coremltools then deletes the gamma / beta consts too
            candidates += [v.op for v in (gamma_var, beta_var) if v is not None and v.op is not None]
        if read_outside(candidates, end_op) is not None or reduces_elsewhere(reduce_op, candidates) is not None:
            return False
        if misplaced_parameter(reduce_op, gamma_var, beta_var) is not None:
            return False
        if reduce_op.x.dtype == types.fp16:
            return False
        return CoremltoolsFuseLayernormOrInstancenorm._try_apply_transform(
            reduce_op, block, gamma_var, beta_var, epsilon_var, end_op, ops_to_remove
        )

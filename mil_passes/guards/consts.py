"""Guards that give an op a const in the form the protected pass reads right (the same values)."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation
from coremltools.converters.mil.mil.types.symbolic import any_variadic, is_symbolic, num_symbolic

from .guard import Guard, GuardRule, const_input, identity_before


def _alpha_of_relu(op: Operation):
    """(alpha's input name, the other input) of a ``mul`` of a const and a ``relu`` output."""
    for side, other in (("y", "x"), ("x", "y")):
        alpha, moving = getattr(op, side), getattr(op, other)
        if alpha.val is not None and moving.op is not None and moving.op.op_type == "relu":
            yield side, other


def one_element_alpha(op: Operation) -> tuple[str, np.ndarray] | None:
    """``common::fuse_prelu`` turns ``relu(x) + alpha * relu(-x)`` into ``prelu(x, alpha)``; it
    accepts a ``(1, C, 1, 1)`` alpha by checking ``alpha.size == alpha.shape[-3]``, which a
    one-element alpha on ``C > 1`` channels also passes, and then ``prelu`` raises ``ValueError: Size
    of dimension 0 of alpha (1) should be the same as the size of dimension 1 of x (2)``. The guard
    gives such an alpha the ``(1, C, 1, 1)`` shape broadcasting gives it."""
    for side, other in _alpha_of_relu(op):
        value, shape = np.asarray(getattr(op, side).val), getattr(op, other).shape
        if value.ndim not in (3, 4) or value.size != 1 or shape is None or len(shape) != 4:
            continue
        if not is_symbolic(shape[1]) and int(shape[1]) > 1:
            return side, np.broadcast_to(value.reshape(1, 1, 1, 1), (1, int(shape[1]), 1, 1)).copy()
    return None


def widening_alpha(op: Operation) -> str | None:
    """And an alpha that broadcasts the product wider than the relu's output (``(1, 1, 1, 2)`` on
    one channel): no ``prelu`` computes that, yet the pass fuses it and ``prelu`` raises. The guard
    has the ``mul`` read the relu through an ``identity``."""
    for _, other in _alpha_of_relu(op):
        if tuple(op.outputs[0].shape) != tuple(getattr(op, other).shape):
            return other
    return None


def shared_transpose_input(op: Operation) -> bool:
    """And the transposed form ``t = transpose(x, [0, 2, 3, 1])``, ``relu(t) + a * relu(-t)``, when
    x has other readers: coremltools' pattern matcher tries the transpose's other input as the
    pattern's root, matches with the ``perm`` const as x, and ``prelu`` raises (``Input x="..._perm"
    expects tensor ... fp32``). The guard has the transpose read x through an ``identity`` (the right
    root), and the pattern fuses."""
    perm = op.perm.val
    if perm is None or list(np.asarray(perm)) != [0, 2, 3, 1]:
        return False
    if sorted(reader.op_type for reader in op.outputs[0].child_ops) != ["mul", "relu"]:
        return False
    return bool(op.x.consuming_blocks) or len(op.x.child_ops) > 1


def low_rank_bias(op: Operation) -> tuple[str, np.ndarray] | None:
    """``common::fuse_conv_bias`` folds ``add(transpose(conv(x)), c)`` into the conv's bias; when the
    const ``c`` has a lower rank than the transpose it reads ``c.shape[cout_dim]`` counted from the
    end of the transpose's rank and raises ``IndexError: tuple index out of range``. The guard gives
    such a const (of an ``add``/``sub`` after a ``conv`` or ``conv_transpose``) the leading 1s that
    broadcasting gives it."""
    for side, other in (("y", "x"), ("x", "y")):
        const, moving = getattr(op, side), getattr(op, other)
        producer = moving.op
        if const.val is None or producer is None or producer.op_type != "transpose" or moving.rank is None:
            continue
        if producer.x.op is None or producer.x.op.op_type not in ("conv", "conv_transpose"):
            continue
        value = np.asarray(const.val)
        if value.ndim < moving.rank:
            return side, value.reshape((1,) * (moving.rank - value.ndim) + value.shape)
    return None


def reshape_of_returned_shape(op: Operation) -> tuple[str, np.ndarray] | None:
    """``common::remove_symbolic_reshape`` replaces a reshape's symbolic shape (``[s0, 2, 2]``) by
    constants (``[-1, 2, 2]``) and deletes the op that made the shape, checking that the reshape is
    its only reader but not that no block returns it: ``ValueError: cannot delete op … that's block
    block0's output``. The guard does the pass's rewrite for exactly these reshapes (the shape known
    up to symbols, at most one symbol in the output, no variadic rank) and keeps the shape."""
    shape = op.shape
    if shape.val is not None or shape.sym_val is None or len(shape.child_ops) > 1 or not shape.consuming_blocks:
        return None
    out_shape = op.outputs[0].shape
    if any_variadic(out_shape) or num_symbolic(out_shape) > 1:
        return None  # the pass raises its own error, or skips the reshape
    return "shape", np.array([-1 if is_symbolic(dim) else int(dim) for dim in out_shape], np.int32)


FUSE_PRELU = Guard(
    "common::fuse_prelu",
    (
        GuardRule(("mul",), one_element_alpha, const_input),
        GuardRule(("mul",), widening_alpha, identity_before("_kept")),
        GuardRule(("transpose",), shared_transpose_input, identity_before("_prelu_input", "x")),
    ),
)
FUSE_CONV_BIAS = Guard("common::fuse_conv_bias", (GuardRule(("add", "sub"), low_rank_bias, const_input),))
REMOVE_SYMBOLIC_RESHAPE = Guard(
    "common::remove_symbolic_reshape", (GuardRule(("reshape",), reshape_of_returned_shape, const_input),)
)

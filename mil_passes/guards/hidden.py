"""Guards that hide an op from the pass they protect behind an ``identity``, which DEFAULT's next
``noop_elimination`` removes (no run of the protected pass comes after it)."""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types

from .guard import Guard, GuardRule, identity_before


def rank0_read_in_nested_block(op: Operation) -> bool:
    """``common::rank0_expand_dims_swap`` rewrites a rank-0 ``add``/``sub``/``mul``/``real_div``/
    ``floor_div`` of a const that one ``expand_dims(axes=[0])`` reads, and rebuilds the result's
    other readers in the op's own block: a reader in a nested block (a ``cond`` branch) makes it
    raise ``KeyError``. The guard reads such a result through an ``identity``."""
    if op.x.rank != 0 or op.y.rank != 0 or (op.x.val is None) == (op.y.val is None):
        return False
    readers = op.outputs[0].child_ops
    if sum(reader.op_type == "expand_dims" for reader in readers) != 1:
        return False
    return any(reader.enclosing_block is not op.enclosing_block for reader in readers)


def fp16_scale_then_shift(op: Operation) -> bool:
    """``common::fuse_elementwise_to_batchnorm`` turns ``add(mul(x, c), d)`` (per-channel consts)
    into a ``batch_norm`` whose ``mean``/``variance`` are always fp32: on fp16 data it raises
    ``ValueError: ... gamma has dtype fp16 whereas mean has dtype fp32``. The guard reads an fp16
    ``mul`` of a const whose one reader is an ``add`` through an ``identity``; fp32 is left to the
    pass (``ct.convert`` computes in fp32 until ``add_fp16_cast``)."""
    out = op.outputs[0]
    if out.dtype != types.fp16 or out.consuming_blocks or (op.x.val is None) == (op.y.val is None):
        return False
    readers = out.child_ops
    return len(readers) == 1 and readers[0].op_type == "add"


def conv_divides_a_const(op: Operation) -> bool:
    """``common::fuse_conv_scale`` folds a ``mul``/``real_div`` of a conv by a const into the conv,
    taking whichever input is const as the divisor: ``real_div(2.0, conv(x))`` (``2 / y``) becomes
    ``conv(x) / 2``. The guard reads such a conv through an ``identity``; ``conv(x) / c`` is left."""
    out = op.outputs[0]
    readers = out.child_ops
    if out.consuming_blocks or len(readers) != 1 or readers[0].op_type != "real_div":
        return False
    return readers[0].y is out and readers[0].x.val is not None


def misfused_matmul_bias(op: Operation) -> str | None:
    """``common::fuse_matmul_weight_bias`` fuses a ``matmul`` by a const and its one ``add``/``sub``
    of a const into ``linear``, and gets three cases wrong: ``b - x @ W`` becomes ``x @ W - b``
    (every output changes sign); ``W @ x + b`` adds the bias along the wrong axis; a matmul that is
    also a block output is deleted anyway (``ValueError``). The guard reads such a matmul through an
    ``identity``; ``x @ W ± b`` and ``b + x @ W`` are left to the pass."""
    out = op.outputs[0]
    readers = out.child_ops
    if len(readers) != 1 or readers[0].op_type not in ("add", "sub"):
        return None
    bias = readers[0]
    if (op.x.val is None and op.y.val is None) or (bias.x.val is None and bias.y.val is None):
        return None  # a dynamic matmul or add: the pass leaves it
    if out.consuming_blocks:
        return "the matmul is also a block output"
    if op.x.val is not None:
        return "the const is the matmul's first operand"
    if bias.op_type == "sub" and bias.y is out:
        return "the matmul is subtracted from the const"
    return None


def split_of_stack_not_all_squeezed(op: Operation) -> bool:
    """``common::fuse_stack_split`` turns ``squeeze(split(stack(values)))`` back into the values; on a
    split output that is not read by exactly one ``squeeze`` it reads ``child_ops[0]`` anyway:
    ``IndexError`` for an output nothing reads, ``AttributeError`` for another reader. The guard has
    the split read the stack through an ``identity``."""
    if op.x.op is None or op.x.op.op_type != "stack":
        return False
    return not all(
        not out.consuming_blocks and len(out.child_ops) == 1 and out.child_ops[0].op_type == "squeeze"
        for out in op.outputs
    )


def pair_across_blocks(op: Operation) -> bool:
    """``common::merge_consecutive_relus`` and ``common::merge_consecutive_reshapes`` merge
    ``relu(relu(x))`` / ``reshape(reshape(x))`` and remove the first op from the *second* op's
    block: when the second sits in a nested block (a ``cond`` branch) they raise ``KeyError``. The
    guards have the second op read the first through an ``identity`` in its own block."""
    first = op.x.op
    return first is not None and first.op_type == op.op_type and first.enclosing_block is not op.enclosing_block


def requantize_to_another_dtype(op: Operation) -> bool:
    """``common::dequantize_quantize_pair_elimination`` replaces ``quantize(dequantize(q))`` by ``q``
    when scale, zero point and axis agree, without comparing ``output_dtype`` with ``q``'s dtype: an
    int8 ``q`` requantized to uint8 stays int8 (negatives are not clipped to 0). The guard has such a
    quantize read its dequantize through an ``identity``; same-dtype round trips are left."""
    dequantize = op.input.op
    if dequantize is None or dequantize.op_type != "dequantize":
        return False
    return types.builtin_to_string(dequantize.input.dtype) != op.output_dtype.val


def _per_tensor(var: Var | None) -> np.ndarray | None:
    """The single value of a const scale / zero point (None: absent), or raises ValueError."""
    if var is None:
        return None
    value = np.asarray(var.val)
    if value.size != 1:
        raise ValueError("per-axis")
    return value.reshape(())


def same_quantization(dequantize: Operation, quantize: Operation) -> bool:
    """``quantize(dequantize(q))`` gives ``q`` back, whatever reshape sits between them."""
    if dequantize.input.dtype != quantize.outputs[0].dtype:
        return False
    try:
        scales = [_per_tensor(op.scale) for op in (dequantize, quantize)]
        zero_points = [_per_tensor(getattr(op, "zero_point", None)) for op in (dequantize, quantize)]
    except ValueError:
        return False
    if any(scale is None for scale in scales) or scales[0] != scales[1]:
        return False
    zero = [0 if z is None else int(z) for z in zero_points]
    return zero[0] == zero[1]


def requantized_reshape(op: Operation) -> bool:
    """``common::int_op_canonicalization`` replaces ``quantize(reshape(dequantize(q)))`` by
    ``reshape(q)`` without checking that the ``quantize`` has the ``dequantize``'s scale, zero point
    and dtype: int8 values quantized at scale 0.5 and requantized at 0.25 should double, and come
    out unchanged. The guard reads such a reshape through an ``identity`` (the pass matches only a
    reshape whose one reader is a quantize); a round trip with equal per-tensor scale, zero point
    and dtype is left to the pass, whose rewrite is then exact."""
    dequantize, readers = op.x.op, op.outputs[0].child_ops
    if dequantize is None or dequantize.op_type != "dequantize" or len(readers) != 1:
        return False
    if readers[0].op_type != "quantize" or op.outputs[0].consuming_blocks:
        return False
    return not same_quantization(dequantize, readers[0])


INT_OP_CANONICALIZATION = Guard("common::int_op_canonicalization", (GuardRule(("reshape",), requantized_reshape),))
RANK0_EXPAND_DIMS_SWAP = Guard(
    "common::rank0_expand_dims_swap",
    (GuardRule(("add", "sub", "mul", "real_div", "floor_div"), rank0_read_in_nested_block),),
)
FUSE_ELEMENTWISE_TO_BATCHNORM = Guard(
    "common::fuse_elementwise_to_batchnorm", (GuardRule(("mul",), fp16_scale_then_shift),)
)
FUSE_CONV_SCALE = Guard("common::fuse_conv_scale", (GuardRule(("conv",), conv_divides_a_const),))
FUSE_MATMUL_WEIGHT_BIAS = Guard("common::fuse_matmul_weight_bias", (GuardRule(("matmul",), misfused_matmul_bias),))
FUSE_STACK_SPLIT = Guard(
    "common::fuse_stack_split", (GuardRule(("split",), split_of_stack_not_all_squeezed, identity_before("_kept", "x")),)
)
MERGE_CONSECUTIVE_RELUS = Guard(
    "common::merge_consecutive_relus", (GuardRule(("relu",), pair_across_blocks, identity_before("_inner", "x")),)
)
MERGE_CONSECUTIVE_RESHAPES = Guard(
    "common::merge_consecutive_reshapes", (GuardRule(("reshape",), pair_across_blocks, identity_before("_inner", "x")),)
)
DEQUANTIZE_QUANTIZE_PAIR_ELIMINATION = Guard(
    "common::dequantize_quantize_pair_elimination",
    (GuardRule(("quantize",), requantize_to_another_dtype, identity_before("_kept", "input")),),
)

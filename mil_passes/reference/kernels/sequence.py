"""Sequence kernels: ``reverse_sequence`` (coremltools' own ``value_inference`` raises "TODO")."""

from __future__ import annotations

import numpy as np

from ..errors import PredictionError
from . import kernel


def _axis(op, args: dict, name: str, rank: int) -> int:
    axis = 0 if args.get(name) is None else int(np.asarray(args[name]))
    if not -rank <= axis < rank:
        raise ValueError(f"{op.op_type} '{op.name}': input '{name}' is {axis}, out of range for rank {rank}")
    return axis % rank


@kernel("reverse_sequence")
def reverse_sequence(op, args: dict) -> np.ndarray:
    """For each ``i`` along ``batch_axis``, the first ``lengths[i]`` elements along ``seq_axis``
    reversed, the rest kept (``tf.reverse_sequence``)."""
    x = np.asarray(args["x"])
    seq_axis = _axis(op, args, "seq_axis", x.ndim)
    batch_axis = _axis(op, args, "batch_axis", x.ndim)
    if seq_axis == batch_axis:
        raise ValueError(f"{op.op_type} '{op.name}': inputs 'seq_axis' and 'batch_axis' are both {seq_axis}")
    lengths = np.asarray(args["lengths"]).astype(np.int64).reshape(-1)
    if lengths.size != x.shape[batch_axis]:
        raise ValueError(
            f"{op.op_type} '{op.name}': input 'lengths' has {lengths.size} values for "
            f"{x.shape[batch_axis]} slices along batch_axis {batch_axis}"
        )
    bad = (lengths < 0) | (lengths > x.shape[seq_axis])
    if bad.any():
        raise PredictionError(
            f"{op.op_type} '{op.name}': input 'lengths' has {int(lengths[bad][0])}, outside [0, {x.shape[seq_axis]}]"
        )
    # positions along seq_axis, per batch slice: length-1-j for j < length, else j
    j = np.arange(x.shape[seq_axis])
    source = np.where(j[None, :] < lengths[:, None], lengths[:, None] - 1 - j[None, :], j[None, :])
    shape = [1] * x.ndim
    shape[batch_axis], shape[seq_axis] = lengths.size, j.size
    if batch_axis > seq_axis:
        source = source.T
    index = np.broadcast_to(source.reshape(shape), x.shape)
    return np.take_along_axis(x, index, axis=seq_axis)

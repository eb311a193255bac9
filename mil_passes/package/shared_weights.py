"""Weights shared by the functions of a multifunction model stay shared when it is written.

``ct.utils.save_multifunction`` writes a weight two functions hold once: their ``const`` ops carry
one ``weight_id`` and coremltools' writer gives every const of a ``weight_id`` the same blob. The
milproto loader does not keep ``weight_id``, so a program read back would write each function's
copy again (a prefill/decode pair: twice the weights on disk). :func:`share_identical_weights`
gives the consts of byte-identical values (same dtype, shape and bytes) that go to the weight file
one ``weight_id`` before the program is written, so each is written once and every function's
const points at its offset.
"""

from __future__ import annotations

import hashlib

import numpy as np
from coremltools.converters.mil.backend.mil.load import should_use_weight_file
from coremltools.converters.mil.mil import Program

from ..ir import iter_ops

__all__ = ["share_identical_weights"]


def share_identical_weights(prog: Program, specification_version: int) -> int:
    """Give byte-identical file-backed consts of ``prog`` one ``weight_id`` (consts that already
    have one keep it, and the others of their value join it); returns how many consts now share a
    blob with another."""
    groups: dict[tuple, list] = {}
    for op in iter_ops(prog):
        if op.op_type != "const":
            continue
        value = op.outputs[0].val
        if not isinstance(value, np.ndarray) or not should_use_weight_file(value, specification_version):
            continue
        data = np.ascontiguousarray(value).tobytes()
        key = (value.dtype.str, value.shape, hashlib.sha256(data).digest())
        groups.setdefault(key, []).append(op)
    shared = 0
    for number, ops in enumerate(groups.values()):
        if len(ops) < 2:
            continue
        given = next((op.weight_id for op in ops if op.weight_id is not None), f"mil_passes_shared_{number}")
        for op in ops:
            if op.weight_id is None:
                op.weight_id = given
        shared += len(ops)
    return shared

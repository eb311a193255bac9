"""Guards of coremltools' own passes: each keeps one pass of DEFAULT from miscompiling or raising on
the programs it gets wrong, and leaves it every other program. docs/guards.md (generated from the
guards' docstrings by :mod:`mil_passes.derived_docs`) states each bug; ``mil_passes.pipeline()`` runs
each guard right before every run of the pass it protects (``mil_passes.schedule``).

Importing this package registers every guard as ``webnn::guard_<the protected pass's name>``.
"""

from __future__ import annotations

from . import consts, copies, hidden, partially_known_values, rewrites, scale_normalization
from .guard import Guard, register

#: Every guard, in the order ``pipeline()`` has always listed them (``schedule.GUARDS``).
GUARDS: tuple[Guard, ...] = tuple(
    register(guard)
    for guard in (
        partially_known_values.CONST_ELIMINATION,
        rewrites.CAST_OPTIMIZATION,
        hidden.INT_OP_CANONICALIZATION,
        hidden.RANK0_EXPAND_DIMS_SWAP,
        hidden.FUSE_ELEMENTWISE_TO_BATCHNORM,
        consts.FUSE_PRELU,
        copies.USE_REFLECTION_PADDING,
        hidden.FUSE_CONV_SCALE,
        consts.FUSE_CONV_BIAS,
        hidden.FUSE_STACK_SPLIT,
        consts.REMOVE_SYMBOLIC_RESHAPE,
        hidden.FUSE_MATMUL_WEIGHT_BIAS,
        copies.REPLACE_STACK_RESHAPE,
        copies.CONCAT_TO_PIXEL_SHUFFLE,
        rewrites.ADD_FP16_CAST,
        scale_normalization.DISTRIBUTIVE_QUANTIZED_BINARY_OP_SCALE_NORMALIZATION,
        copies.FUSE_GELU_EXACT,
        hidden.MERGE_CONSECUTIVE_RELUS,
        hidden.MERGE_CONSECUTIVE_RESHAPES,
        hidden.DEQUANTIZE_QUANTIZE_PAIR_ELIMINATION,
    )
)
BY_PROTECTED: dict[str, Guard] = {guard.protects: guard for guard in GUARDS}

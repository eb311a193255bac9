"""The passes as ``mil-passes list`` shows them, without importing coremltools.

Each entry is the registered name and the first line of the pass class's docstring, in pipeline
order (``mil_passes.PASS_NAMES``); ``tests/test_cli_startup.py`` checks both against the registry.
"""

from __future__ import annotations

PASSES: tuple[tuple[str, str], ...] = (
    (
        "webnn::rename_duplicate_temporaries",
        "Make every var name and op name unique, keeping function input and output names.",
    ),
    (
        "webnn::canonicalize_uint8_select",
        "Make every ``select.cond`` and logical-op input come straight from a bool producer.",
    ),
    ("webnn::fold_shape_ops", "Fold ``shape`` ops and the arithmetic on their outputs into constants."),
    (
        "webnn::concat_slice_to_slice_concat",
        "Rewrite every window of a concat's output as a concat of windows of its inputs.",
    ),
    (
        "webnn::band_part_difference_to_select",
        "Rewrite every float ``v - band_part(v)`` (torch's triu/tril) as a select of 0 and ``v``.",
    ),
    (
        "webnn::gather_to_slice",
        "Rewrite every gather by constant indices as slices (a concat of slices for several runs).",
    ),
    (
        "webnn::topk_to_argmax",
        "Rewrite every descending k=1 topk read for its index alone as a reduce_argmax.",
    ),
    ("webnn::tiled_gather_to_gather", "Rewrite every gather_along_axis by tiled indices as one gather."),
    (
        "webnn::matmul_rank5_to_rank4",
        "Rewrite every rank-5 batched matmul (and linear of a rank-5 input) as a rank-4 one between reshapes.",
    ),
    ("webnn::finite_mask_sentinels", "Rewrite every fp16 ±inf const of a softmax's mask as ±40000."),
    ("webnn::cast_before_data_movement", "Move every narrowing cast of int32 data movement above it."),
    (
        "webnn::gather_index_guard_in_fp16",
        "Rewrite the int32 negative-index guard of every gather of a small table in fp16.",
    ),
)

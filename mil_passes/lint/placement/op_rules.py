"""The op rules: every published reason a non-const op leaves the Neural Engine, one value each.

Each rule names its public sources (docs/neural-engine.md has the quotes in full and the chips).
Order matters only for reading: every rule is checked on every op it names.
"""

from __future__ import annotations

from . import checks
from .rule import APPLE, COST, DIRECT, ELSEWHERE, MEASURED, REJECTED, WRONG, PlacementRule, Source

ANE_GUIDE = "https://ane-guide.readthedocs.io (sbryngelson/ane-guide, appendix A)"
NE_RULES = "apple/coreai-models skills/skills/model-authoring/references/neural_engine_rules.md"
TYPED_EXECUTION = "https://apple.github.io/coremltools/docs-guides/source/typed-execution-example.html"
RF_DETR = "roboflow/rf-detr#1495"

NO_PATH_OPS = (
    "mod",
    "logical_and",
    "logical_or",
    "logical_xor",
    "reduce_prod",
    "reverse_sequence",
    "band_part",
    "non_zero",
    "one_hot",
    "shape",
    "sliding_windows",
    "tan",
    "asin",
    "acos",
    "atanh",
    "asinh",
    "acosh",
    "sinh",
    "cosh",
    "random_bernoulli",
    "random_categorical",
    "random_normal",
    "list_gather",
    "list_length",
    "list_read",
    "list_scatter",
    "list_write",
    "make_list",
)

OP_RULES: tuple[PlacementRule, ...] = (
    PlacementRule(
        "ane-rank-over-5",
        "any op whose output has rank > 5",
        REJECTED,
        (
            Source(
                "apple/coremltools#2536",
                APPLE,
                'an Apple maintainer: "CoreML Framework doesn\'t support tensors with rank > 5"',
            ),
            Source("apple/coremltools#1723", APPLE, '"Core ML does not support tensors with a rank greater than five"'),
        ),
        "merge singleton or adjacent axes with a reshape to rank ≤ 5, split them back later",
        checks.rank_over_5,
    ),
    PlacementRule(
        "ane-fp32-compute",
        "a non-const op with an fp32 output or fp32 run-time input (the casts at an fp16 model's edges excepted)",
        ELSEWHERE,
        (
            Source(TYPED_EXECUTION, APPLE, 'a float 32 typed model "will execute on a combination of the GPU and CPU"'),
            Source(NE_RULES, APPLE, '"Supported dtypes: fp16, int8, int16. fp32 falls back to GPU/CPU"'),
            Source("vx-lang/Vx#435", MEASURED, '"No fp32 matmul is preferred on the Neural Engine at any size tried"'),
        ),
        "convert with compute_precision=ct.precision.FLOAT16 (coremltools' default)",
        checks.fp32_compute,
    ),
    PlacementRule(
        "ane-int32-compute",
        "a non-const op on run-time int32 data, or a cast to int32 (indices and sizes are other rules')",
        ELSEWHERE,
        (
            Source(NE_RULES, APPLE, '"Supported dtypes: fp16, int8, int16"'),
            Source(ANE_GUIDE, DIRECT, '"The M1 rejects a cast to int32" (chapter 17)'),
        ),
        "fold the integer arithmetic to constants or narrow it to int16 (DEFAULT's add_int16_cast)",
        checks.int32_compute,
        severity_override="warning",  # Apple lists the dtypes it supports; int32 is not measured through Core ML
    ),
    PlacementRule(
        "ane-dim-too-large",
        "an op output with W, H or D (axes -1, -2, -4) over 16384 on M1–M3 (65536 from M4), or C, N over 65536",
        ELSEWHERE,
        (
            Source(
                "FluidInference/FluidAudio#121",
                MEASURED,
                'Core ML: "Tensor dimensions N1D1C1H1W240000 are not within supported range, '
                'N[1-65536]D[1-16384]C[1-65536]H[1-16384]W[1-16384]"',
            ),
            Source("apple/coremltools#1003", MEASURED, "an input dimension above 16384 cannot run predict()"),
            Source(
                ANE_GUIDE,
                DIRECT,
                '"The A16 quadruples the maximum tensor … dimensions from 16384 to 65536" (its A16 is M4)',
            ),
        ),
        "split the long axis in two (a reshape), or chunk it and concat the results",
        checks.dim_too_large,
        chips="M1–M3 over 16384 (W, H, D); every chip over 65536",
    ),
    PlacementRule(
        "ane-rank5-matmul",
        "a matmul with a rank-5 operand, a linear with a rank ≥ 5 input",
        ELSEWHERE,
        (
            Source(
                ANE_GUIDE,
                DIRECT,
                '"a rank-5 batched matrix multiply builds yet the on-device matrix-multiply backend rejects it"',
            ),
        ),
        "merge the batch axes: a rank-4 batched matmul between reshapes",
        checks.rank5_matmul,
        op_types=("matmul", "linear"),
        fix_pass="webnn::matmul_rank5_to_rank4",
        chips="M1 measured; others unknown",
    ),
    PlacementRule(
        "ane-gather",
        "a gather, gather_along_axis or gather_nd computed at run time",
        ELSEWHERE,
        (
            Source(
                RF_DETR,
                MEASURED,
                "MLComputePlan, M3 Pro: the ops that leave the ANE are topk and the "
                "expand_dims/tile/gather_along_axis that consume its indices",
            ),
            Source(
                "pytorch/executorch#19252", MEASURED, "its compute-plan tool lists ios17.gather among non-ANE op types"
            ),
        ),
        "slice by constant indices (webnn::gather_to_slice), or compute the table outside the model",
        checks.gather,
        op_types=("gather", "gather_along_axis", "gather_nd"),
        severity_override="warning",  # ane-guide measures gather native on the private path
        fix_pass="webnn::gather_to_slice",
        chips="M3 Pro measured",
    ),
    PlacementRule(
        "ane-topk-sort",
        "a topk or argsort",
        ELSEWHERE,
        (
            Source(RF_DETR, MEASURED, "MLComputePlan, M3 Pro, coremltools 9.0: topk leaves the ANE"),
            Source(
                "apple/coreai-torch#66",
                MEASURED,
                '"aten.topk costs a fixed 1.75 ms on an iPhone 17 Pro whenever the rest of the graph is on the ANE"',
            ),
        ),
        "take topk on the host after the model; a k=1 topk read for its indices is a reduce_argmax",
        checks.any_op,
        op_types=("topk", "argsort"),
        fix_pass="webnn::topk_to_argmax",
        chips="M3 Pro, A19 Pro measured",
    ),
    PlacementRule(
        "ane-scatter",
        "a scatter, scatter_along_axis or scatter_nd",
        ELSEWHERE,
        (Source(ANE_GUIDE, DIRECT, '"scatter | No path | … | Decompose on host"'),),
        "write with slice_update or select at constant positions, or on the host",
        checks.any_op,
        op_types=("scatter", "scatter_along_axis", "scatter_nd"),
    ),
    PlacementRule(
        "ane-no-path-op",
        "an op with no Neural Engine path on any chip: " + ", ".join(NO_PATH_OPS),
        ELSEWHERE,
        (
            Source(
                ANE_GUIDE, DIRECT, '"No path": rejected on every family from the M1 through the M5, computed off-engine'
            ),
        ),
        "logical_and → mul/minimum, logical_or → maximum, logical_xor → not_equal on bools; "
        "band_part → a constant mask; shape → webnn::fold_shape_ops",
        checks.any_op,
        op_types=NO_PATH_OPS,
    ),
    PlacementRule(
        "ane-recurrent",
        "an lstm, gru or rnn",
        ELSEWHERE,
        (
            Source(
                "apple/coremltools#1780",
                APPLE,
                'an Apple engineer: "RNN or LSTM are not supported on the neural engine"',
            ),
        ),
        "unroll the cell into matmul/conv and activations over a fixed number of steps",
        checks.any_op,
        op_types=("lstm", "gru", "rnn"),
    ),
    PlacementRule(
        "ane-control-flow",
        "a while_loop or cond (with the ops of its bodies)",
        ELSEWHERE,
        (
            Source("apple/coremltools#2208", MEASURED, "a user reports while_loop never accelerated on the ANE or GPU"),
            Source(ANE_GUIDE, DIRECT, '"No standalone code generation; unroll on host"'),
        ),
        "unroll a loop of constant trip count; a cond of two values is a select",
        checks.any_op,
        op_types=("while_loop", "cond"),
        severity_override="warning",
    ),
    PlacementRule(
        "ane-conv-kernel",
        "an fp16 conv kernel wider than 13 (M1) or 16 (M2 on), taller than 29 (M1) or 32, deeper than 16",
        ELSEWHERE,
        (
            Source(
                ANE_GUIDE,
                DIRECT,
                '"On the M1 the fp16 convolution kernel width is bounded at 13: a kernel of width 14 rejects"',
            ),
        ),
        "put the long kernel axis on the height, or split the kernel and add the partial convs",
        checks.conv_kernel,
        op_types=("conv", "conv_transpose"),
        chips="M1 (width > 13, height > 29); every chip (width > 16, height > 32, depth > 16)",
    ),
    PlacementRule(
        "ane-argminmax-axis",
        "a reduce_argmax or reduce_argmin over an axis longer than 2048",
        ELSEWHERE,
        (
            Source(
                ANE_GUIDE,
                DIRECT,
                '"The arg-min and arg-max operations reduce a channel of at most 2048 … 2049 rejects"',
            ),
        ),
        "reduce in chunks of ≤ 2048, then over the chunks' winners",
        checks.argminmax_axis,
        op_types=("reduce_argmax", "reduce_argmin"),
        chips="M1 measured",
    ),
    PlacementRule(
        "ane-texture-ops",
        "crop_resize, resample, affine, reflect/symmetric pad (M1); sin, cos, random_uniform (M1, M2)",
        ELSEWHERE,
        (
            Source(
                ANE_GUIDE,
                DIRECT,
                '"Texture engine, M2 onward"; sin/cos "Native from the M3; the M1 and M2 use a host polynomial"; '
                '"symmetric and reflect pad are texture-gated, software on the M1"',
            ),
        ),
        "precompute sin/cos tables outside the model (RoPE); constant padding is native everywhere",
        checks.texture,
        op_types=checks.TEXTURE_OPS,
        chips="M1 (texture ops, reflect pad); M1, M2 (sin, cos, random_uniform)",
    ),
    PlacementRule(
        "ane-dynamic-weight-conv",
        "a conv whose weight is computed at run time, at batch ≥ 2",
        ELSEWHERE,
        (
            Source(
                "https://ane-guide.readthedocs.io (chapter 19, pitfalls)",
                DIRECT,
                '"At a batch of two or more the same program crashes the compiler service"',
            ),
        ),
        "give the conv constant weights, or run it at batch 1",
        checks.dynamic_weight_conv,
        op_types=("conv",),
        chips="M1",
    ),
    PlacementRule(
        "ane-deconv-strides",
        "a 2-D conv_transpose with different strides along H and W",
        ELSEWHERE,
        (
            Source(
                "apple/coremltools#2450",
                MEASURED,
                'A17 Pro: "Deconv stride should be 4 on both width and height axis"; the model runs on CPU/GPU',
            ),
        ),
        "use equal strides",
        checks.unequal_deconv_strides,
        op_types=("conv_transpose",),
        chips="A17 Pro measured",
    ),
    PlacementRule(
        "ane-neg-inf-const",
        "a softmax (or attention mask) reading a const that holds ±inf or a magnitude over fp16's 65504",
        WRONG,
        (
            Source(
                NE_RULES, APPLE, '"Neural Engine hardware does not handle IEEE -inf correctly in softmax"; use -40000.0'
            ),
            Source(
                "cactus-compute/cactus#734",
                MEASURED,
                "a -1e9 mask overflows to -inf in the fp16 graph: rows softmax to NaN on the ANE",
            ),
        ),
        "fill masks with -40000 (finite at fp16) instead of -inf or finfo(float32).min",
        checks.infinite_mask,
        op_types=("softmax", "scaled_dot_product_attention"),
    ),
    PlacementRule(
        "ane-fp16-log-softmax",
        "a log of an fp16 softmax (torch's log_softmax as coremltools converts it)",
        WRONG,
        (
            Source(
                "apple/coremltools#2728",
                MEASURED,
                '"produces -inf values on Apple Neural Engine (ANE) in fp16 when the input has a dominant class"',
            ),
        ),
        "compute x - max(x) - log(sum(exp(x - max(x)))) (apple/coremltools#2727)",
        checks.log_of_softmax,
        op_types=("log",),
        severity_override="warning",  # value-dependent
    ),
    PlacementRule(
        "ane-too-small",
        "an fp16 matmul of matrices no larger than 384x384, an fp16 attention of under 2M query elements",
        COST,
        (
            Source("vx-lang/Vx#435", MEASURED, 'M4, MLComputePlan: "In f16, CoreML picks the CPU at 384 and below"'),
            Source("vx-lang/Vx#437", MEASURED, '"The boundary sits at about 2M elements" per Q/K/V tensor'),
        ),
        "batch small products together; Core ML's planner decides by cost",
        checks.too_small,
        op_types=("matmul", "scaled_dot_product_attention"),
        says="Core ML's planner picks the CPU for it (a cost decision)",
        chips="M4 measured",
    ),
    PlacementRule(
        "ane-dynamic-state-update",
        "a slice_update of an iOS 18 state whose begin or end is computed at run time "
        "(a KV cache written at the position)",
        ELSEWHERE,
        (
            Source(
                "apple/coreai-torch#6",
                MEASURED,
                "Core AI: a KV-cache write offset computed from an input's values segfaults inside "
                "ANECompiler at load; compile-time constants run",
            ),
        ),
        "write the cache at constant offsets, or keep the cache outside the model (inputs in, new entries out)",
        checks.dynamic_state_update,
        op_types=("slice_update",),
        fix_pass="webnn::dynamic_state_update_to_mask",
        severity_override="warning",  # measured through Core AI, not Core ML
        chips="M5 Max measured (Core AI)",
    ),
)

"""The op rules: every published reason a non-const op leaves the Neural Engine, one value each.

Each rule names its public sources (docs/neural-engine.md has the quotes in full and the chips).
Order matters only for reading: every rule is checked on every op it names.
"""

from __future__ import annotations

from . import checks
from .rule import APPLE, CORE_AI, COST, CPU_BY_COST, DIRECT, ELSEWHERE, MEASURED, REJECTED, WRONG, PlacementRule, Source

ANE_GUIDE = "https://ane-guide.readthedocs.io (sbryngelson/ane-guide, appendix A)"
NE_RULES = "apple/coreai-models skills/skills/model-authoring/references/neural_engine_rules.md"
COMMON_ISSUES = "apple/coreai-models skills/skills/model-authoring/references/common_issues.md"
TYPED_EXECUTION = "https://apple.github.io/coremltools/docs-guides/source/typed-execution-example.html"
RF_DETR = "roboflow/rf-detr#1495"
VX_SDPA = "vx-lang/Vx#437"

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
        "slice by constant indices (webnn::gather_to_slice), gather a constant table of at most 2048 rows as "
        "a one-hot matmul (webnn::gather_to_one_hot_matmul), or compute the table outside the model",
        checks.gather,
        op_types=("gather", "gather_along_axis", "gather_nd"),
        severity_override="warning",  # ane-guide measures gather native on the private path
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
                CORE_AI,
                '"aten.topk costs a fixed 1.75 ms on an iPhone 17 Pro whenever the rest of the graph is on the ANE"',
            ),
        ),
        "take topk on the host after the model; a k=1 topk read for its indices is a reduce_argmax",
        checks.any_op,
        op_types=("topk", "argsort"),
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
        "ane-small-attention",
        "an fp16 scaled_dot_product_attention of under 2M query elements",
        CPU_BY_COST,
        (
            Source(
                VX_SDPA,
                MEASURED,
                "M4, MLComputePlan: fp16 1x16x2048x64 and 1x32x1024x128 are preferred on the Neural Engine, "
                '1x16x1024x64 and smaller on the CPU: "The boundary sits at about 2M elements"',
            ),
        ),
        "attend over more positions or heads in one op; Core ML's planner decides by cost",
        checks.small_attention,
        op_types=("scaled_dot_product_attention",),
        chips="M4 measured",
    ),
    PlacementRule(
        "ane-gather-nd-rank3",
        "a gather_nd whose output has rank 3 (a 2-D table such as RoPE's cos/sin indexed by [B, S] positions)",
        ELSEWHERE,
        (
            Source(
                COMMON_ISSUES,
                APPLE,
                '"Indexing a 2D cos/sin table with position_ids: [B, S] produces 3D output Neural Engine rejects"; '
                "written for Core AI",
            ),
        ),
        "precompute the table rows outside the model and pass them as a 4-D (1, C, 1, S) input",
        checks.gather_nd_rank3,
        op_types=("gather_nd",),
        severity_override="warning",  # Apple's Core AI guidance, not measured through Core ML
    ),
    PlacementRule(
        "ane-conv-stride",
        "a conv or conv_transpose stride with a prime factor other than 2 and 3, unequal strides both over 2, "
        "or a stride over 2 on a palettized kernel",
        COST,
        (
            Source(
                NE_RULES,
                APPLE,
                '"Stride values that factor cleanly into 2s and 3s map efficiently to Neural Engine. Other values '
                'introduce overhead"; "With palettized kernels, stride support is very limited — use up to 2"',
            ),
        ),
        "use strides of 2s and 3s (4, 6, 8, 9, 12, 16 …), equal strides, or one stride of 2; up to 2 when palettized",
        checks.conv_stride,
        op_types=("conv", "conv_transpose"),
        says="the Neural Engine maps it with overhead",
    ),
    PlacementRule(
        "ane-pool-stride",
        "an avg_pool, max_pool or l2_pool stride other than 1, 2 or 4",
        COST,
        (
            Source(
                NE_RULES,
                APPLE,
                '"Use stride 2 or 4 for pooling layers. Other stride values (3, 5, etc.) introduce overhead"',
            ),
        ),
        "pool with stride 2 or 4",
        checks.pool_stride,
        op_types=("avg_pool", "max_pool", "l2_pool"),
        says="the Neural Engine pools it with overhead",
    ),
)

"""Plants for coremltools' DEFAULT pipeline: which plant gives each of its passes work.

``DEFAULT_PLANTS`` maps a plant name to its plant (``default_plants_*.py``); ``PASS_PLANTS``
maps each pass of DEFAULT that a plant reaches to its plants; ``UNREACHED`` names the passes no
plant reaches, with the reason. :func:`plants_for` is what the fuzzer plants for a coremltools
target: the package's own plants (``plants.py``), the target's plants, and ``default_mix``
(one to three plants drawn from all of these, so every pass also meets the others' patterns).
"""

from __future__ import annotations

from functools import partial

from hypothesis import strategies as st

from . import default_activation as activation
from . import default_linear as linear
from . import default_movement as movement
from . import default_quantization as quantization
from ...passes import rename_duplicate_temporaries
from ..programs.grower import Grower
from .passes import PLANTS, Plant
from ..programs.recipe import Ref

_OWN: dict[str, Plant] = {
    "gelu_exact": activation.plant_gelu_exact,
    "gelu_tanh": activation.plant_gelu_tanh,
    "leaky_relu": activation.plant_leaky_relu,
    "prelu": activation.plant_prelu,
    "prelu_op": activation.plant_prelu_op,
    "relu_chain": activation.plant_relu_chain,
    "reduce_mean": activation.plant_reduce_mean,
    "rank0_binary": activation.plant_rank0_binary,
    "divide": activation.plant_divide,
    "const_select": activation.plant_select,
    "matmul_bias": linear.plant_matmul_bias,
    "dynamic_linear": linear.plant_dynamic_linear,
    "conv_epilogue": linear.plant_conv_epilogue,
    "pad_conv": linear.plant_pad_conv,
    "conv1d_as_2d": linear.plant_conv1d_as_2d,
    "layer_norm": linear.plant_layer_norm,
    "affine_to_batchnorm": linear.plant_affine_to_batchnorm,
    "transpose_matmul": linear.plant_transpose_matmul,
    "onehot_matmul": linear.plant_onehot_matmul,
    "dilated_conv": linear.plant_dilated_conv,
    "transposes": movement.plant_transposes,
    "reshapes": movement.plant_reshapes,
    "squeeze_expand": movement.plant_squeeze_expand,
    "stack_split": movement.plant_stack_split,
    "concat_interleave": movement.plant_concat_interleave,
    "reflection_pad": movement.plant_reflection_pad,
    "high_rank": movement.plant_high_rank,
    "redundant": movement.plant_redundant,
    "large_consts": movement.plant_large_consts,
    "odd_names": movement.plant_odd_names,
    "symbolic_reshape": movement.plant_symbolic_reshape,
    "quantize_round_trip": quantization.plant_quantize_round_trip,
    "quantized_add": quantization.plant_quantized_add,
    "const_dequantize": quantization.plant_const_dequantize,
}

#: One branch of a plant above, for the pass that needs that branch: the pass's target draws its
#: pattern in most programs rather than one in several, so 40 programs reach it reliably (the mix
#: draws from ``_OWN`` only).
_FOCUSED: dict[str, Plant] = {
    "conv_bias": partial(linear.plant_conv_epilogue, kinds=("add", "sub", "transposed_add")),
    "conv_scale": partial(linear.plant_conv_epilogue, kinds=("mul", "real_div")),
    "conv_batchnorm": partial(linear.plant_conv_epilogue, kinds=("batch_norm",)),
    "pad_pad": partial(linear.plant_pad_conv, kinds=("pad",)),
    "pad_transpose_conv": partial(linear.plant_pad_conv, kinds=("conv",)),
    "stack_reshape": partial(movement.plant_stack_split, kinds=("reshape",)),
    "stack_split_squeeze": partial(movement.plant_stack_split, kinds=("split",)),
    "dequantize_quantize": partial(quantization.plant_quantize_round_trip, kinds=("qdq",)),
    "quantize_reshape": partial(quantization.plant_quantize_round_trip, kinds=("reshape",)),
}

#: The plants that give each pass of DEFAULT its pattern (passes the generator reaches without a
#: plant of their own are absent: cleanup passes such as ``const_elimination``).
PASS_PLANTS: dict[str, tuple[str, ...]] = {
    "common::fuse_gelu_exact": ("gelu_exact",),
    "common::fuse_gelu_tanh_approximation": ("gelu_tanh",),
    "common::fuse_leaky_relu": ("leaky_relu",),
    "common::fuse_prelu": ("prelu",),
    "common::prelu_to_lrelu": ("prelu_op",),
    "common::merge_consecutive_relus": ("relu_chain",),
    "common::fuse_reduce_mean": ("reduce_mean",),
    "common::rank0_expand_dims_swap": ("rank0_binary",),
    "common::divide_to_multiply": ("divide",),
    "common::select_optimization": ("const_select",),
    "common::fuse_matmul_weight_bias": ("matmul_bias",),
    "common::fuse_linear_bias": ("matmul_bias",),
    "common::expand_dynamic_linear": ("dynamic_linear",),
    "common::fuse_conv_bias": ("conv_bias",),
    "common::fuse_conv_scale": ("conv_scale",),
    "common::fuse_conv_batchnorm": ("conv_batchnorm",),
    "common::add_conv_transpose_output_shape": ("conv_epilogue",),
    "common::fuse_pad_conv": ("pad_transpose_conv",),
    "common::merge_consecutive_paddings": ("pad_pad",),
    "common::compose_conv1d": ("conv1d_as_2d",),
    "common::fuse_layernorm_or_instancenorm": ("layer_norm",),
    "common::fuse_elementwise_to_batchnorm": ("affine_to_batchnorm",),
    "common::fuse_transpose_matmul": ("transpose_matmul",),
    "common::fuse_onehot_matmul_to_gather": ("onehot_matmul",),
    "common::fuse_dilated_conv": ("dilated_conv",),
    "common::merge_consecutive_transposes": ("transposes",),
    "common::reduce_transposes": ("transposes",),
    "common::merge_consecutive_reshapes": ("reshapes",),
    "common::fuse_squeeze_expand_dims": ("squeeze_expand",),
    "common::fuse_stack_split": ("stack_split_squeeze",),
    "common::replace_stack_reshape": ("stack_reshape",),
    "common::detect_concat_interleave": ("concat_interleave",),
    "common::concat_to_pixel_shuffle": ("concat_interleave",),
    "common::use_reflection_padding": ("reflection_pad",),
    "common::expand_high_rank_reshape_and_transpose": ("high_rank",),
    "common::remove_redundant_ops": ("redundant",),
    "common::const_deduplication": ("large_consts",),
    "common::sanitize_input_output_names": ("odd_names",),
    "common::remove_symbolic_reshape": ("symbolic_reshape",),
    "common::nullify_redundant_quantization_zero_point": ("quantize_round_trip",),
    "common::dequantize_quantize_pair_elimination": ("dequantize_quantize",),
    "common::int_op_canonicalization": ("quantize_reshape",),
    "common::distributive_quantized_binary_op_scale_normalization": ("quantized_add",),
    "common::dequantize_to_constexpr": ("const_dequantize",),
    "common::merge_affine_dequantize_with_consecutive_ops": ("const_dequantize",),
}

#: DEFAULT's passes that the generator's own ops give work without a plant of their own.
REACHED_UNPLANTED: tuple[str, ...] = (
    "common::cast_optimization",
    "common::noop_elimination",
    "common::const_elimination",
    "common::dedup_op_and_var_names",
    "common::add_fp16_cast",
    "common::add_int16_cast",
    "common::guard_negative_gather_indices",
    "common::dead_code_elimination",
    "common::topological_reorder",
)

#: DEFAULT's passes that need states: the stateful programs of ``state_plants.py`` give them work
#: (``states:`` targets of the fuzzer; ``programs()`` draws no state).
REACHED_BY_STATES: tuple[str, ...] = (
    "common::canonicalize_inplace_pattern",
    "common::prefer_state_in_downstream",
)

#: DEFAULT's passes that no drawn program can give work, and why.
UNREACHED: dict[str, str] = {
    "common::update_output_dtypes": "needs output_types on the function: only ct.convert(outputs=[TensorType(...)])",
    "common::image_input_preprocess": "needs an ImageType input: only ct.convert(inputs=[ImageType(...)])",
    "common::canonicalize_quantized_lut_pattern": "needs compressed weights (constexpr_lut_to_dense with "
    "constexpr_blockwise_shift_scale, iOS18)",
    "common::lower_complex_dialect_ops": "needs complex-dialect ops (complex, fft): only the torch frontend writes "
    "them, and the interpreter has no kernels for them",
    "common::loop_invariant_elimination": "needs while_loop, which the generator's recipes do not build",
}


#: The package's plant that names two vars alike on purpose (MIL names are unique: coremltools'
#: passes other than ``dedup_op_and_var_names`` may assume so).
DUPLICATE_NAMES = rename_duplicate_temporaries.DECLARATION.name


def plant_default_mix(g: Grower) -> list[Ref]:
    """One to three plants drawn from all of DEFAULT's and the package's (names stay unique in a
    program drawn without a name pool)."""
    everything = {**_OWN, **{name: plant for name, plant in PLANTS.items() if g.name_pool or name != DUPLICATE_NAMES}}
    kept: list[Ref] = []
    for _ in range(g.draw(st.integers(1, 3))):
        kept += everything[g.choose(sorted(everything))](g)
    return kept


DEFAULT_PLANTS: dict[str, Plant] = {**_OWN, **_FOCUSED, "default_mix": plant_default_mix}


def plants_for(target: str, unique_names: bool = False) -> tuple[str, ...]:
    """The plants for a coremltools target (a pass name, or a pipeline); with ``unique_names``,
    not the package's duplicate-names plant."""
    package = [name for name in PLANTS if not (unique_names and name == DUPLICATE_NAMES)]
    return (*package, *PASS_PLANTS.get(target, ()), "default_mix")

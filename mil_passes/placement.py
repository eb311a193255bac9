"""Where each pass of the package goes in a coremltools PassPipeline, and why."""

from __future__ import annotations

from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from . import passes  # noqa: F401  (registers every pass)
from .passes.guard_add_int16_cast import narrowing_selector

# (pass, insert it right before the first of this pass in the base pipeline) — if the base lacks
# the anchor, the pass goes after the package's previous pass (or first, for the first one).
PLACEMENT: tuple[tuple[str, str | None], ...] = (
    # Names first: later passes and the serializer resolve vars by name.
    ("webnn::rename_duplicate_temporaries", None),
    # After const_elimination folded the select operands, before select_optimization reads them.
    ("webnn::canonicalize_uint8_select", "common::select_optimization"),
    # Shape chains are folded after const_elimination and before remove_symbolic_reshape, which
    # gives up once two dims are symbolic.
    ("webnn::fold_shape_ops", "common::remove_symbolic_reshape"),
    # Needs constant slice bounds: after const_elimination and fold_shape_ops.
    ("webnn::concat_slice_to_slice_concat", "common::remove_symbolic_reshape"),
    # Again: a window on a concat of shape vectors becomes slices of shape outputs, which fold
    # (found by the fuzzer: without this the pipeline is not idempotent).
    ("webnn::fold_shape_ops", "common::remove_symbolic_reshape"),
    # torch's triu/tril (v - band_part(v)) becomes a select long before common::add_fp16_cast turns
    # torch.finfo(float32).min into -inf (-inf - -inf is NaN). After const_elimination, which folds a
    # static mask whole, and after fold_shape_ops, which may give the mask's shape constants; before
    # the next canonicalize_uint8_select, which turns select(band, 0, ones) of a constant v into a cast.
    ("webnn::band_part_difference_to_select", "common::remove_symbolic_reshape"),
    # Neural Engine placement: ops Core ML runs on the CPU become ops it runs on the Neural Engine
    # (docs/neural-engine.md). A gather's indices and a topk's k are constants after
    # const_elimination; after fold_shape_ops, which folds the gathers of shape vectors whole.
    ("webnn::gather_to_slice", "common::remove_symbolic_reshape"),
    ("webnn::topk_to_argmax", "common::remove_symbolic_reshape"),
    # Needs static shapes: after fold_shape_ops; its reshapes are merged by merge_consecutive_reshapes.
    ("webnn::matmul_rank5_to_rank4", "common::remove_symbolic_reshape"),
    # Again: removing a window can bring a condition next to what canonicalizes it, as in
    # logical_not(slice(concat(logical_not(x), c))) (found by the fuzzer, as above).
    ("webnn::canonicalize_uint8_select", "common::remove_symbolic_reshape"),
    # Again right after common::add_fp16_cast, before const_elimination: it re-creates every reshape,
    # and coremltools types a 0 target literally (found converting GPT-2 at fp16); this run gives them
    # their true types again before anything reads the 0s as sizes.
    ("webnn::fold_shape_ops", "common::add_int16_cast"),
)


# Guards: (guard, the coremltools pass it makes safe) — the guard runs right before every run of
# that pass in the base (after the package's passes placed there), and once more at the end when
# coremltools' backend runs the pass again after the pipeline. A base without the pass gets no
# guard. Each answers a miscompile of DEFAULT (docs/coremltools-passes.md, "How
# mil_passes.pipeline() answers it"); DEFAULT itself is left as coremltools ships it.
# The guarded passes whose options their guard takes too (the guard reads them the same way).
_OPTIONS_SHARED = frozenset({"common::const_elimination"})
GUARDS: tuple[tuple[str, str], ...] = (
    # common::const_elimination folds a fully known slice of a partially known concat
    # (torch.cat([buffer, x])[:2]) into an int32 const, or raises ValueError / OverflowError; a
    # bool becomes int32. The guard folds those values first, with their declared dtype.
    ("webnn::guard_const_elimination", "common::const_elimination"),
    # common::cast_optimization fuses cast(cast(x_fp32, int32 | uint8), bool) into cast(x, bool):
    # 0.5 becomes True (x.to(torch.int32).to(torch.bool); WebNN's uint8 conditions). Our
    # canonicalize_uint8_select would make those casts comparisons, but it runs after the first
    # cast_optimization (it needs const_elimination first), so the guard runs before each one.
    ("webnn::guard_cast_optimization", "common::cast_optimization"),
    # common::int_op_canonicalization replaces quantize(reshape(dequantize(q))) by reshape(q) even
    # when the quantize has another scale, zero point or dtype (a requantization is dropped). The
    # guard puts an identity before such a quantize; DEFAULT's next noop_elimination removes it.
    ("webnn::guard_int_op_canonicalization", "common::int_op_canonicalization"),
    # common::rank0_expand_dims_swap raises KeyError when a reader of the rank-0 result sits in a
    # nested block. The guard puts an identity before its readers (removed by noop_elimination).
    ("webnn::guard_rank0_expand_dims_swap", "common::rank0_expand_dims_swap"),
    # common::fuse_elementwise_to_batchnorm raises on an fp16 x * c + d (its batch_norm takes fp32
    # mean and variance). The guard puts an identity between such a mul and its add.
    ("webnn::guard_fuse_elementwise_to_batchnorm", "common::fuse_elementwise_to_batchnorm"),
    # common::fuse_prelu accepts a one-element (1, 1, 1, 1) alpha on C > 1 channels, then prelu
    # raises. The guard gives alpha the (1, C, 1, 1) shape broadcasting gives it.
    ("webnn::guard_fuse_prelu", "common::fuse_prelu"),
    # common::use_reflection_padding deletes the slices of concat(x[1:2], x, x[-2:-1]) even when
    # another op reads one (ValueError). The guard gives the concat copies of shared slices.
    ("webnn::guard_use_reflection_padding", "common::use_reflection_padding"),
    # common::fuse_conv_scale folds real_div(const, conv(x)) as conv(x) / const. The guard reads
    # such a conv through an identity (removed by DEFAULT's last noop_elimination).
    ("webnn::guard_fuse_conv_scale", "common::fuse_conv_scale"),
    # common::fuse_conv_bias raises IndexError on add(transpose(conv(x)), c) when the const c has
    # a lower rank than the transpose. The guard gives c the leading 1s broadcasting gives it.
    ("webnn::guard_fuse_conv_bias", "common::fuse_conv_bias"),
    # common::fuse_stack_split raises IndexError when an output of split(stack(...)) is read by
    # nothing (or by another op than one squeeze). The guard reads such a stack via an identity.
    ("webnn::guard_fuse_stack_split", "common::fuse_stack_split"),
    # common::remove_symbolic_reshape raises when the shape it folds is also a block output.
    # The guard does the pass's rewrite for exactly those reshapes, keeping the shape.
    ("webnn::guard_remove_symbolic_reshape", "common::remove_symbolic_reshape"),
    # common::fuse_matmul_weight_bias fuses b - x @ W as x @ W - b (every output changes sign),
    # adds the bias of W @ x + b along the wrong axis, and raises when the matmul is also an
    # output. The guard reads such a matmul through an identity (removed by noop_elimination).
    ("webnn::guard_fuse_matmul_weight_bias", "common::fuse_matmul_weight_bias"),
    # common::replace_stack_reshape deletes the stack of reshape(stack(...)) even when a block
    # returns it (ValueError). The guard gives the reshape a copy of such a stack.
    ("webnn::guard_replace_stack_reshape", "common::replace_stack_reshape"),
    # common::concat_to_pixel_shuffle deletes the inner concats of its nested interleaved concats
    # even when another op reads one (ValueError). The guard gives the outer concat copies.
    ("webnn::guard_concat_to_pixel_shuffle", "common::concat_to_pixel_shuffle"),
    # common::add_fp16_cast re-creates every reshape of fp32 data, and coremltools types a const 0
    # target literally ([0, 0, 4, 8]) when x has run-time dims: until the fold_shape_ops placed
    # after it, the program declares wrong types. The guard gives such reshapes their target as
    # run-time sizes (gather of shape(x)), typed right; that fold_shape_ops folds them back.
    ("webnn::guard_add_fp16_cast", "common::add_fp16_cast"),
    # common::distributive_quantized_binary_op_scale_normalization rescales a quantized add/sub
    # by s_x / s_y and s_z / s_y, which moves an int8 output by 1 where one of the two programs
    # lands on a rounding tie. The guard checks every pair of 8-bit inputs and hides (identity,
    # removed by noop_elimination) each pattern whose rescaling changes an output.
    (
        "webnn::guard_distributive_quantized_binary_op_scale_normalization",
        "common::distributive_quantized_binary_op_scale_normalization",
    ),
    # Found by the pipeline target at 1,000 programs (seeds 0 and 1):
    # common::fuse_gelu_exact deletes a mul(0.5, x) that another op reads (ValueError). The guard
    # gives the gelu's final mul a copy of it.
    ("webnn::guard_fuse_gelu_exact", "common::fuse_gelu_exact"),
    # common::merge_consecutive_relus / _reshapes raise (KeyError) when the second op of the pair
    # sits in a nested block. The guards read its input through an identity in its own block.
    ("webnn::guard_merge_consecutive_relus", "common::merge_consecutive_relus"),
    ("webnn::guard_merge_consecutive_reshapes", "common::merge_consecutive_reshapes"),
    # common::dequantize_quantize_pair_elimination drops quantize(dequantize(q)) to another integer
    # dtype (int8 -> uint8): the output's dtype changes. The guard reads such a dequantize through
    # an identity (removed by noop_elimination).
    ("webnn::guard_dequantize_quantize_pair_elimination", "common::dequantize_quantize_pair_elimination"),
)
# Replacements: (coremltools' pass, the webnn:: subclass that pipeline() runs in its place).
REPLACEMENTS: tuple[tuple[str, str], ...] = (
    # common::fuse_layernorm_or_instancenorm deletes the matched ops without checking that no
    # other op reads one (ValueError when the shift beta - mean * scale has another reader). The
    # subclass refuses that match and fuses every other one as coremltools does. A replacement is
    # safe here: ct.convert never names this pass, and neither coremltools' frontend nor backend
    # pipeline runs it.
    ("common::fuse_layernorm_or_instancenorm", "webnn::fuse_layernorm_or_instancenorm"),
    # common::canonicalize_inplace_pattern rebuilds a coreml_update_state under the scopes of the op
    # that computes its value, and ScopeInfo refuses a graph-pass scope of two passes: it raises on
    # a value two passes rewrote (a window of a concat's const part, sliced by
    # webnn::concat_slice_to_slice_concat, then folded by const_elimination; found by fuzzing
    # stateful programs). The subclass passes on the last pass only. Safe to replace: only DEFAULT
    # names it, and ct.convert does not remove it by name.
    ("common::canonicalize_inplace_pattern", "webnn::canonicalize_inplace_pattern"),
)
GUARDED_BY: dict[str, str] = {guard: guarded for guard, guarded in GUARDS if guarded in _OPTIONS_SHARED}
# Passes coremltools' ML Program backend runs again after the pipeline (backend_mlprogram).
BACKEND_RUNS: frozenset[str] = frozenset({"common::const_elimination", "common::cast_optimization"})
# common::add_int16_cast narrows run-time int32 data (a gathered 2147483647 becomes -1, a KV-cache
# position pos + T above 32767 wraps). ct.convert removes it by name at fp32 compute precision,
# so the pipeline keeps coremltools' pass and gives it an op_selector that refuses those ops.
INT16_NARROWING = "common::add_int16_cast"

# Every run, in order (a pass may run twice); PASS_NAMES lists each pass once.
PIPELINE_ORDER: tuple[str, ...] = tuple(name for name, _ in PLACEMENT if name in PASS_REGISTRY)
PASS_NAMES: tuple[str, ...] = tuple(dict.fromkeys(PIPELINE_ORDER))
GUARD_NAMES: tuple[str, ...] = tuple(guard for guard, _ in GUARDS if guard in PASS_REGISTRY)
REPLACEMENT_NAMES: tuple[str, ...] = tuple(new for _, new in REPLACEMENTS if new in PASS_REGISTRY)


def pipeline(base: PassPipeline | None = None) -> PassPipeline:
    """``base`` (default ``PassPipeline.DEFAULT``) with the package's passes inserted, and the
    guards (``GUARDS``, ``INT16_NARROWING``) and replacements (``REPLACEMENTS``) that keep
    coremltools' passes of the base from miscompiling or raising (docs/coremltools-passes.md).

    The base is not modified. Use as ``ct.convert(model, pass_pipeline=mil_passes.pipeline())``.
    """
    base = PassPipeline.DEFAULT if base is None else base
    if not isinstance(base, PassPipeline):
        raise TypeError(f"base must be a coremltools PassPipeline, got {type(base).__name__}")
    names = list(base.passes)
    previous = -1
    for name, anchor in PLACEMENT:
        if name not in PASS_NAMES:
            continue
        index = names.index(anchor) if anchor in names else None
        if index is None or index <= previous:
            index = previous + 1
        names.insert(index, name)
        previous = index
    replaced = {old: new for old, new in REPLACEMENTS if new in PASS_REGISTRY}
    names = _guarded([replaced.get(name, name) for name in names])
    result = GuardedPassPipeline(pass_names=names, pipeline_name=f"{base}+mil_passes")
    result._pass_options = dict(getattr(base, "_pass_options", {}))
    for old, new in replaced.items():  # the base's options for a replaced pass go to its replacement
        if old in result._pass_options:
            result._pass_options[new] = result._pass_options.pop(old)
    if INT16_NARROWING in names:
        _select_exact_int16_narrowing(result)
    return result


class GuardedPassPipeline(PassPipeline):
    """The PassPipeline ``pipeline()`` returns: coremltools' own, with two differences.

    - ``remove_passes`` also drops the options of the passes it removes: ``ct.convert`` at fp32
      compute precision removes ``common::add_int16_cast``, coremltools keeps its options, and
      ``validate()`` then refuses options of a pass the pipeline lacks.
    - A guard without options of its own gets those of the pass it guards (``skip_const_by_size``
      set for ``common::const_elimination`` holds for its guard too), even when they are set
      after ``pipeline()`` returned.
    """

    def get_options(self, pass_name: str):
        own = super().get_options(pass_name)
        guarded = GUARDED_BY.get(pass_name)
        return own if own or guarded is None else super().get_options(guarded)

    def remove_passes(self, passes_names) -> None:
        super().remove_passes(passes_names)
        kept = set(self.passes)
        options = self.get_all_options()
        for name in [name for name in options if name not in kept]:
            del options[name]


def _guarded(names: list[str]) -> list[str]:
    """``names`` with each guard right before every run of the pass it guards (and at the end
    for the passes the backend runs again)."""
    guard_of = {guarded: guard for guard, guarded in GUARDS if guard in PASS_REGISTRY}
    result: list[str] = []
    for name in names:
        guard = guard_of.get(name)
        if guard is not None and (not result or result[-1] != guard):
            result.append(guard)
        result.append(name)
    for guarded, guard in guard_of.items():
        if guarded in BACKEND_RUNS and guarded in names and guard not in result[-len(BACKEND_RUNS) :]:
            result.append(guard)
    return result


def _select_exact_int16_narrowing(result: PassPipeline) -> None:
    """Give add_int16_cast the op_selector that refuses inexact narrowing, keeping the base's own
    ``op_selector`` / ``skip_ops_by_type`` for that pass (folded into the one selector)."""
    options = {option.option_name: option.option_val for option in result.get_options(INT16_NARROWING) or []}
    skipped = options.pop("skip_ops_by_type", "")
    if isinstance(skipped, str):
        skipped = [t.strip() for t in skipped.split(",") if t.strip()]
    options["op_selector"] = narrowing_selector(options.get("op_selector"), frozenset(skipped))
    result._pass_options = {k: v for k, v in result._pass_options.items() if k != INT16_NARROWING}
    result.set_options(INT16_NARROWING, options)

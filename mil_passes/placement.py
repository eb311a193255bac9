"""Where each pass of the package goes in a coremltools PassPipeline, and why."""

from __future__ import annotations

from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from . import guards, passes  # noqa: F401  (registers every pass and guard)
from .guards.int16_narrowing import narrowing_selector

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
    # Needs the tile's reps constant (after const_elimination); before add_int16_cast, which then
    # narrows the one gather's indices as it narrowed the gather_along_axis's.
    ("webnn::tiled_gather_to_gather", "common::remove_symbolic_reshape"),
    # Needs static shapes: after fold_shape_ops; its reshapes are merged by merge_consecutive_reshapes.
    ("webnn::matmul_rank5_to_rank4", "common::remove_symbolic_reshape"),
    # Again after gather_to_slice: a gather of several runs becomes a concat of slices, and a window
    # a later slice cuts from it is removed here, not by the next run of the pipeline (found by the
    # fuzzer, --seed 7: slice(concat(gather(x, [0, 0]), c))).
    ("webnn::concat_slice_to_slice_concat", "common::remove_symbolic_reshape"),
    # Again: removing a window can bring a condition next to what canonicalizes it, as in
    # logical_not(slice(concat(logical_not(x), c))) (found by the fuzzer, as above).
    ("webnn::canonicalize_uint8_select", "common::remove_symbolic_reshape"),
    # Again right after common::add_fp16_cast, before const_elimination: it re-creates every reshape,
    # and coremltools types a 0 target literally (found converting GPT-2 at fp16); this run gives them
    # their true types again before anything reads the 0s as sizes.
    ("webnn::fold_shape_ops", "common::add_int16_cast"),
    # After common::add_fp16_cast and the const_elimination that folds its casts: only then is an
    # fp32 mask sentinel (finfo(float32).min) an fp16 -inf, the NaN of 0 * -inf; at fp32 compute
    # precision there is nothing to rewrite.
    ("webnn::finite_mask_sentinels", "common::dead_code_elimination"),
    # After add_fp16_cast and the cast_optimization after it: only then does an int32 mask meet
    # one cast to fp16 (add_fp16_cast leaves int32 -> fp32 -> fp16 pairs); the backend's
    # const_elimination folds the casts of a concat's constant pieces.
    ("webnn::cast_before_data_movement", "common::canonicalize_inplace_pattern"),
    # After common::guard_negative_gather_indices and the add_int16_cast and cast_optimization
    # after it: the guard's int32 select and its cast back to 16 bits are in place then.
    ("webnn::gather_index_guard_in_fp16", "common::canonicalize_inplace_pattern"),
)


# Guards: (guard, the coremltools pass it protects), from mil_passes/guards/ in its order; each
# bug is stated once, in docs/guards.md. A guard runs right before every run of its pass in the
# base (after the package's passes placed there), and once more at the end when coremltools'
# backend runs the pass again after the pipeline. A base without the pass gets no guard. DEFAULT
# itself is left as coremltools ships it.
GUARDS: tuple[tuple[str, str], ...] = tuple((guard.name, guard.protects) for guard in guards.GUARDS)
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
# The guards that take the options of the pass they protect (they read them the same way).
GUARDED_BY: dict[str, str] = {guard.name: guard.protects for guard in guards.GUARDS if guard.shares_options}
# Passes coremltools' ML Program backend runs again after the pipeline (backend_mlprogram).
BACKEND_RUNS: frozenset[str] = frozenset({"common::const_elimination", "common::cast_optimization"})
# common::add_int16_cast narrows run-time int32 data (docs/guards.md): the pipeline keeps
# coremltools' pass (ct.convert removes it by name at fp32) with an op_selector that refuses those ops.
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

"""Where each pass of the package goes in a coremltools PassPipeline, and why."""

from __future__ import annotations

from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from . import passes  # noqa: F401  (registers every pass)

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
    # Again: removing a window can bring a condition next to what canonicalizes it, as in
    # logical_not(slice(concat(logical_not(x), c))) (found by the fuzzer, as above).
    ("webnn::canonicalize_uint8_select", "common::remove_symbolic_reshape"),
    # Again right after common::add_fp16_cast, before const_elimination: it re-creates every reshape,
    # and coremltools types a 0 target literally (found converting GPT-2 at fp16); this run gives them
    # their true types again before anything reads the 0s as sizes.
    ("webnn::fold_shape_ops", "common::add_int16_cast"),
)


# Every run, in order (a pass may run twice); PASS_NAMES lists each pass once.
PIPELINE_ORDER: tuple[str, ...] = tuple(name for name, _ in PLACEMENT if name in PASS_REGISTRY)
PASS_NAMES: tuple[str, ...] = tuple(dict.fromkeys(PIPELINE_ORDER))


def pipeline(base: PassPipeline | None = None) -> PassPipeline:
    """``base`` (default ``PassPipeline.DEFAULT``) with the package's passes inserted.

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
    result = PassPipeline(pass_names=names, pipeline_name=f"{base}+mil_passes")
    result._pass_options = dict(getattr(base, "_pass_options", {}))
    return result

"""``webnn::finite_mask_sentinels``: an fp16 mask sentinel that is ±inf becomes ±40000.

Pipeline slot: right after ``common::add_fp16_cast`` and the ``const_elimination`` that folds its
casts (the sentinel is ±inf only then); lint rule ``ane-neg-inf-const`` (and the error
``nan-zero-times-inf`` it cures).

Given (transformers' padding mask, ``(1 - mask) * torch.finfo(torch.float32).min``, at fp16)::

    %inverted = sub(x=1.0, y=%mask_fp16)
    %additive = mul(x=%inverted, y=-inf)                     # finfo(fp32).min overflowed to -inf
    %scores_masked = add(x=%scores, y=%additive)
    %probs = softmax(x=%scores_masked, axis=-1)

Result::

    %additive = mul(x=%inverted, y=-40000.0)

``add_fp16_cast`` turns ``finfo(float32).min`` into -inf, and ``0 * -inf`` is NaN on every device:
every kept position of the mask becomes NaN (ELECTRA, MobileBERT, T5's encoder; Qwen2 and Phi-3
multiply a ``fill(-inf)`` causal mask by 0 with a run-time sequence). Apple's
``neural_engine_rules.md`` fills masks with -40000 ("Neural Engine hardware does not handle IEEE
-inf correctly in softmax"). Only an fp16 const whose every reader leads, through mask arithmetic
and data movement (:data:`MASK_OPS`, and casts between fp16 and fp32), into a ``softmax`` is
rewritten; an fp32 const (the model computes in fp32, where the sentinel is finite) is not a
candidate.

After the softmax it is the same where a row keeps a position and each masked logit ``s`` is less
than 39,000 above the row's largest kept logit ``m``: ``exp(s - 40000 - m)`` is then below
``e^-1000`` and underflows to 0 even in float64, as ``exp(-inf)`` does; a mask factor of 0 gives
0 instead of NaN. A masked logit further above (a masked fp16 65504 against a kept 5) outweighs
the sentinel and changes the row: no finite sentinel is exact over all of fp16, so the pass takes
Apple's -40000 under this condition, and the fuzz counts such a row a miscompile
(tests/test_fuzz_repairs.py). A row masked whole, NaN with -inf, becomes the softmax of its
logits shifted by 40000 (uniform while they are within ±16 of each other, as torch's fp32
``finfo.min`` row is). Two sentinels added may overflow to -inf again, which a softmax still reads
as 0 (not NaN) while the row keeps a position.
"""

from __future__ import annotations

import numpy as np
from coremltools.converters.mil.mil import Operation, Var, types

from ..ir import is_used
from ..declaration import LintRule, PassDeclaration, Slot
from ..rewriter import Declined, PatternPass, RewritePattern, Rewriter
from . import register

DECLARATION = PassDeclaration(
    name="finite_mask_sentinels",
    summary="Rewrite every fp16 ±inf const of a softmax's mask as ±40000.",
    slots=(
        Slot(
            115,
            "common::dead_code_elimination",
            "after common::add_fp16_cast and the const_elimination that folds its casts: only then is an fp32 mask "
            "sentinel (finfo(float32).min) an fp16 -inf, the NaN of 0 * -inf; at fp32 there is nothing to rewrite",
        ),
    ),
    rules=(
        LintRule(
            "nan-zero-times-inf",
            "error",
            "a `mul` of an infinite constant (followed through fills, data movement and casts) by a value that "
            "can be 0: `0 * inf` is NaN",
            "IEEE arithmetic: NaN on the CPU, the GPU and the Neural Engine alike. transformers' "
            "`(1 - mask) * torch.finfo(float32).min` is `(1 - mask) * -inf` once coremltools casts it to fp16: "
            "ELECTRA, MobileBERT and T5's encoder output NaN (and Qwen2, Phi-3 with a run-time sequence, whose "
            "`fill(-inf)` causal mask is multiplied by 0); Apple's `neural_engine_rules.md` fills masks with -40000",
        ),
    ),
    fixes=("ane-neg-inf-const",),
    may_repair=True,
)

SENTINEL = 40000.0
# Ops a mask passes through on its way into a softmax: arithmetic, selection and data movement.
MASK_OPS = frozenset(
    {"add", "sub", "mul", "select", "fill", "reshape", "expand_dims", "squeeze", "transpose", "tile"}
    | {"slice_by_index", "slice_by_size", "concat", "stack", "band_part", "identity", "maximum", "minimum"}
)
# Readers of a tensor's shape only: its values do not matter to them.
SHAPE_READERS = frozenset({"shape", "fill_like"})


def on_mask_path(op: Operation) -> bool:
    """A mask op, or a cast between fp16 and fp32 (add_fp16_cast leaves pairs that cast_optimization removes)."""
    return op.op_type in MASK_OPS or (op.op_type == "cast" and op.outputs[0].dtype in (types.fp16, types.fp32))


def fp16_value(op: Operation) -> np.ndarray | None:
    """The fp16 value of a const, or of a cast to fp16 of a const (add_fp16_cast's, not folded yet)."""
    out = op.outputs[0]
    if out.dtype != types.fp16:
        return None
    if op.op_type == "const" or (op.op_type == "cast" and op.x.val is not None):
        with np.errstate(over="ignore"):
            return np.asarray(out.val if op.op_type == "const" else op.x.val).astype(np.float16)
    return None


def infinite_fp16_consts(var: Var) -> list[Operation]:
    """The fp16 consts (or casts of consts to fp16) holding ±inf that reach ``var`` through :data:`MASK_OPS`."""
    found: dict[Operation, None] = {}
    seen: set[int] = set()
    stack = [var]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        producer = current.op
        if producer is None:
            continue
        value = fp16_value(producer)
        if value is not None:
            if np.isinf(value).any():
                found[producer] = None
            continue
        if on_mask_path(producer):
            for value in producer.inputs.values():
                stack.extend(value if isinstance(value, (list, tuple)) else [value])
    return list(found)


def escape(const: Operation) -> str | None:
    """Where the value of ``const`` goes other than into a softmax through :data:`MASK_OPS`, or None."""
    seen: set[int] = set()
    stack = [const.outputs[0]]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.consuming_blocks:
            return f"it is an output ('{current.name}')"
        for reader in current.child_ops:
            if reader.op_type in SHAPE_READERS or reader.op_type == "softmax" or not any(map(is_used, reader.outputs)):
                continue  # the shape only, the softmax, or dead code (add_fp16_cast leaves casts unread)
            if not on_mask_path(reader):
                return f"it reaches {reader.op_type} '{reader.name}', not only a softmax"
            stack.extend(reader.outputs)
    return None


class InfiniteMaskSentinel(RewritePattern[tuple[Operation, ...]]):
    """A softmax whose mask holds fp16 ±inf consts → those consts with ±40000 in place of ±inf."""

    op_types = ("softmax",)
    rule = "ane-neg-inf-const"
    cause = f"reads a mask const that is ±inf at fp16: it becomes ±{SENTINEL:g}, the same after the softmax"

    def match(self, op: Operation) -> tuple[Operation, ...] | Declined | None:
        consts = infinite_fp16_consts(op.x)
        if not consts:
            return None
        for const in consts:
            reason = escape(const)
            if reason is not None:
                return Declined(op, f"its mask const '{const.name}' is ±inf at fp16, but {reason}")
        return tuple(consts)

    def detail(self, op: Operation, match: tuple[Operation, ...]) -> str:
        return ", ".join(f"'{const.name}'" for const in match)

    def rewrite(self, op: Operation, match: tuple[Operation, ...], rewriter: Rewriter) -> dict[Var, Var]:
        """Each mask const's value, finite (another softmax that reads the same const in this
        sweep gets the same const from ``rewriter.const``: one replacement)."""
        return {const.outputs[0]: rewriter.const(_finite(const), const.outputs[0].name) for const in match}


def _finite(const: Operation) -> np.ndarray:
    """The fp16 value of ``const`` (a const, or a cast of one) with ±:data:`SENTINEL` for ±inf."""
    value = fp16_value(const)
    assert value is not None  # matched only so
    return np.where(np.isinf(value), np.sign(value) * np.float16(SENTINEL), value).astype(np.float16)


@register(DECLARATION)
class FiniteMaskSentinels(PatternPass):
    """Rewrite every fp16 ±inf const of a softmax's mask as ±40000."""

    def patterns(self) -> list[RewritePattern]:
        return [InfiniteMaskSentinel()]

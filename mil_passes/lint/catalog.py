"""Every lint rule: its id, severity, what it finds, what fixes it, and the evidence it rests on.

The rules of the package's passes are written here; the Neural Engine placement rules are values
of :mod:`.placement` (with their chips, consequence and sources) and join this table as they are.

Severity policy (see :data:`~mil_passes.lint.findings.SEVERITIES`): **error** when Core ML will
refuse the model, or load it and silently run it on another compute unit or compute something
else; **warning** when it is likely wrong or slow and the user can act; **info** for a tidy-up a
pass does, or a note on why a pass left something. A valid program is never an error or warning
only because a pass could simplify it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """A lint rule as the docs show it."""

    id: str
    severity: str
    finds: str
    fix: str
    evidence: str


RULES: dict[str, Rule] = {
    rule.id: rule
    for rule in (
        Rule(
            "ane-refused-slice-of-concat",
            "error",
            "a `slice_by_index` on a concat's last axis, offset not a multiple of 8, width a multiple of 8 "
            "but not of 32, joined by `concat`/`stack`",
            "webnn::concat_slice_to_slice_concat",
            "reported on an M2 Pro (macOS 27.2, coremltools 9.0, iOS17): the Neural Engine compiler fails "
            '("Graph traversal failure", code 22) and Core ML runs all 1,674 ops on the CPU, ~15x slower '
            "(docs/evidence.md)",
        ),
        Rule(
            "slice-of-concat",
            "info",
            "any other window cut from a concat's output on its axis",
            "webnn::concat_slice_to_slice_concat",
            "same graph shape as above, not known to be refused; NVIDIA NeMo's `CausalConv1D.update_cache` writes it",
        ),
        Rule(
            "non-bool-condition",
            "info",
            "a `cast` to bool (WebNN's uint8 booleans, numeric truth values)",
            "webnn::canonicalize_uint8_select",
            "valid MIL; WebNN converters wrap every comparison and logical op in casts (rustnn's Core ML backend)",
        ),
        Rule(
            "bool-simplification",
            "info",
            "`select` of constant ones and zeros, `select` of a `logical_not`, `logical_not` of a `logical_not`",
            "webnn::canonicalize_uint8_select",
            "valid MIL that a cast or swapped operands compute with fewer ops",
        ),
        Rule(
            "runtime-shape",
            "info",
            "shape arithmetic a pass folds to constants, or a `shape` op that stays and why (in the user's "
            "names of flexible inputs)",
            "webnn::fold_shape_ops",
            "WebNN has no MIL lowering of `shape`; coremltools folds shape chains only in DEFAULT and with at most "
            "one run-time dim",
        ),
        Rule(
            "fp16-band-part-difference",
            "warning",
            "an fp16 `sub(x=v, y=band_part(v))`: torch's `triu`/`tril` as coremltools converts them",
            "webnn::band_part_difference_to_select",
            "an infinite `v` makes the band NaN (`-inf - -inf`): transformers' causal mask, "
            "`torch.finfo(float32).min`, is -inf at fp16, and GPT-2 with a run-time sequence outputs NaN "
            "(coremltools 9.0 `frontend/torch/ops.py`, `def triu`/`def tril`)",
        ),
        Rule(
            "band-part-difference",
            "info",
            "the same `sub(x=v, y=band_part(v))` on fp32",
            "webnn::band_part_difference_to_select",
            "exact at fp32 for finite `v`; converted at fp16 (coremltools' default), the mask above is NaN",
        ),
        Rule(
            "nan-zero-times-inf",
            "error",
            "a `mul` of an infinite constant (followed through fills, data movement and casts) by a value that "
            "can be 0: `0 * inf` is NaN",
            "webnn::finite_mask_sentinels",
            "IEEE arithmetic: NaN on the CPU, the GPU and the Neural Engine alike. transformers' "
            "`(1 - mask) * torch.finfo(float32).min` is `(1 - mask) * -inf` once coremltools casts it to fp16: "
            "ELECTRA, MobileBERT and T5's encoder output NaN (and Qwen2, Phi-3 with a run-time sequence, whose "
            "`fill(-inf)` causal mask is multiplied by 0); Apple's `neural_engine_rules.md` fills masks with -40000",
        ),
        Rule(
            "duplicate-name",
            "error",
            "a name defined again where an earlier definition is visible",
            "webnn::rename_duplicate_temporaries",
            "a saved `.mlpackage` links uses to definitions by name: reloaded, it reads the wrong definition "
            "without a word (coremltools' `dedup_op_and_var_names` runs only in DEFAULT)",
        ),
        Rule(
            "interface-name-clash",
            "warning",
            "a function input and a different output (or two outputs) with one name",
            "",
            "no renaming keeps the interface; the saved model cannot tell the two apart",
        ),
        Rule(
            "declared-type-mismatch",
            "error",
            "a type the protobuf declares that the op's inputs contradict",
            "mil-passes optimize (writes the inferred types)",
            "Core ML's compiler checks declared types: \"Param x has incorrect type for operator ios17.conv ... "
            'got tensor<fp32, [1]>" (pywebnn MobileNetV2); coremltools 9.0 itself writes `[0, 0, 4, 8]` for '
            "`reshape(x[B, S, 32, 1], [0, 0, 4, 8])`",
        ),
        Rule(
            "dynamic-quantization-param",
            "error",
            "a `quantize`/`dequantize` (or `constexpr_affine_dequantize`) whose `scale` or `zero_point` is not a const",
            "mil-passes optimize (lowers it to the op spec's formula)",
            "the iOS17 op spec requires const `scale` and `zero_point`; Core ML's compiler refuses the model and "
            'coremltools\' loader cannot read it ("Input zero_point must be const at compile time")',
        ),
    )
}


# The package's passes that cure a placement rule besides the one :mod:`.placement` names (each
# the fix where its pattern matches; its dry run reports the match under the rule).
PLACEMENT_FIXES: dict[str, tuple[str, ...]] = {
    "ane-gather": ("webnn::tiled_gather_to_gather",),
    "ane-int32-compute": ("webnn::cast_before_data_movement",),
    "ane-neg-inf-const": ("webnn::finite_mask_sentinels",),
}


def _placement_rules() -> dict[str, Rule]:
    """The Neural Engine placement rules (:mod:`.placement`), as the docs show them."""
    from .placement import RULES as PLACEMENT

    rules = {}
    for r in PLACEMENT:
        passes = ((r.fix_pass,) if r.fix_pass else ()) + PLACEMENT_FIXES.get(r.id, ())
        rules[r.id] = Rule(r.id, r.severity, r.finds, ", ".join(passes) or r.advice, r.evidence)
    return rules


RULES.update(_placement_rules())


def severity_of(rule: str) -> str:
    """The severity of ``rule`` (``KeyError`` for an unknown id)."""
    return RULES[rule].severity


def rule_table() -> str:
    """The rules as docs/rules.md's Markdown table (a test keeps the two the same)."""
    rows = ["| rule | severity | finds | fixed by | evidence |", "|---|---|---|---|---|"]
    for rule in RULES.values():
        fix = ", ".join(f"`{name}`" for name in rule.fix.split(", ")) if rule.fix.startswith("webnn::") else rule.fix
        rows.append(f"| `{rule.id}` | {rule.severity} | {rule.finds} | {fix or '—'} | {rule.evidence} |")
    return "\n".join(rows)

"""Every lint rule: its id, severity, what it finds, what fixes it, and the evidence it rests on.

The rules of the package's passes are declared by the passes (``DECLARATION.rules``, read by
:func:`~mil_passes.declaration.declared`); the Neural Engine placement rules are values of
:mod:`.placement` (with their chips, consequence and sources); the rest are written here. All join
this table as they are.

Severity policy (see :data:`~mil_passes.lint.findings.SEVERITIES`): **error** when Core ML will
refuse the model, or load it and silently run it on another compute unit or compute something
else; **warning** when it is likely wrong or slow and the user can act; **info** for a tidy-up a
pass does, or a note on why a pass left something. A valid program is never an error or warning
only because a pass could simplify it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..declaration import declared, pass_names


@dataclass(frozen=True)
class CatalogEntry:
    """A lint rule as the docs show it: what it finds, what fixes it, and the evidence."""

    id: str
    severity: str
    finds: str
    fix: str
    evidence: str


def _pass_rules() -> list[CatalogEntry]:
    """The rules the package's passes answer, from their declarations, in pipeline order."""
    by_name = {d.full_name: d for d in declared()}
    order = [*pass_names(declared()), *(name for name in by_name if name not in pass_names(declared()))]
    return [
        CatalogEntry(rule.id, rule.severity, rule.finds, name, rule.evidence)
        for name in order
        for rule in by_name[name].rules
    ]


#: The rules no pass fixes by itself.
_OTHER_RULES = (
    CatalogEntry(
        "interface-name-clash",
        "warning",
        "a function input and a different output (or two outputs) with one name",
        "",
        "no renaming keeps the interface; the saved model cannot tell the two apart",
    ),
    CatalogEntry(
        "not-ml-program-stage",
        "warning",
        "a pipeline stage that is not an ML Program (a neural network): it has no MIL program to check",
        "reconvert its source with `convert_to='mlprogram'`",
        "lint, optimize and verify read MIL; a neural-network model has none, so its stage is left as it is",
    ),
    CatalogEntry(
        "declared-type-mismatch",
        "error",
        "a type the protobuf declares that the op's inputs contradict",
        "mil-passes optimize (writes the inferred types)",
        "Core ML's compiler checks declared types: \"Param x has incorrect type for operator ios17.conv ... "
        'got tensor<fp32, [1]>" (pywebnn MobileNetV2); coremltools 9.0 itself writes `[0, 0, 4, 8]` for '
        "`reshape(x[B, S, 32, 1], [0, 0, 4, 8])`",
    ),
    CatalogEntry(
        "dynamic-quantization-param",
        "error",
        "a `quantize`/`dequantize` (or `constexpr_affine_dequantize`) whose `scale` or `zero_point` is not a const",
        "mil-passes optimize (lowers it to the op spec's formula)",
        "the iOS17 op spec requires const `scale` and `zero_point`; Core ML's compiler refuses the model and "
        'coremltools\' loader cannot read it ("Input zero_point must be const at compile time")',
    ),
)

RULES: dict[str, CatalogEntry] = {rule.id: rule for rule in (*_pass_rules(), *_OTHER_RULES)}


def _placement_rules() -> dict[str, CatalogEntry]:
    """The Neural Engine placement rules (:mod:`.placement`), as the docs show them."""
    from . import placement

    return {
        r.id: CatalogEntry(r.id, r.severity, r.finds, ", ".join(r.fix_passes) or r.advice, r.evidence)
        for r in placement.RULES
    }


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

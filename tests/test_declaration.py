"""One declaration per pass: read from source, registered under its name, scheduled by its slots, its
lint rules in the catalogue, and ``mil-passes list`` (``--all``: the replacements and guards too)."""

import pytest
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

import mil_passes
from mil_passes.cli.main import main
from mil_passes.declaration import (
    LintRule,
    PassDeclaration,
    Slot,
    UnknownPass,
    declaration_in,
    pass_names,
    pipeline_order,
    qualified,
    resolve_pass,
)
from mil_passes.guards import GUARDS
from mil_passes.lint.catalog import RULES
from mil_passes.passes import DECLARATIONS


@pytest.mark.parametrize("declaration", DECLARATIONS, ids=[d.name for d in DECLARATIONS])
def test_each_pass_is_registered_under_its_declared_name(declaration):
    instance = PASS_REGISTRY[declaration.full_name]
    assert type(instance).__module__ == f"mil_passes.passes.{declaration.name}"
    assert instance.name == declaration.full_name and instance.declaration is declaration
    assert bool(declaration.slots) != (declaration.replaces is not None)  # scheduled, or in a pass's place


@pytest.mark.parametrize("declaration", DECLARATIONS, ids=[d.name for d in DECLARATIONS])
def test_each_declared_lint_rule_is_in_the_catalogue_fixed_by_its_pass(declaration):
    for rule in declaration.rules:
        entry = RULES[rule.id]
        assert (entry.severity, entry.finds, entry.fix, entry.evidence) == (
            rule.severity,
            rule.finds,
            declaration.full_name,
            rule.evidence,
        )


def test_a_declaration_is_read_from_literal_source_only():
    source = 'DECLARATION = PassDeclaration(name="p", summary="s.", slots=(Slot(5, None, "first"),))\nx = 1'
    assert declaration_in(source) == PassDeclaration("p", "s.", (Slot(5, None, "first"),))
    assert declaration_in("x = 1") is None
    with pytest.raises(ValueError):
        declaration_in('DECLARATION = PassDeclaration(name=NAME, summary="s.")')
    with pytest.raises(TypeError, match="must be a PassDeclaration, got Slot"):
        declaration_in('DECLARATION = Slot(1, None, "why")')


def test_the_schedule_orders_runs_by_rank_and_refuses_a_shared_rank():
    late = PassDeclaration("late", "l.", (Slot(30, None, "a"), Slot(10, None, "b")))
    early = PassDeclaration("early", "e.", (Slot(20, "common::x", "c"),), rules=(LintRule("r", "info", "f", "e"),))
    assert [name for name, _ in pipeline_order((late, early))] == ["webnn::late", "webnn::early", "webnn::late"]
    assert pass_names((late, early)) == ("webnn::late", "webnn::early")
    with pytest.raises(ValueError, match="two runs share the rank 20"):
        pipeline_order((early, PassDeclaration("other", "o.", (Slot(20, None, "d"),))))


def test_a_bare_name_is_the_package_s_and_unknown_names_are_refused():
    assert qualified("fold_shape_ops") == resolve_pass("fold_shape_ops") == "webnn::fold_shape_ops"
    assert resolve_pass("common::const_elimination") == "common::const_elimination"
    with pytest.raises(UnknownPass, match=r"unknown pass 'nope' \(the package's passes: webnn::rename_dup"):
        resolve_pass("nope")


def test_list_all_names_the_passes_replacements_and_guards_a_line_each(capsys):
    assert main(["list", "--all"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    replacements = [d.full_name for d in DECLARATIONS if d.replaces is not None]
    assert names == [*mil_passes.PASS_NAMES, *replacements, *(guard.name for guard in GUARDS)]
    assert (len(replacements), len(GUARDS)) == (2, 20)

"""lint() as a dry run of the passes, and run_passes(), on the built-in example and hand-made programs."""

import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from coremltools.converters.mil.mil import get_new_symbol

from mil_passes.examples import streaming_cache_program
from mil_passes.lint import RULES, DimNames, lint
from mil_passes.cli.text_output import format_report
from mil_passes.runner import run_passes
from pass_helpers import pass_lint

CONCAT_PASS = "webnn::concat_slice_to_slice_concat"
FOLD_PASS = "webnn::fold_shape_ops"
RENAME_PASS = "webnn::rename_duplicate_temporaries"

IOS17 = ct.target.iOS17


def window_program(begin, width, join=True, axis=-1):
    @mb.program(input_specs=[mb.TensorSpec((1, 4, 8)), mb.TensorSpec((1, 4, 40))], opset_version=IOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=axis, name="joined")
        window = mb.slice_by_index(
            x=joined, begin=[0, 0, begin], end=[0, 0, begin + width], end_mask=[True, True, False], name="window"
        )
        return mb.stack(values=(window, window), axis=0, name="out") if join else window

    return prog


@pytest.mark.parametrize("begin, width", [(7, 8), (1, 16), (15, 24)])
def test_four_conditions_make_an_error(begin, width):
    (finding,) = pass_lint(window_program(begin, width))
    assert finding.rule == "ane-refused-slice-of-concat" and finding.severity == "error"
    assert f"offset {begin}, width {width}" in finding.message
    assert "concat 'joined'" in finding.message and "stack 'out'" in finding.message
    assert finding.fix == CONCAT_PASS


@pytest.mark.parametrize(
    "begin, width, join",
    [
        (8, 8, True),  # aligned offset
        (7, 9, True),  # width not a multiple of 8
        (7, 32, True),  # width a multiple of 32
        (7, 8, False),  # nothing joins the window
    ],
)
def test_any_condition_missing_is_only_info_the_pass_would_tidy(begin, width, join):
    (finding,) = pass_lint(window_program(begin, width, join))
    assert (finding.rule, finding.severity, finding.fix) == ("slice-of-concat", "info", CONCAT_PASS)
    assert f"reads [{begin}:{begin + width}] of axis 2 (48 elements) of concat 'joined'" in finding.message
    assert "cut from the concat's inputs instead" in finding.message


def test_cast_to_bool_before_select_is_flagged():
    @mb.program(input_specs=[mb.TensorSpec((3,), dtype=types.int32)], opset_version=IOS17)
    def prog(n):
        return mb.select(cond=mb.cast(x=n, dtype="bool", name="truth"), a=1.0, b=0.0, name="out")

    findings = pass_lint(prog)
    assert [(f.rule, f.severity, f.op) for f in findings] == [
        ("non-bool-condition", "info", "truth"),
        ("bool-simplification", "info", "out"),
    ]
    assert "cast 'truth' of int32 'n' to bool becomes not_equal('n', 0)" in findings[0].message
    # coremltools types this select as a scalar (its inference ignores cond's shape): refused
    assert findings[1].fix is None and "cond's shape (3,) is not the output's" in findings[1].message


def test_surviving_shape_op_says_why():
    from coremltools.converters.mil.mil import get_new_symbol

    @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(), 4))], opset_version=IOS17)
    def prog(x):
        return mb.shape(x=x, name="dims")

    (finding,) = pass_lint(prog)
    assert (finding.rule, finding.severity, finding.fix) == ("runtime-shape", "info", None)
    assert "input 'x' axis 0 (flexible)" in finding.message and "is0" not in finding.message


def test_lint_rejects_non_programs():
    with pytest.raises(TypeError, match="needs a coremltools MIL Program"):
        lint("model.mlpackage")


def test_run_passes_fixes_the_streaming_example_and_reports():
    prog = streaming_cache_program(layers=4, channels=16)
    report = run_passes(prog)
    assert sum(f.rule == "ane-refused-slice-of-concat" for f in report.findings_before) == 4
    assert {f.rule for f in report.findings_after} == {"ane-last-axis-padding"}  # an 8-wide cache: a cost
    assert [run.name for run in report.passes][-1] == "common::dead_code_elimination"
    table = format_report(report)
    assert "finding ane-refused-slice-of-concat" in table and "webnn::concat_slice_to_slice_concat" in table


def test_run_passes_rejects_unknown_pass_before_running():
    prog = streaming_cache_program(layers=2, channels=8)
    before = str(prog)
    with pytest.raises(ValueError, match="unknown pass 'webnn::nope'"):
        run_passes(prog, ["webnn::concat_slice_to_slice_concat", "webnn::nope"])
    assert str(prog) == before


def test_cuts_of_other_axes_are_reported_as_the_pass_treats_them():
    """A slice_by_size that reads the whole concat axis but cuts others is moved into the inputs
    by the pass, so lint names it; a split along another axis is refused, so lint says why."""

    @mb.program(input_specs=[mb.TensorSpec((2, 4, 8)), mb.TensorSpec((2, 4, 7))], opset_version=IOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=-1, name="joined")
        first = mb.slice_by_size(x=joined, begin=[0, 0, 0], size=[1, -1, -1], name="first")
        last = mb.slice_by_size(x=joined, begin=[1, 0, -15], size=[1, 2, 15], name="last")
        top, bottom = mb.split(x=joined, num_splits=2, axis=0, name="halves")
        window = mb.slice_by_size(x=joined, begin=[0, 0, 7], size=[-1, -1, 8], name="window")
        head, tail = mb.split(x=joined, split_sizes=[7, 8], axis=2, name="parts")
        return first, last, top, bottom, window, head, tail

    findings = pass_lint(prog)
    assert [(f.op, f.fix) for f in findings] == [
        ("first", CONCAT_PASS),
        ("last", CONCAT_PASS),
        ("window", CONCAT_PASS),
        ("parts", CONCAT_PASS),
        ("halves", None),
    ]
    assert "reads all of axis 2 of concat 'joined' and cuts other axes" in findings[0].message
    assert "splits axis 0, not the concat axis 2" in findings[-1].message


# -- the examples: the pass rewrites, so lint names it --------------------------------


def test_slice_by_size_of_a_concat_is_a_window_the_pass_moves():
    @mb.program(input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 4))], opset_version=IOS17)
    def prog(a, b):
        joined = mb.concat(values=(a, b), axis=1, name="joined")
        return mb.slice_by_size(x=joined, begin=[0, 0], size=[1, -1], name="top")

    (finding,) = pass_lint(prog)
    assert (finding.rule, finding.op, finding.fix) == ("slice-of-concat", "top", CONCAT_PASS)


def test_whole_axis_slice_of_a_concat_is_removed_and_lint_says_so():
    @mb.program(input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 4))], opset_version=IOS17)
    def prog(a, b):
        joined = mb.concat(values=(a, b), axis=1, name="joined")
        return mb.slice_by_index(x=joined, begin=[0, 0], end=[2, 7], name="all")

    (finding,) = pass_lint(prog)
    assert (finding.rule, finding.fix) == ("slice-of-concat", CONCAT_PASS)
    assert "the whole axis: it is replaced by the concat itself" in finding.message


def test_gather_of_a_static_dim_folds_though_another_dim_is_run_time():
    @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(), 1, 2))], opset_version=IOS17)
    def prog(a):
        return mb.gather(x=mb.shape(x=a, name="dims"), indices=[2], axis=0, name="last")

    findings = pass_lint(prog)
    (fold,) = [f for f in findings if f.fix is not None]
    assert (fold.rule, fold.op, fold.fix) == ("runtime-shape", "last", FOLD_PASS)
    assert "it folds to 'last' = [2]" in fold.message
    assert all("survives" not in f.message for f in findings)


def test_duplicate_names_in_a_program_are_found_by_the_rename_pass():
    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        first = mb.relu(x=x, name="t")
        return mb.add(x=mb.relu(x=first, name="t"), y=1.0, name="out")

    findings = [f for f in pass_lint(prog) if f.rule == "duplicate-name"]
    assert findings and all(f.fix == RENAME_PASS and f.severity == "error" for f in findings)
    assert any("it becomes 't_1'" in f.message for f in findings)


def test_an_interface_clash_is_a_finding_no_pass_fixes():
    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        return mb.relu(x=x, name="x")

    (finding,) = [f for f in pass_lint(prog) if f.rule == "interface-name-clash"]
    assert finding.fix is None and finding.severity == "warning" and "'x'" in finding.message


def test_lint_does_not_change_the_program():
    prog = streaming_cache_program(layers=3, channels=8)
    before = str(prog)
    assert pass_lint(prog)
    assert str(prog) == before


def _bool_cast_and_fp16_band_difference():
    @mb.program(input_specs=[mb.TensorSpec((4, 4), dtype=types.fp16)], opset_version=IOS17)
    def prog(x):
        flag = mb.cast(x=x, dtype="bool", name="flag")
        upper = mb.sub(x=x, y=mb.band_part(x=x, lower=0, upper=-1), name="upper")
        return flag, upper

    return prog


#: The severity policy (docs/rules.md), written out here rather than read from the catalogue: Core ML
#: refuses the model → error; likely wrong and the user can act → warning; a tidy-up → info.
POLICY = {"ane-refused-slice-of-concat": "error", "fp16-band-part-difference": "warning", "non-bool-condition": "info"}


@pytest.mark.parametrize(
    "build, rules",
    [
        (lambda: streaming_cache_program(layers=2, channels=8), ["ane-refused-slice-of-concat"] * 2),
        (_bool_cast_and_fp16_band_difference, ["fp16-band-part-difference", "non-bool-condition"]),
    ],
)
def test_findings_carry_the_severity_the_policy_gives_their_rule(build, rules):
    findings = pass_lint(build())
    assert sorted(f.rule for f in findings) == rules
    for finding in findings:
        assert finding.severity == RULES[finding.rule].severity == POLICY[finding.rule], finding.rule


def test_dim_names_use_the_declared_range_and_hide_made_up_symbols():
    @mb.program(input_specs=[mb.TensorSpec((1, get_new_symbol()))], opset_version=IOS17)
    def prog(ids):
        return mb.shape(x=ids)

    symbol = str(prog.functions["main"].inputs["ids"].shape[1])
    words = DimNames.of_program(prog, {("ids", 1): "1–64"})
    assert words(f"dims {symbol} and is9999") == "dims input 'ids' axis 1 (flexible, 1–64) and n1"


def test_the_docs_show_the_rule_table_as_the_catalogue_has_it():
    from pathlib import Path

    from mil_passes.lint.catalog import rule_table

    assert rule_table() in (Path(__file__).resolve().parent.parent / "docs" / "rules.md").read_text()

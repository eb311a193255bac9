"""mil-passes verify: pass-by-pass output checks of a pipeline, the culprit named, CLI and JSON."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline
from coremltools.converters.mil.mil.passes.pass_registry import register_pass

from mil_passes.cli import main
from mil_passes.package import io as mlpackage
from mil_passes.cli.text_output import format_row, format_summary
from mil_passes.runner import run_pass
from mil_passes.verify import (
    UnknownPipeline,
    VerifyError,
    compare_outputs,
    resolve_pipeline,
    verify_package,
    verify_program,
)

FIXTURE = Path(__file__).parent / "fixtures" / "const_elimination_int32.py"
# DEFAULT's length differs between coremltools releases (95 passes in 9.0, 89 in 8.3).
DEFAULT_LENGTH = len(PassPipeline.DEFAULT.passes)


def slice_of_concat(consumer: str | None = None) -> Program:
    """``slice(concat(x, [-10.5, 0.25]))``: const_elimination folds the slice into an int32
    const (coremltools 9.0); with a ``consumer`` (``add``) reading it, the pass raises instead."""

    @mb.program(input_specs=[mb.TensorSpec((1,), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        joined = mb.concat(values=(x, np.array([-10.5, 0.25], np.float32)), axis=0)
        window = mb.slice_by_index(x=joined, begin=[1], end=[3], name="y")
        return mb.add(x=window, y=np.float32(1), name="z") if consumer == "add" else window

    return prog


def fp32_chain() -> Program:
    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        h = mb.relu(x=mb.mul(x=x, y=np.float32(3.0)))
        h = mb.mul(x=mb.add(x=h, y=np.float32(0.1)), y=np.float32(1.0))  # noop_elimination removes * 1
        return mb.sub(x=h, y=np.float32(0.7), name="out")

    return prog


# -- passes that break the program, registered for these tests ------------------------------
def replace_each(prog, op_type: str, make) -> None:
    """Every top-level ``op_type`` op of main becomes ``make(op)`` (built before it)."""
    block = prog.functions["main"]
    for op in list(block.operations):
        if op.op_type == op_type:
            with block:
                new = make(op)
            block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=new)
            block.remove_ops([op])


@register_pass(namespace="verify_test")
class add_becomes_sub(AbstractGraphPass):
    """Every ``add`` becomes ``sub`` (changes values, keeps types)."""

    def apply(self, prog):
        replace_each(prog, "add", lambda op: mb.sub(x=op.x, y=op.y, before_op=op, name=op.name + "_sub"))


@register_pass(namespace="verify_test")
class declare_wrong_shape(AbstractGraphPass):
    """The first op's output is declared a shape it does not have."""

    def apply(self, prog):
        var = next(op for op in prog.functions["main"].operations if op.op_type != "const").outputs[0]
        var._sym_type = types.tensor(var.dtype, (7, 7))


@register_pass(namespace="verify_test")
class nothing(AbstractGraphPass):
    """Leaves the program as it was."""

    def apply(self, prog):
        pass


@register_pass(namespace="verify_test")
class rename_vars(AbstractGraphPass):
    """Renames every non-const op and its outputs (values unchanged)."""

    def apply(self, prog):
        for op in prog.functions["main"].operations:
            if op.op_type != "const":
                op.name = op.name + "_renamed"
                for var in op.outputs:
                    var.name = var.name + "_renamed"


@register_pass(namespace="verify_test")
class nudge_a_constant(AbstractGraphPass):
    """The const ``0.7`` becomes ``0.75`` (a new const op of the same type and shape)."""

    def apply(self, prog):
        block = prog.functions["main"]
        for op in list(block.operations):
            if op.op_type == "const" and np.float32(op.val.val) == np.float32(0.7):
                with block:
                    new = mb.const(val=np.float32(0.75), before_op=op, name=op.name + "_nudged")
                block.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=new)
                block.remove_ops([op])


@register_pass(namespace="verify_test")
class explode(AbstractGraphPass):
    def apply(self, prog):
        raise RuntimeError("boom\nsecond line")


# -- pipelines -------------------------------------------------------------------------------
def test_named_pipelines_and_pass_lists():
    assert resolve_pipeline("DEFAULT").passes == PassPipeline.DEFAULT.passes
    assert resolve_pipeline("empty").passes == []
    assert resolve_pipeline("cleanup").passes == PassPipeline.CLEANUP.passes
    assert "webnn::concat_slice_to_slice_concat" in resolve_pipeline("mil_passes").passes
    assert resolve_pipeline("common::noop_elimination, fold_shape_ops").passes == [
        "common::noop_elimination",
        "webnn::fold_shape_ops",
    ]
    pruning = resolve_pipeline("default_pruning")
    assert pruning.get_options("compression::prune_weights") is not None


@pytest.mark.parametrize(
    "name, words",
    [
        ("fast", "unknown pipeline 'fast'"),
        ("common::no_such_pass", "unknown pass 'common::no_such_pass'"),
        ("a,,", "unknown pass 'a'"),
    ],
)
def test_unknown_pipelines_are_named(name, words):
    with pytest.raises(UnknownPipeline, match=words):
        resolve_pipeline(name)


# -- the culprit -----------------------------------------------------------------------------
def test_const_elimination_int32_is_named():
    verification = verify_program(slice_of_concat(), "default")
    culprit = verification.culprit
    assert culprit.name == "common::const_elimination" and culprit.status == "changed"
    assert culprit.index == PassPipeline.DEFAULT.passes.index("common::const_elimination") + 1
    change = culprit.outputs["y"]
    assert (change.dtype_before, change.dtype_after) == ("fp32", "int32")
    assert change.max_abs == pytest.approx(0.5)
    assert "became int32 (was fp32)" in culprit.reason()
    later = verification.rows[culprit.index :]  # the run goes on: no later pass undoes the change
    assert len(verification.rows) == len(PassPipeline.DEFAULT.passes)
    assert {row.status for row in later} == {"changed"} and culprit.restored_by is None
    assert all(row.status == "same" for row in verification.rows[: culprit.index - 1])


def test_const_elimination_raising_variant_is_named():
    culprit = verify_program(slice_of_concat("add"), "default").culprit
    assert culprit.name == "common::const_elimination" and culprit.status == "raised"
    assert culprit.error.startswith("ValueError: ") and "\n" not in culprit.error


def test_pass_options_from_the_pipeline_are_set():
    pipeline = PassPipeline(pass_names=["common::const_elimination"])
    assert verify_program(slice_of_concat(), pipeline).culprit is not None
    pipeline.set_options("common::const_elimination", {"skip_const_by_size": "1"})  # no fold past 1 element
    assert verify_program(slice_of_concat(), pipeline).culprit is None


def test_the_given_program_is_left_as_it_was():
    prog = slice_of_concat()
    before = str(prog)
    verify_program(prog, "default")
    assert str(prog) == before


def test_a_program_builder_is_called_once_and_its_program_used():
    built = []

    def build():
        built.append(fp32_chain())
        return built[-1]

    verification = verify_program(build, "default", feeds=2)
    assert len(built) == 1 and verification.culprit is None and verification.feeds == 2
    assert "cast" in str(built[0])  # the passes ran on it (add_fp16_cast)


def test_fp16_rounding_is_precision_not_change():
    verification = verify_program(fp32_chain(), "default")
    assert verification.culprit is None
    statuses = {row.name: row.status for row in verification.rows}
    assert statuses["common::add_fp16_cast"] == "precision"
    assert statuses["common::lower_complex_dialect_ops"] == "same"
    assert len(verification.rows) == len(PassPipeline.DEFAULT.passes)
    row = next(r for r in verification.rows if r.name == "common::noop_elimination")
    assert row.ops_after < row.ops_before


def test_a_value_change_names_the_pass():
    pipeline = ["common::noop_elimination", "verify_test::add_becomes_sub", "common::dead_code_elimination"]
    verification = verify_program(fp32_chain(), pipeline)
    culprit = verification.culprit
    assert verification.pipeline == ",".join(pipeline)
    assert (culprit.index, culprit.name, culprit.status) == (2, "verify_test::add_becomes_sub", "changed")
    assert culprit.outputs["out"].max_abs == pytest.approx(0.2, rel=1e-5)
    assert [row.status for row in verification.rows] == ["same", "changed", "changed"]


@register_pass(namespace="verify_test")
class sub_becomes_add(AbstractGraphPass):
    """Every ``sub`` becomes ``add``: undoes ``add_becomes_sub``."""

    def apply(self, prog):
        replace_each(prog, "sub", lambda op: mb.add(x=op.x, y=op.y, before_op=op, name=op.name + "_add"))


@register_pass(namespace="verify_test")
class nudge_adds(AbstractGraphPass):
    """Every ``add`` of a constant adds 0.5 more: a change within fp16's tolerance, beyond fp32's."""

    def apply(self, prog):
        replace_each(  # the test's adds all have a constant y
            prog, "add", lambda op: mb.add(x=op.x, y=np.float32(op.y.val + 0.5), before_op=op, name=op.name + "_nudged")
        )


def test_a_pass_that_ends_the_run_after_the_culprit_is_named_too():
    """Found in review: the culprit line named only the change, not the pass that stopped the run."""
    pipeline = ["verify_test::add_becomes_sub", "verify_test::declare_wrong_shape", "common::noop_elimination"]
    verification = verify_program(fp32_chain(), pipeline)
    summary = format_summary(verification)
    assert summary.startswith("culprit: verify_test::add_becomes_sub (pass 1 of 3) changed: ")
    assert "; then verify_test::declare_wrong_shape (pass 2) invalid: " in summary
    assert summary.endswith("; 1 later pass not run")


def test_a_precision_that_widens_later_undoes_no_change():
    """Found in review: after add_fp16_cast the fp16 tolerance (1e-2) forgives a 0.5 change of an
    output near 100 that fp32's did not: that is no undoing, and the nudge stays the culprit."""

    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=x, y=np.float32(100), name="out")

    verification = verify_program(prog, ["verify_test::nudge_adds", "common::add_fp16_cast"])
    assert [(row.status, row.precision) for row in verification.rows] == [("changed", "fp32"), ("precision", "fp16")]
    assert verification.culprit is verification.rows[0] and verification.restored is None


def test_a_change_a_later_pass_undoes_is_no_culprit(capsys, tmp_path):
    """Only the pipeline's result is what a converted model computes: the changed rows stay ``changed``
    and name the pass that undid them; nothing is a culprit."""

    def add_chain():
        @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
        def prog(x):
            h = mb.mul(x=mb.add(x=mb.relu(x=x), y=np.float32(0.2)), y=np.float32(1.0))  # noop_elimination: * 1
            return mb.add(x=h, y=np.float32(0.5), name="out")

        return prog

    pipeline = ["verify_test::add_becomes_sub", "common::noop_elimination", "verify_test::sub_becomes_add"]
    verification = verify_program(add_chain(), pipeline)
    assert [row.status for row in verification.rows] == ["changed", "changed", "same"]
    assert verification.culprit is None and verification.restored is verification.rows[0]
    assert [row.restored_by for row in verification.rows[:2]] == [verification.rows[2]] * 2
    summary = format_summary(verification)
    assert summary.startswith("the pipeline keeps the outputs: 3 passes (1 same, 2 undone), ")
    assert summary.endswith(
        "; verify_test::add_becomes_sub (pass 1) output 'out' changed by up to 1.4 (rel 0.56), and "
        "verify_test::sub_becomes_add (pass 3) undid it"
    )
    undone = verify_program(add_chain(), [*pipeline, "verify_test::add_becomes_sub"])
    assert undone.culprit is undone.rows[3]  # a change after the undoing one is a culprit again


@pytest.fixture
def evaluations(monkeypatch) -> list[int]:
    """Counts the programs evaluated by verify (one count per feed)."""
    from mil_passes import verify

    counted: list[int] = []
    outputs = verify._outputs

    def counting(prog, feeds, on_step=None):
        counted.append(1)
        return outputs(prog, feeds, on_step)

    monkeypatch.setattr(verify, "_outputs", counting)
    return counted


def test_a_pass_that_changes_nothing_is_not_evaluated_again(evaluations):
    pipeline = ["verify_test::nothing", "verify_test::rename_vars", "common::noop_elimination", "verify_test::nothing"]
    verification = verify_program(fp32_chain(), pipeline, feeds=2)
    assert [row.evaluated for row in verification.rows] == [False, False, True, False]
    assert len(evaluations) == 2 * 2  # the original and after noop_elimination, on 2 feeds
    assert [row.status for row in verification.rows] == ["same"] * 4
    assert "unchanged, not re-run" in format_row(verification.rows[0])
    assert "unchanged, not re-run" not in format_row(verification.rows[2])
    assert verification.culprit is None


def test_a_pass_that_changes_only_a_constant_is_evaluated_and_named(evaluations):
    pipeline = ["verify_test::nothing", "verify_test::nudge_a_constant", "verify_test::nothing"]
    verification = verify_program(fp32_chain(), pipeline, feeds=1)
    culprit = verification.culprit
    assert (culprit.index, culprit.name, culprit.status, culprit.evaluated) == (
        2,
        "verify_test::nudge_a_constant",
        "changed",
        True,
    )
    assert culprit.outputs["out"].max_abs == pytest.approx(0.05, rel=1e-5)
    assert len(evaluations) == 2


def test_an_unchanged_pass_after_an_unchecked_one_is_unchecked(monkeypatch):
    from mil_passes.reference import kernels
    from mil_passes.reference.errors import UnsupportedOpError

    def no_kernel(op, args):
        raise UnsupportedOpError(op.op_type, op.name, "no kernel in this test")

    @mb.program(input_specs=[mb.TensorSpec((2, 4), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=x, y=np.float32(1), name="out")

    monkeypatch.setitem(kernels.KERNELS, "sub", no_kernel)  # the pass makes a sub
    verification = verify_program(prog, ["verify_test::add_becomes_sub", "verify_test::nothing"], feeds=1)
    statuses = [(row.status, row.evaluated) for row in verification.rows]
    assert statuses == [("unchecked", True), ("unchecked", False)]
    assert "no kernel in this test" in verification.rows[1].error


def test_a_raising_pass_and_a_broken_program():
    raised = verify_program(fp32_chain(), ["verify_test::explode"]).culprit
    assert raised.status == "raised" and raised.error == "RuntimeError: boom second line"
    broken = verify_program(fp32_chain(), ["verify_test::declare_wrong_shape"]).culprit
    assert broken.status == "invalid" and "declared tensor<fp32, [7, 7]>" in broken.error


def test_an_op_without_kernel_in_the_original_is_bad_input(monkeypatch):
    from mil_passes.reference import kernels
    from mil_passes.reference.errors import UnsupportedOpError

    def no_kernel(op, args):
        raise UnsupportedOpError(op.op_type, op.name)

    monkeypatch.setitem(kernels.KERNELS, "relu", no_kernel)

    @mb.program(input_specs=[mb.TensorSpec((2, 4), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.relu(x=x)

    with pytest.raises(VerifyError, match="reference interpreter cannot run the program"):
        verify_program(prog, "empty")


def test_a_program_without_main_is_bad_input():
    prog = fp32_chain()
    prog.functions["other"] = prog.functions.pop("main")
    with pytest.raises(VerifyError, match="no function 'main' \\(it has: other\\)"):
        verify_program(prog, "empty")


def test_one_var_output_twice():
    """Outputs are matched by position: a dict by name would hold one (found by make fuzz-coremltools)."""

    @mb.program(input_specs=[mb.TensorSpec((2,), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        y = mb.relu(x=mb.mul(x=x, y=np.float32(1.0)), name="y")
        return y, y

    verification = verify_program(prog, "default")
    assert verification.culprit is None
    assert list(verification.rows[-1].outputs) == ["y", "y#1"]


@pytest.mark.parametrize("feeds", [0, -1])
def test_feeds_must_be_positive(feeds):
    with pytest.raises(VerifyError, match="feeds must be at least 1"):
        verify_program(fp32_chain(), "empty", feeds=feeds)


# -- comparing outputs -----------------------------------------------------------------------
def f32(*values):
    return np.array(values, np.float32)


@pytest.mark.parametrize(
    "before, after, precision, status",
    [
        (f32(1, np.nan), f32(1, np.nan), "fp32", "same"),
        (f32(0.0), f32(-0.0), "fp32", "precision"),  # a sign of zero: not bit-exact, no value change
        (f32(100, 1), f32(100.001, 1), "fp32", "precision"),
        (f32(100, 1), f32(100.5, 1), "fp32", "changed"),
        (f32(100, 1), f32(100.5, 1), "fp16", "precision"),
        (f32(1, 2), f32(1, np.nan), "fp16", "changed"),
        (f32(1, 2), np.array([1, 2], np.int32), "fp32", "changed"),
        (f32(1, 2), f32(1, 2, 3), "fp32", "changed"),
        (np.array([1, 2], np.int32), np.array([1, 3], np.int32), "fp16", "changed"),
        (np.array(True), np.array(True), "fp32", "same"),
    ],
)
def test_compare_outputs(before, after, precision, status):
    change = compare_outputs(["o"], [[before]], [[after]], precision)["o"]
    assert change.status == status
    if before.shape != after.shape:
        assert change.max_abs is None and change.shape_after == list(after.shape)


def test_formatting_rows_and_summary():
    verification = verify_program(slice_of_concat(), "default")
    line = format_row(verification.culprit, 30)
    assert "common::const_elimination" in line and "2 -> 1" in line and "fp32[2] -> int32[2]" in line
    summary = format_summary(verification)
    assert summary.startswith(f"culprit: common::const_elimination (pass 11 of {DEFAULT_LENGTH}) changed")
    assert "later passes not run" not in summary  # the run goes on after a change
    assert format_summary(verify_program(fp32_chain(), "empty")).startswith("no pass changed the outputs: 0 passes")


# -- packages and the command ----------------------------------------------------------------
@pytest.fixture(scope="module")
def const_elimination_package(tmp_path_factory):
    """The slice-of-concat program saved without any pass (the backend pipeline would fold it)."""
    return mlpackage.save(slice_of_concat(), tmp_path_factory.mktemp("ce") / "ce.mlpackage")


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_verify_package_names_const_elimination(const_elimination_package):
    verification = verify_package(const_elimination_package)
    assert verification.culprit.name == "common::const_elimination"
    assert verification.input == str(const_elimination_package)


def test_cli_names_the_culprit(capsys, const_elimination_package):
    status, out, err = run(capsys, "verify", const_elimination_package)
    assert status == 1 and err == ""
    row = next(line for line in out.splitlines() if "common::const_elimination" in line)
    assert "int32" in row and "changed" in row
    assert out.splitlines()[-1].startswith(
        f"culprit: common::const_elimination (pass 11 of {DEFAULT_LENGTH}) changed: output 'y' became int32 (was fp32)"
    )


def test_cli_names_the_culprit_that_raises(capsys, tmp_path):
    path = mlpackage.save(slice_of_concat("add"), tmp_path / "raises.mlpackage")
    status, out, _ = run(capsys, "verify", path)
    assert status == 1
    assert out.splitlines()[-1].startswith(
        f"culprit: common::const_elimination (pass 11 of {DEFAULT_LENGTH}) raised: ValueError: "
    )
    assert out.splitlines()[-1].endswith(f"whereas x has dtype int32; {DEFAULT_LENGTH - 11} later passes not run")


def test_cli_json(capsys, const_elimination_package):
    status, out, _ = run(capsys, "verify", const_elimination_package, "--json", "--feeds", "2", "--seed", "5")
    document = json.loads(out)
    assert status == 1
    assert document["schema"] == "mil-passes/verify/1" and document["culprit"] == "common::const_elimination"
    assert (document["pipeline"], document["feeds"], document["input"]) == (
        "default",
        2,
        str(const_elimination_package),
    )
    last = next(row for row in document["passes"] if row["name"] == document["culprit"])
    assert set(last) == {
        "name",
        "seconds",
        "ops_before",
        "ops_after",
        "status",
        "outputs",
        "error",
        "states",
        "evaluated",
        "restored_by",
    }
    assert document["steps"] == 1 and last["states"] == {}  # no states: one prediction per feed
    assert last["evaluated"] is True and document["passes"][0]["evaluated"] is False  # the first pass changes nothing
    assert last["outputs"]["y"]["dtype_after"] == "int32" and last["outputs"]["y"]["shape_before"] == [2]
    assert [row["name"] for row in document["passes"]] == PassPipeline.DEFAULT.passes  # the run goes on
    assert {row["restored_by"] for row in document["passes"]} == {None}


def test_cli_exit_0_when_nothing_changes(capsys, const_elimination_package):
    status, out, _ = run(capsys, "verify", const_elimination_package, "--pipeline", "common::noop_elimination")
    assert status == 0 and "no pass changed the outputs: 1 pass (1 same)" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pipeline", "fast"], "unknown pipeline 'fast'"),
        (["--pipeline", "common::nope"], "unknown pass 'common::nope'"),
    ],
)
def test_cli_bad_input_is_one_line(capsys, const_elimination_package, argv, message):
    status, out, err = run(capsys, "verify", const_elimination_package, *argv)
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err


def test_cli_missing_package(capsys, tmp_path):
    status, out, err = run(capsys, "verify", tmp_path / "nope.mlpackage")
    assert status == 2 and out == "" and "nope.mlpackage" in err


# -- a torch model converted with EMPTY, verified against DEFAULT ------------------------------
def test_torch_model_converted_with_empty_verified_against_default(tmp_path, capsys):
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(4, 8, 3, padding=1)
            self.norm = torch.nn.BatchNorm1d(8)
            self.linear = torch.nn.Linear(8, 5)

        def forward(self, x):
            h = torch.relu(self.norm(self.conv(x)))
            h = torch.cat([h, h * 2], dim=-1)[..., 3:11]
            return torch.softmax(self.linear(h.transpose(1, 2)), -1)

    torch.manual_seed(0)
    example = torch.randn(1, 4, 8)
    traced = torch.jit.trace(Model().eval(), example)
    model = ct.convert(
        traced,
        inputs=[ct.TensorType(name="x", shape=example.shape)],
        pass_pipeline=ct.PassPipeline.EMPTY,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS17,
        skip_model_load=True,
    )
    path = tmp_path / "model.mlpackage"
    model.save(str(path))
    status, out, _ = run(capsys, "verify", path, "--pipeline", "default")
    assert status == 0, out
    rows = {line.split()[1]: line for line in out.splitlines()[1:-1]}
    assert " precision " in rows["common::add_fp16_cast"]
    assert " precision " in rows["common::fuse_conv_batchnorm"] or " same " in rows["common::fuse_conv_batchnorm"]
    assert out.splitlines()[-1].startswith(f"no pass changed the outputs: {DEFAULT_LENGTH} passes")


# -- the committed reproducer ----------------------------------------------------------------
@pytest.mark.xfail(
    strict=True,
    reason="coremltools 9.0: common::const_elimination folds a slice of a "
    "concat's known part into an int32 const; this passes (and must be updated) once fixed",
)
def test_const_elimination_int32_reproducer_reports_fixed():
    result = subprocess.run([sys.executable, str(FIXTURE)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_const_elimination_int32_reproducer_shows_the_bug():
    result = subprocess.run([sys.executable, str(FIXTURE)], capture_output=True, text=True, timeout=300)
    if result.returncode == 0:
        pytest.skip("coremltools fixed const_elimination: the xfail above now fails; update the docs")
    assert result.returncode == 1, result.stderr
    assert "fp32[1]" in result.stdout and "after int32[1]" in result.stdout and "bug present" in result.stdout


# -- copying and evaluating ------------------------------------------------------------------
def test_copy_program_is_equivalent_and_independent():
    from mil_passes.package.io import copy_program
    from mil_passes.reference.equivalence import assert_equivalent

    prog = fp32_chain()
    before = str(prog)
    copied = copy_program(prog)
    assert copied is not prog and str(prog) == before
    assert_equivalent(prog, copied)
    verify_program(lambda: copied, ["common::noop_elimination"])  # the passes run on the copy
    assert str(prog) == before and len(str(copied)) < len(before)


def test_evaluate_vars_gives_every_value():
    from mil_passes.reference.interpreter import evaluate_vars

    prog = fp32_chain()
    x = np.array([[1, -2, 3], [0, 0.5, -1]], np.float32)
    values = {var.name: value for var, value in evaluate_vars(prog, {"x": x}).items()}
    relu = next(op for op in prog.functions["main"].operations if op.op_type == "relu").outputs[0].name
    np.testing.assert_array_equal(values[relu], np.maximum(x * 3, 0))
    np.testing.assert_allclose(values["out"], np.maximum(x * 3, 0) + 0.1 - 0.7, rtol=1e-6)


def test_run_pass_runs_a_registered_pass_with_the_pipelines_options():
    def build():
        @mb.program(input_specs=[mb.TensorSpec((2,))])
        def prog(x):
            folded = mb.add(x=np.ones(4, np.float32), y=np.float32(1.0), name="folded")
            return mb.add(x=x, y=mb.slice_by_size(x=folded, begin=[0], size=[2]), name="y")

        return prog

    name = "common::const_elimination"
    pipeline = resolve_pipeline(name)
    pipeline.set_options(name, {"skip_const_by_size": "1"})
    kept, folded = build(), build()
    assert run_pass(kept, name, pipeline) is None  # coremltools' own passes report nothing
    run_pass(folded, name)
    assert "add" in [op.op_type for op in kept.functions["main"].operations if op.name == "folded"]
    assert "folded" not in [op.name for op in folded.functions["main"].operations if op.op_type == "add"]

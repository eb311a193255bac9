"""Every model kind users ship (testing/models/kinds.py), through lint, optimize and verify: each keeps
its weight file sizes, functions, default function, interface and stages; verify passes on each."""

import json
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct

from mil_passes.cli import main
from mil_passes.package.files import pipeline_stages
from mil_passes.package.io import read
from mil_passes.reference import predict
from mil_passes.testing.models import kinds

MODEL = "Data/com.apple.CoreML/model.mlmodel"
WEIGHTS = "Data/com.apple.CoreML/weights"


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> dict[str, Path]:
    """Every kind, built once for the module."""
    folder = tmp_path_factory.mktemp("kinds")
    return {name: build(folder) for name, build in kinds.BUILDERS.items()}


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def spec_of(path: Path):
    return ct.models.MLModel(str(path), skip_model_load=True).get_spec()


def weight_sizes(path: Path) -> dict[str, int]:
    return {blob.name: blob.stat().st_size for blob in sorted((path / WEIGHTS).glob("*"))}


def interface(spec) -> dict:
    """What optimize must keep: the model's type, default function, each function's (or stage's)
    inputs, states and outputs with their types, and the pipeline's own description."""

    def described(description):
        features = lambda fs: [(f.name, f.type.SerializeToString()) for f in fs]  # noqa: E731
        return features(description.input), features(description.output), features(description.state)

    kind = spec.WhichOneof("Type")
    parts = pipeline_stages(spec) if kind.startswith("pipeline") else [spec]
    return {
        "kind": kind,
        "top": described(spec.description),
        "default": spec.description.defaultFunctionName,
        "functions": [(f.name, described(f)) for f in spec.description.functions],
        "stages": [
            (part.WhichOneof("Type"), described(part.description), sorted(part.mlProgram.functions)) for part in parts
        ],
        "classifier": (spec.description.predictedFeatureName, spec.description.predictedProbabilitiesName),
    }


@pytest.mark.parametrize("name", list(kinds.BUILDERS))
def test_optimize_keeps_weights_functions_and_interface(fixtures, name, tmp_path, capsys):
    source = fixtures[name]
    status, _, err = run(capsys, "optimize", source, "-o", tmp_path / "out.mlpackage", "--quiet")
    assert status in (0, 1) and err == ""
    written = tmp_path / "out.mlpackage"
    assert weight_sizes(written) == weight_sizes(source)
    assert interface(spec_of(written)) == interface(spec_of(source))


@pytest.mark.parametrize("name", list(kinds.BUILDERS))
def test_verify_passes_on_every_kind(fixtures, name, capsys):
    status, out, err = run(capsys, "verify", fixtures[name], "--quiet", "--feeds", "2")
    assert status == 0, out + err
    assert "no pass changed the outputs" in out


# --- multifunction ------------------------------------------------------------------------------


def test_a_multifunction_package_is_read_with_its_default_and_linted_per_function(fixtures, capsys):
    package = read(fixtures["multifunction"])
    assert list(package.program.functions) == ["prefill", "decode"]
    assert package.program.default_function_name == "decode"
    findings = package.lint()
    assert {f.function for f in findings} == {"prefill", "decode"}
    assert not any(f.rule == "duplicate-name" for f in findings)  # the same names in two functions are legal
    status, out, _ = run(capsys, "lint", fixtures["multifunction"], "--json")
    assert {f["function"] for f in json.loads(out)["findings"]} == {"prefill", "decode"}


def test_optimize_writes_a_shared_weight_once_and_points_both_functions_at_it(fixtures, tmp_path, capsys):
    run(capsys, "optimize", fixtures["multifunction"], "-o", tmp_path / "o.mlpackage", "--quiet")
    spec = spec_of(tmp_path / "o.mlpackage")
    offsets = {
        name: [
            value.blobFileValue.offset
            for op in function.block_specializations[function.opset].operations
            for value in op.attributes.values()
            if value.WhichOneof("value") == "blobFileValue"
        ]
        for name, function in spec.mlProgram.functions.items()
    }
    assert offsets["prefill"] == offsets["decode"] and len(offsets["decode"]) == 1


def test_weights_that_differ_stay_apart(tmp_path, capsys):
    ios18 = ct.target.iOS18
    ones = np.ones((kinds.FEATURES, kinds.FEATURES), np.float32)
    source = kinds._combine(
        tmp_path,
        "two",
        {
            "a": lambda: kinds._convert(kinds._linear_relu(1, ios18), ios18),
            "b": lambda: kinds._convert(kinds._linear_relu(1, ios18, ones), ios18),
        },
        default="a",
    )
    run(capsys, "optimize", source, "-o", tmp_path / "o.mlpackage", "--quiet")
    program = read(tmp_path / "o.mlpackage").program
    weights = {
        name: [op.outputs[0].val for op in func.operations if op.op_type == "const" and op.outputs[0].val.size > 10]
        for name, func in program.functions.items()
    }
    np.testing.assert_array_equal(weights["a"][0], kinds.SHARED_WEIGHT)
    np.testing.assert_array_equal(weights["b"][0], ones)
    assert weight_sizes(tmp_path / "o.mlpackage") == weight_sizes(source)


def test_verify_names_the_function_of_each_row_and_takes_one(fixtures, capsys):
    path = fixtures["stateful_multifunction"]
    status, out, _ = run(capsys, "verify", path, "--quiet", "--json", "--feeds", "1")
    rows = json.loads(out)["passes"]
    assert status == 0 and {row["function"] for row in rows} == {"prefill", "decode"}
    status, out, _ = run(capsys, "verify", path, "--quiet", "--function", "decode", "--feeds", "1")
    assert status == 0 and "function decode" in out.splitlines()[0]
    assert all("function 'decode'" in line for line in out.splitlines()[1:] if line.lstrip()[:1].isdigit())
    status, _, err = run(capsys, "verify", path, "--function", "nope")
    assert status == 2 and err.strip().endswith("the model has no function 'nope' (it has: prefill, decode)")


def test_a_stateful_multifunction_package_reads_each_functions_own_states(fixtures):
    package = read(fixtures["stateful_multifunction"])
    for func in package.program.functions.values():
        assert list(func.inputs) == ["kv", "x"]


# --- classifiers, optional inputs, images -------------------------------------------------------------


def test_predict_gives_a_classifiers_label_and_probabilities(fixtures):
    model = ct.models.MLModel(str(fixtures["classifier"]), skip_model_load=True)
    x = np.linspace(-1, 1, kinds.FEATURES, dtype=np.float32)[None]
    result = predict(model, {"x": x})
    probabilities = result["classLabel_probs"]
    assert list(probabilities) == list(kinds.LABELS)
    assert result["classLabel"] == max(probabilities, key=probabilities.get)
    assert sum(probabilities.values()) == pytest.approx(1, abs=1e-2)


def test_classify_kernel_takes_integer_classes_and_the_first_of_equal_probabilities():
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import mil_list

    from mil_passes.reference import evaluate

    @mb.program(input_specs=[mb.TensorSpec((1, 3))], opset_version=ct.target.iOS17)
    def prog(p):
        classes = mb.const(val=mil_list([np.int64(7), np.int64(8), np.int64(9)]))  # as coremltools adds them
        return mb.classify(probabilities=p, classes=classes)

    label, probabilities = evaluate(prog, {"p": np.array([[0.25, 0.5, 0.5]], np.float32)}).values()
    assert label == 8 and probabilities == {7: 0.25, 8: 0.5, 9: 0.5}


def test_predict_uses_the_declared_default_of_an_optional_input(fixtures):
    model = ct.models.MLModel(str(fixtures["optional_input"]), skip_model_load=True)
    x = np.arange(4, dtype=np.float32)[None]
    np.testing.assert_array_equal(predict(model, {"x": x})["y"], x * 0.5)
    np.testing.assert_array_equal(predict(model, {"x": x, "scale": np.full((1, 4), 2, np.float32)})["y"], x * 2)


def test_verify_takes_a_feed_file_without_the_optional_input(fixtures, tmp_path, capsys):
    np.savez(tmp_path / "feed.npz", x=np.ones((1, 4), np.float32))
    status, out, _ = run(capsys, "verify", fixtures["optional_input"], "--quiet", "--feeds", tmp_path / "feed.npz")
    assert status == 0 and f"feeds {tmp_path / 'feed.npz'}" in out.splitlines()[0]


@pytest.mark.parametrize("name", ["image_input", "classifier"])
def test_what_coremltools_adds_for_the_interface_is_info_with_the_reason(fixtures, name, capsys):
    findings = read(fixtures[name]).lint()
    added = [f for f in findings if "coremltools adds it for" in f.message]
    assert added and all(f.severity == "info" for f in added)
    status, _, _ = run(capsys, "lint", fixtures[name])
    assert status == 0


# --- pipelines --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["pipeline", "pipeline_classifier", "pipeline_regressor"])
def test_lint_names_each_ml_program_stage(fixtures, name):
    findings = read(fixtures[name]).lint()
    assert {f.stage for f in findings} == {"0", "1"}
    assert all(str(f).split("] ", 1)[1].startswith("stage ") for f in findings)


def test_a_neural_network_stage_is_named_with_what_to_do(fixtures, capsys):
    status, out, _ = run(capsys, "lint", fixtures["neural_network_pipeline"])
    line = next(line for line in out.splitlines() if "not-ml-program-stage" in line)
    assert line.startswith("warning: [not-ml-program-stage] stage 0: a neuralNetwork model, not an ML Program")
    assert "convert_to='mlprogram'" in line


def test_verify_names_the_stage_of_each_row(fixtures, capsys):
    status, out, _ = run(capsys, "verify", fixtures["pipeline_classifier"], "--quiet", "--json", "--feeds", "1")
    assert status == 0 and {row["stage"] for row in json.loads(out)["passes"]} == {"0", "1"}


def test_a_pipeline_without_an_ml_program_is_refused_naming_its_kind(tmp_path, capsys):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    def network(name_in, name_out):
        builder = NeuralNetworkBuilder([(name_in, datatypes.Array(2))], [(name_out, datatypes.Array(2))])
        builder.add_activation("relu", "RELU", name_in, name_out)
        return ct.models.MLModel(builder.spec, skip_model_load=True)

    path = tmp_path / "p.mlpackage"
    ct.utils.make_pipeline(network("x", "h"), network("h", "y")).save(str(path))
    for command in (["lint", path], ["optimize", path, "-o", tmp_path / "o.mlpackage"], ["verify", path]):
        status, out, err = run(capsys, *command)
        assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "a pipeline model without an ML Program stage (neuralNetwork, neuralNetwork)" in err
    assert not (tmp_path / "o.mlpackage").exists()


def test_a_function_view_is_the_function_itself_under_main(fixtures):
    from mil_passes.package.functions import default_function, function_view, is_multifunction, put_back

    program = read(fixtures["multifunction"]).program
    view = function_view(program, "prefill")
    assert list(view.functions) == ["main"] and view.functions["main"] is program.functions["prefill"]
    put_back(program, "prefill", view)
    assert list(program.functions) == ["prefill", "decode"] and default_function(program) == "decode"
    assert is_multifunction(program)
    with pytest.raises(KeyError, match="no function 'main' .*prefill, decode"):
        function_view(program, "main")


def test_reports_and_placements_of_several_functions_are_summed(fixtures):
    from collections import Counter

    from mil_passes.package.functions import merged_placement
    from mil_passes.package.optimize import merged_report
    from mil_passes.runner import run_passes

    package = read(fixtures["pipeline"])
    reports = [run_passes(stage.package.program, ["webnn::fold_shape_ops"]) for stage in package.stages]
    merged = merged_report(reports)
    assert merged.ops_before == sum((r.ops_before for r in reports), Counter())
    assert [run.name for run in merged.passes] == [run.name for run in reports[0].passes]
    placements = [stage.package.lint_report()[1] for stage in package.stages]
    merged_places = merged_placement(placements)
    assert merged_places.ops == sum(p.ops for p in placements) and merged_places.chips == placements[0].chips
    assert merged_places.segments == placements[0].segments + placements[1].segments
    rules = {rule for p in placements for rule in p.off_rules}
    assert merged_places.off_rules == {rule: sum(p.off_rules.get(rule, 0) for p in placements) for rule in rules}

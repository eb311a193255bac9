"""The mil-passes command: lint, optimize, list, demo; every error path ends in one line and
exit status 2 with nothing written and the input unchanged."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct
from coremltools import proto
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

from mil_passes import PASS_NAMES
from mil_passes.package import io as mlpackage
from mil_passes.schedule import PIPELINE_ORDER
from mil_passes.cli import main, progress_enabled
from mil_passes.examples import streaming_cache_program
from mil_passes.lint.placement import RULES as PLACEMENT_RULES
from mil_passes.testing.models import handwritten as hand
from mil_passes.testing.check import assert_equivalent

MODEL = "Data/com.apple.CoreML/model.mlmodel"
WEIGHTS = "Data/com.apple.CoreML/weights/weight.bin"
REFUSED = "ane-refused-slice-of-concat"
PLACEMENT_RULE_IDS = {rule.id for rule in PLACEMENT_RULES}


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def tree_digest(path: Path) -> str:
    """Names, contents and symlink targets of everything under ``path``."""
    digest = hashlib.sha256()
    if path.is_file() or path.is_symlink():
        items = [path]
    else:
        items = sorted(p for p in path.rglob("*"))
    for item in items:
        digest.update(str(item.relative_to(path.parent)).encode())
        if item.is_symlink():
            digest.update(os.readlink(item).encode())
        elif item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    """The streaming-cache example, 24 layers (8 channels keep it quick)."""
    path = tmp_path_factory.mktemp("streaming") / "streaming.mlpackage"
    return mlpackage.save(streaming_cache_program(layers=24, channels=8), path)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A two-layer package with its conv weights in weight.bin: the base of the broken ones."""
    path = tmp_path_factory.mktemp("small") / "small.mlpackage"
    return mlpackage.save(streaming_cache_program(layers=2, channels=8), path)


# -- lint and optimize on the streaming-cache example -------------------------------------------


def test_lint_reports_the_24_refused_windows_and_exits_1(streaming, capsys):
    status, out, err = run(capsys, "lint", streaming)
    assert status == 1 and err == ""
    lines = out.strip().splitlines()
    (grouped,) = [line for line in lines if line.startswith(f"error: [{REFUSED}]")]
    assert grouped.startswith(f"error: [{REFUSED}] 24 slice_by_index: ") and len(grouped) <= 200
    assert "placement on every chip from M1/A14: 99 ops, 99 off the Neural Engine" in out
    assert lines[-1] == f"{streaming}: 24 errors, 0 warnings, 4 infos; --all lists each"

    status, out, _ = run(capsys, "lint", streaming, "--all")
    assert sum(line.startswith(f"error: [{REFUSED}]") for line in out.splitlines()) == 24
    assert "slice_by_index 'layer0_next_cache' cuts [7:15] (offset 7, width 8)" in out

    status, out, _ = run(capsys, "lint", streaming, "--json")
    document = json.loads(out)
    assert status == 1
    assert document["schema"] == "mil-passes/lint/2" and document["path"] == str(streaming)
    assert document["counts"] == {"error": 24, "warning": 0, "info": 4}
    assert set(document["findings"][0]) == {"rule", "severity", "op", "message", "fix"}
    refused = [f for f in document["findings"] if f["rule"] == REFUSED]
    assert len(refused) == 24 and {f["fix"] for f in refused} == {"webnn::concat_slice_to_slice_concat"}
    placement = document["placement"]
    assert (placement["ops"], placement["off_ane"], placement["segments"]) == (99, 99, 1)


def test_optimize_fixes_the_windows_and_the_result_lints_clean(streaming, tmp_path, capsys):
    fixed = tmp_path / "fixed.mlpackage"
    before = tree_digest(streaming)
    status, out, err = run(capsys, "optimize", streaming, "-o", fixed)
    assert status == 0 and err == ""  # stdout is not a terminal: no progress bar
    assert out.startswith(f"optimize {streaming} -> {fixed}")
    assert f"finding {REFUSED}      24      0" in out
    assert "webnn::concat_slice_to_slice_concat" in out
    assert "findings left:\n  info: [ane-last-axis-padding] 4 places" in out  # an 8-wide cache: a cost
    assert tree_digest(streaming) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.mlpackage"]  # no staging left

    status, out, _ = run(capsys, "lint", fixed)
    assert status == 0 and out.strip().endswith(f"{fixed}: 0 errors, 0 warnings, 4 infos; --all lists each")
    assert (
        "placement on every chip from M1/A14: 123 ops, 123 off the Neural Engine (ane-small-graph 123) [123 by cost]"
        in out
    )
    assert_equivalent(mlpackage.load(streaming), mlpackage.load(fixed), trials=2)


def test_optimize_json_is_the_documented_schema(streaming, tmp_path, capsys):
    status, out, _ = run(capsys, "optimize", streaming, "-o", tmp_path / "fixed.mlpackage", "--json")
    document = json.loads(out)
    assert status == 0
    assert list(document) == ["schema", "input", "output", "seconds", "ops", "findings", "passes"]
    assert document["schema"] == "mil-passes/optimize/1"
    assert document["ops"]["before"]["concat"] == 24 and document["ops"]["after"]["concat"] == 48
    assert sum(f["rule"] == REFUSED for f in document["findings"]["before"]) == 24
    assert {f["rule"] for f in document["findings"]["after"]} == {"ane-last-axis-padding"}
    assert [p["name"] for p in document["passes"]] == list(PIPELINE_ORDER) + ["common::dead_code_elimination"]
    concat_pass = document["passes"][PIPELINE_ORDER.index("webnn::concat_slice_to_slice_concat")]
    assert concat_pass["rewritten"] == 24
    assert set(concat_pass) == {"name", "seconds", "rewritten", "refusals"}


def test_pass_option_runs_only_the_named_passes(streaming, tmp_path, capsys):
    out_path = tmp_path / "renamed.mlpackage"
    status, out, _ = run(
        capsys, "optimize", streaming, "-o", out_path, "--pass", "rename_duplicate_temporaries", "--json"
    )
    document = json.loads(out)
    assert status == 1  # written, but the refused windows are still there
    assert [p["name"] for p in document["passes"]] == [
        "webnn::rename_duplicate_temporaries",
        "common::dead_code_elimination",
    ]
    assert sum(f["rule"] == REFUSED for f in document["findings"]["after"]) == 24
    assert out_path.is_dir()


def window_of_runtime_concat():
    """The concat pass refuses this window: one concat input has a run-time size."""
    frames = get_new_symbol()

    specs = [mb.TensorSpec((1, 4, 8), dtype=types.fp16), mb.TensorSpec((1, 4, frames), dtype=types.fp16)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS17)
    def prog(cache, x):
        joined = mb.concat(values=(cache, x), axis=-1, name="joined")
        window = mb.slice_by_index(
            x=joined, begin=[0, 0, 7], end=[0, 0, 15], end_mask=[True, True, False], name="window"
        )
        return mb.stack(values=(window, window), axis=0, name="out")

    return prog


def test_explain_says_why_each_refused_match_was_left(tmp_path, capsys):
    source = mlpackage.save(window_of_runtime_concat(), tmp_path / "runtime.mlpackage")
    status, out, _ = run(capsys, "optimize", source, "-o", tmp_path / "out.mlpackage", "--explain")
    assert status == 0
    assert "webnn::concat_slice_to_slice_concat left 1 unchanged:" in out
    assert "  slice_by_index 'window': concat input 'x' has a run-time size on axis 2" in out
    assert "info: [slice-of-concat] slice_by_index 'window': concat input 'x' has a run-time size" in out


def test_verbose_says_the_configuration_and_logs_each_refused_match(tmp_path, capsys):
    source = mlpackage.save(window_of_runtime_concat(), tmp_path / "runtime.mlpackage")
    for _ in range(2):  # the log goes to stderr once per run, however many runs a process makes
        status, out, err = run(capsys, "optimize", source, "-o", tmp_path / "out.mlpackage", "--force", "-v")
        assert status == 0 and "webnn::concat_slice_to_slice_concat left 1 unchanged" not in out
        assert err.splitlines()[0] == f"mil-passes: {source}: no configuration file; compute units all"
        refused = [line for line in err.splitlines() if "left slice_by_index 'window'" in line]
        runs = PIPELINE_ORDER.count("webnn::concat_slice_to_slice_concat")  # once per run of the pass
        assert (
            refused
            == [
                "mil-passes: webnn::concat_slice_to_slice_concat left slice_by_index 'window': "
                "concat input 'x' has a run-time size on axis 2"
            ]
            * runs
        )
    assert run(capsys, "optimize", source, "-o", tmp_path / "out.mlpackage", "--force")[2] == ""


def test_webnn_package_is_reported_then_fixed(tmp_path, capsys):
    """Duplicated bool temporaries and a cast to bool before select, as a WebNN converter writes."""
    f32, b, u8 = (hand.tensor_type(d, (2, 2)) for d in ("fp32", "bool", "uint8"))
    ops = [
        hand.const("uint8_name", np.array("uint8")),
        hand.const("bool_name", np.array("bool")),
        hand.const("one", np.float32(1)),
        hand.const("zero", np.float32(0)),
        hand.operation("greater", [("t_bool", b)], {"x": "x", "y": "y"}),
        hand.operation("cast", [("t", u8)], {"x": "t_bool", "dtype": "uint8_name"}),
        hand.operation("cast", [("t_bool", b)], {"x": "t", "dtype": "bool_name"}),
        hand.operation("select", [("out", f32)], {"cond": "t_bool", "a": "one", "b": "zero"}),
    ]
    source = hand.write_package(hand.ml_program([("x", f32), ("y", f32)], ops, ["out"]), tmp_path / "w.mlpackage")
    status, out, _ = run(capsys, "lint", source, "--json")
    rules = [f["rule"] for f in json.loads(out)["findings"] if f["rule"] not in PLACEMENT_RULE_IDS]
    assert status == 1 and rules == ["duplicate-name", "non-bool-condition", "bool-simplification"]

    fixed = tmp_path / "fixed.mlpackage"
    status, out, _ = run(capsys, "optimize", source, "-o", fixed, "--json")
    document = json.loads(out)
    assert status == 1  # written; the fp32 ops stay off the Neural Engine (ane-fp32-compute)
    assert {f["rule"] for f in document["findings"]["after"]} == {"ane-fp32-compute", "ane-last-axis-padding"}
    assert [f["rule"] for f in document["findings"]["before"] if f["rule"] not in PLACEMENT_RULE_IDS] == [
        "duplicate-name",
        "non-bool-condition",
        "bool-simplification",
    ]
    assert run(capsys, "lint", fixed)[0] == 1  # ane-fp32-compute
    assert_equivalent(mlpackage.load(source), mlpackage.load(fixed), trials=3)


# -- where the output goes ----------------------------------------------------------------------


def test_existing_output_and_the_input_are_not_overwritten_without_force(small, tmp_path, capsys):
    source = tmp_path / "in.mlpackage"
    shutil.copytree(small, source)
    existing = mlpackage.save(window_of_runtime_concat(), tmp_path / "existing.mlpackage")
    digests = {p: tree_digest(p) for p in (source, existing)}

    status, out, err = run(capsys, "optimize", source, "-o", existing)
    assert (status, out) == (2, "")
    assert err == f"mil-passes: error: {existing}: already exists (--force replaces it)\n"
    status, _, err = run(capsys, "optimize", source, "-o", source)
    assert status == 2 and "is the input; refusing to overwrite it (--force replaces it)" in err
    assert {p: tree_digest(p) for p in digests} == digests

    assert run(capsys, "optimize", source, "-o", existing, "--force")[0] == 0
    assert mlpackage.read(existing).program.functions["main"].inputs.keys() == {"cache", "x"}
    assert run(capsys, "optimize", source, "-o", source, "--force")[0] == 0
    assert run(capsys, "lint", source)[0] == 0  # fixed in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.mlpackage", "in.mlpackage"]


@pytest.mark.parametrize(
    "output, message",
    [
        ("out.mlmodel", r"out.mlmodel: an ML Program is written as a folder named \*.mlpackage"),
        ("missing/out.mlpackage", r"out.mlpackage: the folder '.*missing' does not exist"),
        ("folder.mlpackage", r"folder.mlpackage: exists and is not an .mlpackage; not replacing it"),
        ("in.mlpackage/Data/out.mlpackage", r"out.mlpackage: lies inside .*in.mlpackage or contains it"),
    ],
)
def test_bad_output_paths(small, tmp_path, capsys, output, message):
    source = tmp_path / "in.mlpackage"
    shutil.copytree(small, source)
    (tmp_path / "folder.mlpackage").mkdir()
    (tmp_path / "folder.mlpackage" / "notes.txt").write_text("mine")
    before = tree_digest(tmp_path)
    status, out, err = run(capsys, "optimize", source, "-o", tmp_path / output, "--force")
    assert (status, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("mil-passes: error: ")
    assert re.search(message, err), err
    assert tree_digest(tmp_path) == before


def test_unknown_pass_writes_nothing(small, tmp_path, capsys):
    status, out, err = run(capsys, "optimize", small, "-o", tmp_path / "out.mlpackage", "--pass", "nope")
    assert (status, out) == (2, "")
    assert err.startswith("mil-passes: error: unknown pass 'nope' (the package's passes: webnn::")
    assert list(tmp_path.iterdir()) == []


# -- models that cannot be read -----------------------------------------------------------------


def _edit_spec(path: Path, edit) -> None:
    spec = proto.Model_pb2.Model()
    spec.ParseFromString((path / MODEL).read_bytes())
    edit(spec)
    (path / MODEL).write_bytes(spec.SerializeToString())


def _first_blob(spec):
    block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
    op = next(op for op in block.operations if op.type == "const" and op.attributes["val"].HasField("blobFileValue"))
    return op.attributes["val"]


def _manifest(path: Path, model_path: str) -> None:
    manifest = json.loads((path / "Manifest.json").read_text())
    entry = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
    entry["path"] = model_path
    (path / "Manifest.json").write_text(json.dumps(manifest))


def missing(pkg, outside):
    shutil.rmtree(pkg)
    return pkg, "no such file or directory"


def plain_folder(pkg, outside):
    shutil.rmtree(pkg / "Data")
    (pkg / "Manifest.json").unlink()
    (pkg / "readme.txt").write_text("hello")
    return pkg, "a folder without Manifest.json, not an .mlpackage"


def manifest_not_json(pkg, outside):
    (pkg / "Manifest.json").write_text("{not json")
    return pkg, "Manifest.json is not valid JSON"


def corrupt_protobuf(pkg, outside):
    (pkg / MODEL).write_bytes(b"not a protobuf at all")
    return pkg, r"model file 'Data/com.apple.CoreML/model.mlmodel' is not a Core ML protobuf \(corrupt or truncated"


def truncated(fraction):
    def make(pkg, outside):
        data = (pkg / MODEL).read_bytes()
        (pkg / MODEL).write_bytes(data[: int(len(data) * fraction)] if fraction < 1 else data[:-1])
        return pkg, r"truncated"

    make.__name__ = f"truncated_{fraction}"
    return make


def empty_model_file(pkg, outside):
    (pkg / MODEL).write_bytes(b"")
    return pkg, "model file 'Data/com.apple.CoreML/model.mlmodel' is empty"


def neural_network_mlmodel(pkg, outside):
    spec = proto.Model_pb2.Model(specificationVersion=4)
    spec.description.input.add().name = "x"
    spec.neuralNetwork.SetInParent()
    path = pkg.parent / "classic.mlmodel"
    path.write_bytes(spec.SerializeToString())
    return path, "a neuralNetwork model, not an ML Program; reconvert it with convert_to='mlprogram'"


def neural_network_package(pkg, outside):
    spec = proto.Model_pb2.Model(specificationVersion=4)
    spec.neuralNetwork.SetInParent()
    (pkg / MODEL).write_bytes(spec.SerializeToString())
    return pkg, "a neuralNetwork model, not an ML Program"


def missing_weight_file(pkg, outside):
    (pkg / WEIGHTS).unlink()
    return pkg, "weight file 'weights/weight.bin' is missing"


def manifest_to_outside(pkg, outside):
    (outside / "model.mlmodel").write_bytes((pkg / MODEL).read_bytes())  # a valid model out there
    _manifest(pkg, "../../../outside/model.mlmodel")
    return pkg, r"Manifest.json entry '.*' '../../../outside/model.mlmodel' leads outside the package; refusing"


def manifest_absolute(pkg, outside):
    (outside / "model.mlmodel").write_bytes((pkg / MODEL).read_bytes())
    _manifest(pkg, str(outside / "model.mlmodel"))
    return pkg, "Manifest.json entry '.*' is an absolute path '/.*model.mlmodel'; refusing to follow it"


def symlinked_weight_file(pkg, outside):
    shutil.copy(pkg / WEIGHTS, outside / "weight.bin")
    (pkg / WEIGHTS).unlink()
    (pkg / WEIGHTS).symlink_to(outside / "weight.bin")
    return pkg, "weight file 'weight.bin' goes through the symlink 'Data/com.apple.CoreML/weights/weight.bin'"


def symlinked_data_folder(pkg, outside):
    shutil.move(pkg / "Data", outside / "Data")
    (pkg / "Data").symlink_to(outside / "Data")
    return pkg, "the root model goes through the symlink 'Data'; refusing to follow it"


def symlinked_manifest(pkg, outside):
    shutil.move(pkg / "Manifest.json", outside / "Manifest.json")
    (pkg / "Manifest.json").symlink_to(outside / "Manifest.json")
    return pkg, "Manifest.json is a symlink; refusing to follow it"


def symlinked_weights_folder(pkg, outside):
    weights = pkg / "Data/com.apple.CoreML/weights"
    shutil.move(weights, outside / "weights")
    weights.symlink_to(outside / "weights")
    return pkg, "the weights folder goes through the symlink 'Data/com.apple.CoreML/weights'"


def model_path_is_a_folder(pkg, outside):
    _manifest(pkg, "com.apple.CoreML")
    return pkg, "model file 'Data/com.apple.CoreML' is not a regular file"


def weight_offset_past_the_end(pkg, outside):
    size = (pkg / WEIGHTS).stat().st_size
    _edit_spec(pkg, lambda spec: setattr(_first_blob(spec).blobFileValue, "offset", size + 64))
    return pkg, (
        rf"const '\w+' \(val\) in function 'main' reads offset {size + 64} of weight file "
        rf"'weights/weight.bin' \({size} bytes\): not a blob position"
    )


def weight_data_past_the_end(pkg, outside):
    data = (pkg / WEIGHTS).read_bytes()
    (pkg / WEIGHTS).write_bytes(data[:-40])
    return pkg, r"bytes at offset \d+ of weight file 'weights/weight.bin', past its end"


def weight_offset_not_a_blob(pkg, outside):
    _edit_spec(pkg, lambda spec: setattr(_first_blob(spec).blobFileValue, "offset", 128))
    return pkg, "reads offset 128 of weight file 'weights/weight.bin', where no blob starts"


def weight_size_not_the_declared(pkg, outside):
    def grow(spec):
        value = _first_blob(spec)
        value.type.tensorType.dimensions[0].constant.size *= 2

    _edit_spec(pkg, grow)
    return pkg, r"declares 288 bytes of weights, but its blob in weight file 'weights/weight.bin' holds 144"


def weight_reference_climbing_out(pkg, outside):
    shutil.copy(pkg / WEIGHTS, outside / "weight.bin")
    name = "@model_path/weights/../../../../outside/weight.bin"
    _edit_spec(pkg, lambda spec: setattr(_first_blob(spec).blobFileValue, "fileName", name))
    return pkg, r"weight reference '@model_path/weights/../../../../outside/weight.bin' of const .* refusing to follow"


def weight_reference_absolute(pkg, outside):
    shutil.copy(pkg / WEIGHTS, outside / "weight.bin")
    name = str(outside / "weight.bin")
    _edit_spec(pkg, lambda spec: setattr(_first_blob(spec).blobFileValue, "fileName", name))
    return pkg, "weight reference '/.*weight.bin' of const .* is not a file in @model_path/weights/"


def op_coremltools_does_not_know(pkg, outside):
    def rename(spec):
        block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
        next(op for op in block.operations if op.type == "transpose").type = "frobnicate"

    _edit_spec(pkg, rename)
    return pkg, "coremltools cannot build the program: .*frobnicate"


BROKEN = [
    missing,
    plain_folder,
    manifest_not_json,
    corrupt_protobuf,
    truncated(0.5),
    truncated(0.9),
    truncated(1),
    empty_model_file,
    neural_network_mlmodel,
    neural_network_package,
    missing_weight_file,
    manifest_to_outside,
    manifest_absolute,
    symlinked_weight_file,
    symlinked_data_folder,
    symlinked_manifest,
    symlinked_weights_folder,
    model_path_is_a_folder,
    weight_offset_past_the_end,
    weight_data_past_the_end,
    weight_offset_not_a_blob,
    weight_size_not_the_declared,
    weight_reference_climbing_out,
    weight_reference_absolute,
    op_coremltools_does_not_know,
]


@pytest.mark.parametrize("breakage", BROKEN, ids=[b.__name__ for b in BROKEN])
def test_unreadable_models_get_one_line_and_exit_2(small, tmp_path, capsys, monkeypatch, breakage):
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir(), outside.mkdir()
    package = work / "model.mlpackage"
    shutil.copytree(small, package)
    source, message = breakage(package, outside)
    # Named from tmp_path: a line over 300 characters is cut in the middle, and tmp_path's own length
    # varies (an xdist worker's has a popen-gwN folder more, pytest-N grows a digit).
    monkeypatch.chdir(tmp_path)
    source = source.relative_to(tmp_path)
    before = tree_digest(tmp_path)
    output = work / "fixed.mlpackage"
    for argv in (["lint", source], ["lint", source, "--json"], ["optimize", source, "-o", output, "--force"]):
        status, out, err = run(capsys, *argv)
        assert (status, out) == (2, ""), err
        assert len(err.splitlines()) == 1 and err.startswith(f"mil-passes: error: {source}: "), err
        assert re.search(message, err), err
    assert not output.exists()
    assert tree_digest(tmp_path) == before  # the input, and everything around it, unchanged


def test_coremltools_follows_a_manifest_out_of_the_package(small, tmp_path, capsys):
    """docs/evidence.md §3, the reason for the checks above: MLModel loads the model outside."""
    package, outside = tmp_path / "work" / "model.mlpackage", tmp_path / "outside"
    shutil.copytree(small, package), outside.mkdir()
    manifest_to_outside(package, outside)
    (package / MODEL).unlink()
    assert ct.models.MLModel(str(package), skip_model_load=True).get_spec().WhichOneof("Type") == "mlProgram"
    assert run(capsys, "lint", package)[0] == 2


# -- list, demo, the console script --------------------------------------------------------------


def test_list_gives_each_pass_in_pipeline_order_with_a_line_about_it(capsys):
    status, out, _ = run(capsys, "list")
    lines = out.strip().splitlines()
    assert status == 0 and [line.split()[0] for line in lines] == list(PASS_NAMES)
    assert all(len(line.split()) > 1 for line in lines)


def test_demo_goes_through_optimize(tmp_path, capsys):
    status, out, _ = run(capsys, "demo", "--output", tmp_path, "--layers", "3", "--channels", "8")
    assert status == 0
    source, fixed = tmp_path / "streaming_cache.mlpackage", tmp_path / "streaming_cache_fixed.mlpackage"
    assert f"optimize {source} -> {fixed}" in out
    assert "windows the Neural Engine refuses: 3 before, 0 after" in out and "bit-identical" in out
    assert run(capsys, "lint", fixed)[0] == 0


def test_progress_bar_only_for_a_terminal():
    class Terminal:
        def isatty(self):
            return True

    assert progress_enabled(False, Terminal())
    assert not progress_enabled(True, Terminal())
    assert not progress_enabled(False, open(os.devnull, "w"))


def test_console_script(streaming):
    script = Path(sys.executable).parent / "mil-passes"
    result = subprocess.run([script, "lint", streaming, "--json"], capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["counts"]["error"] == 24
    assert "Traceback" not in result.stderr


# -- symbolic link loops ------------------------------------------------------------------------


def test_symbolic_link_loops_are_named_as_such(small, tmp_path, capsys):
    (tmp_path / "a.mlpackage").symlink_to(tmp_path / "b.mlpackage")
    (tmp_path / "b.mlpackage").symlink_to(tmp_path / "a.mlpackage")
    loop = tmp_path / "a.mlpackage"
    assert run(capsys, "lint", loop) == (2, "", f"mil-passes: error: {loop}: a symbolic link loop\n")
    for force in ([], ["--force"]):
        status, out, err = run(capsys, "optimize", loop, "-o", tmp_path / "out.mlpackage", *force)
        assert (status, err) == (2, f"mil-passes: error: {loop}: a symbolic link loop\n")
        status, out, err = run(capsys, "optimize", small, "-o", loop, *force)
        assert (status, err) == (2, f"mil-passes: error: {loop}: a symbolic link loop; not writing there\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mlpackage", "b.mlpackage"]


# -- the report is the written file's ----------------------------------------------------------


def while_loop_holding_a_cond():
    """The builder's own names: the loop's initial value is ``const_0``, the name the milproto
    loader also gives the stand-in parent of a nested block in a fresh process."""

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=ct.target.iOS17)
    def prog(x):
        def body(i, v):
            grown = mb.cond(
                pred=mb.greater(x=i, y=1.0), _true_fn=lambda: mb.add(x=v, y=1.0), _false_fn=lambda: mb.mul(x=v, y=2.0)
            )
            return mb.add(x=i, y=1.0), grown

        _, out = mb.while_loop(
            _cond=lambda i, v: mb.less(x=i, y=3.0), _body=body, loop_vars=(mb.const(val=np.float32(0)), x)
        )
        return mb.identity(x=out, name="out")

    return prog


def fresh_cli(*argv) -> subprocess.CompletedProcess:
    """The command in a process of its own (coremltools' name counters start at 0)."""
    return subprocess.run([sys.executable, "-m", "mil_passes.cli", *map(str, argv)], capture_output=True, text=True)


def test_optimize_reports_the_findings_lint_finds_in_the_written_file(tmp_path):
    source = mlpackage.save(while_loop_holding_a_cond(), tmp_path / "loop.mlpackage")
    output = tmp_path / "fixed.mlpackage"
    optimized = fresh_cli("optimize", source, "-o", output, "--json")
    assert optimized.returncode == 1, optimized.stderr  # the fp32 loop stays off the Neural Engine
    report = json.loads(optimized.stdout)
    for path, findings in ((source, report["findings"]["before"]), (output, report["findings"]["after"])):
        linted = fresh_cli("lint", path, "--json")
        assert linted.returncode == 1, linted.stderr
        assert json.loads(linted.stdout)["findings"] == findings
        assert "duplicate-name" not in {f["rule"] for f in findings}  # no const_0 twice: the file has one
    assert report["ops"]["after"] == {
        "add": 2, "cond": 1, "greater": 1, "identity": 1, "less": 1, "mul": 1, "while_loop": 1
    }  # fmt: skip

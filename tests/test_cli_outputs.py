"""--output-format github and sarif, validated against their grammar and schema; JSON of several
inputs; many inputs: folders searched, a path inside a package counted once, one summary line, the
worst exit status; optimize -o DIR and --in-place."""

import json
import re
import shutil
from pathlib import Path

import pytest

from mil_passes.cli import main
from mil_passes.cli.github import escape_data, escape_property, workflow_commands
from mil_passes.cli.inputs import expand
from mil_passes.cli.sarif import artifact_uri, sarif_log
from mil_passes.examples import streaming_cache_program
from mil_passes.lint import Finding
from mil_passes.package import io as mlpackage
from mil_passes.package.errors import PackageError

# The OASIS SARIF TC's JSON schema of SARIF 2.1.0 (errata 01), as published in oasis-tcs/sarif-spec
# (sarif-2.1/schema/sarif-schema-2.1.0.json), unchanged.
SARIF_SCHEMA = Path(__file__).resolve().parent / "fixtures" / "sarif-schema-2.1.0.json"
REFUSED, FP32 = "ane-refused-slice-of-concat", "ane-fp32-compute"
# GitHub's workflow command: ::command key=value,key=value::message, values escaped as the Actions
# toolkit escapes them (docs.github.com, "Workflow commands for GitHub Actions"; toolkit command.ts).
WORKFLOW_COMMAND = re.compile(r"::(error|warning|notice) file=([^,:\r\n]+),title=([^,:\r\n]+)::([^\r\n]*)")


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A folder: an fp16 package (refused windows), an fp32 one below a subfolder, and a text file."""
    root = tmp_path_factory.mktemp("models")
    (root / "sub").mkdir()
    mlpackage.save(streaming_cache_program(layers=2, channels=8), root / "a.mlpackage")
    mlpackage.save(streaming_cache_program(layers=2, channels=8, dtype="fp32"), root / "sub" / "b.mlpackage")
    (root / "notes.txt").write_text("not a model")
    return root


def test_github_output_is_one_valid_workflow_command_per_finding(models, capsys):
    status, out, err = run(capsys, "lint", models, "--output-format", "github")
    assert status == 1 and err == ""
    lines = out.splitlines()
    assert all(WORKFLOW_COMMAND.fullmatch(line) for line in lines), lines
    _, document, _ = run(capsys, "lint", models, "--json")
    expected = sum(len(d["findings"]) for d in json.loads(document))
    assert len(lines) == expected
    first = WORKFLOW_COMMAND.fullmatch(lines[0])
    assert first.groups()[:3] == ("error", str(models / "a.mlpackage"), REFUSED)
    assert {WORKFLOW_COMMAND.fullmatch(line).group(1) for line in lines} == {"error", "notice"}


def test_github_escapes_what_would_break_a_command():
    finding = Finding("duplicate-name", "warning", "x", "100% a:b,c\nd\x1b", None)
    (line,) = workflow_commands([("dir,1/m:1.mlpackage", [finding])])
    assert line == "::warning file=dir%2C1/m%3A1.mlpackage,title=duplicate-name::100%25 a:b,c\\nd\\x1b"
    assert WORKFLOW_COMMAND.fullmatch(line)
    assert escape_data("a\r\n%") == "a%0D%0A%25" and escape_property("a:b,c") == "a%3Ab%2Cc"


def test_sarif_output_validates_against_the_sarif_2_1_0_schema(models, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    status, out, err = run(capsys, "lint", models, "--output-format", "sarif", "--ignore", "ane-last")
    assert status == 1 and err == ""
    log = json.loads(out)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    (sarif_run,) = log["runs"]
    rules = sarif_run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [REFUSED, FP32]
    assert rules[1]["properties"]["confidence"] and rules[1]["defaultConfiguration"]["level"] == "error"
    results = sarif_run["results"]
    assert len(results) == 2 + 2 + 11
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    first = results[0]["locations"][0]
    assert first["physicalLocation"]["artifactLocation"]["uri"] == artifact_uri(models / "a.mlpackage")
    assert first["logicalLocations"] == [{"name": "layer0_next_cache", "kind": "member"}]


def test_sarif_of_optimize_locates_what_is_left_in_the_written_packages(models, tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    status, out, _ = run(capsys, "optimize", models, "-o", tmp_path, "--output-format", "sarif", "--ignore", "ane-last")
    log = json.loads(out)
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    results = log["runs"][0]["results"]
    assert status == 1 and {r["ruleId"] for r in results} == {FP32}
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {
        artifact_uri(tmp_path / "b.mlpackage")
    }


def test_sarif_uris_and_an_empty_log():
    assert artifact_uri(Path("my models/a.mlpackage")) == "my%20models/a.mlpackage"
    assert artifact_uri(Path("/m/a.mlpackage")) == "file:///m/a.mlpackage"
    assert sarif_log([])["runs"][0]["results"] == []


# -- many inputs -----------------------------------------------------------------------------------


def test_expand_finds_models_below_folders_and_counts_a_package_once(models, tmp_path):
    a, b = models / "a.mlpackage", models / "sub" / "b.mlpackage"
    assert expand([models]) == [a, b]
    inside = [a / "Manifest.json", a / "Data" / "com.apple.CoreML" / "model.mlmodel", a, models / "sub"]
    assert expand(inside) == [a, b]
    assert expand([models / "missing.mlmodel"]) == [models / "missing.mlmodel"]  # the reader says what is wrong
    with pytest.raises(PackageError, match="no .mlpackage or .mlmodel below this folder"):
        expand([tmp_path])


def test_several_inputs_end_with_one_summary_line_and_the_worst_status(models, capsys):
    a = models / "a.mlpackage"
    status, out, err = run(capsys, "lint", a / "Manifest.json", a / "Data", models / "sub")
    lines = out.splitlines()
    assert status == 1 and err == ""
    assert sum(line.startswith("placement") for line in lines) == 2  # a counted once
    assert lines[-1] == "lint: 2 models; 15 errors, 0 warnings, 8 infos"
    status, out, err = run(capsys, "lint", a, models / "missing.mlpackage", "--ignore", "ane-")
    assert status == 2 and err.startswith(f"mil-passes: error: {models / 'missing.mlpackage'}: ")
    assert out.splitlines()[-1] == "lint: 2 models, 1 could not be read; 0 errors, 0 warnings, 0 infos"
    status, out, _ = run(capsys, "lint", models, "--json")
    assert status == 1 and [d["path"] for d in json.loads(out)] == [str(a), str(models / "sub" / "b.mlpackage")]
    status, out, _ = run(capsys, "lint", a, models / "missing.mlpackage", "--json")
    assert status == 2 and [d["path"] for d in json.loads(out)] == [str(a)]  # a list for several inputs


def test_quiet_with_several_inputs_names_the_model_of_each_line(models, tmp_path, capsys):
    a, b = models / "a.mlpackage", models / "sub" / "b.mlpackage"
    status, out, _ = run(capsys, "lint", models, "-q", "--select", "ane-refused")
    assert status == 1 and [line.split(": error: ")[0] for line in out.splitlines()] == [str(a), str(b)]
    status, out, _ = run(capsys, "optimize", models, "-o", tmp_path, "-q", "--select", FP32)
    assert status == 1 and out.splitlines() == [line for line in out.splitlines() if line.startswith(f"{tmp_path}")]
    assert len(out.splitlines()) == 1 and f"{tmp_path / 'b.mlpackage'}: error: [{FP32}]" in out


def test_optimize_writes_several_inputs_into_a_folder(models, tmp_path, capsys):
    out_dir = tmp_path / "fixed"
    status, out, _ = run(capsys, "optimize", models, "-o", out_dir, "--ignore", "ane-fp32")
    assert status == 0 and sorted(p.name for p in out_dir.iterdir()) == ["a.mlpackage", "b.mlpackage"]
    assert out.splitlines()[-1] == "optimize: 2 models, 2 written; left: 0 errors, 0 warnings, 8 infos"
    assert run(capsys, "optimize", models / "a.mlpackage", "-o", out_dir)[0] == 2  # a.mlpackage exists there
    status, _, _ = run(capsys, "optimize", models / "a.mlpackage", "-o", out_dir, "--force")
    assert status == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["-o", "x.mlpackage"],
            "x.mlpackage: several inputs are written to a folder; -o names a folder, not a package",
        ),
        (["--in-place", "-o", "d"], "--in-place and -o/--output: give one of them"),
        ([], "-o/--output OUT (or DIR for several inputs) or --in-place is required"),
    ],
)
def test_optimize_output_mistakes(models, tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, "optimize", models / "a.mlpackage", models / "sub", *argv)
    assert (status, out, err) == (2, "", f"mil-passes: error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_two_inputs_of_one_name_are_refused_before_writing(models, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    shutil.copytree(models / "a.mlpackage", other / "a.mlpackage")
    status, _, err = run(capsys, "optimize", models / "a.mlpackage", other, "-o", tmp_path / "out")
    assert status == 2 and "a.mlpackage: two inputs would be written there" in err
    assert not (tmp_path / "out").exists()


def test_in_place_rewrites_packages_only_and_leaves_a_clean_one_untouched(models, tmp_path, capsys):
    package = tmp_path / "a.mlpackage"
    shutil.copytree(models / "a.mlpackage", package)
    assert run(capsys, "optimize", "--in-place", package)[0] == 0
    assert run(capsys, "lint", package, "--select", REFUSED)[1].splitlines()[-1] == f"{package}: no findings"
    files = {p: p.read_bytes() for p in package.rglob("*") if p.is_file()}
    status, out, _ = run(capsys, "optimize", "--in-place", package)
    assert (status, out) == (0, f"{package}: nothing to fix; left as it is\n")
    assert {p: p.read_bytes() for p in package.rglob("*") if p.is_file()} == files
    model = tmp_path / "m.mlmodel"
    model.write_bytes(b"")
    status, _, err = run(capsys, "optimize", "--in-place", model)
    assert status == 2 and "--in-place rewrites .mlpackage folders only" in err


def test_verify_takes_several_inputs(models, capsys):
    argv = ["verify", models, "--pipeline", "common::dead_code_elimination", "--feeds", "1"]
    status, out, _ = run(capsys, *argv)
    assert status == 0
    assert out.count("verify ") == 2 and out.splitlines()[-1] == (
        "verify: 2 models; 0 with a pass that changed the outputs"
    )
    status, out, _ = run(capsys, *argv, "--json")
    assert status == 0 and [d["input"] for d in json.loads(out)] == [
        str(models / "a.mlpackage"),
        str(models / "sub" / "b.mlpackage"),
    ]

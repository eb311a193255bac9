"""Rule selection and configuration: every flag and every [tool.mil-passes] key changes what lint,
optimize or verify report; flags override the file; each mistake is one line and exit 2."""

import json
from pathlib import Path

import pytest

from mil_passes.cli import main
from mil_passes.cli.config import KEYS, ConfigError, Finder, load
from mil_passes.cli.selection import NEURAL_ENGINE_RULES, Layer, Selection, nearest_rules
from mil_passes.examples import streaming_cache_program
from mil_passes.lint import RULES, Finding
from mil_passes.package import io as mlpackage

REFUSED, FP32, PADDING = "ane-refused-slice-of-concat", "ane-fp32-compute", "ane-last-axis-padding"


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def rules_of(capsys, *argv) -> tuple[int, dict[str, int]]:
    """The exit status and the rules lint --json reports, with their counts."""
    status, out, err = run(capsys, "lint", *argv, "--json")
    assert err == "", err
    counts: dict[str, int] = {}
    for finding in json.loads(out)["findings"]:
        counts[finding["rule"]] = counts.get(finding["rule"], 0) + 1
    return status, counts


@pytest.fixture(scope="module")
def fp32_model(tmp_path_factory) -> Path:
    """Two refused windows (error), 11 fp32 ops (error) and 4 short last axes (info)."""
    folder = tmp_path_factory.mktemp("fp32")
    return mlpackage.save(streaming_cache_program(layers=2, channels=8, dtype="fp32"), folder / "f.mlpackage")


@pytest.fixture
def project(tmp_path, fp32_model):
    """A folder with a pyproject.toml (written by the test) and a copy of the model in a subfolder."""
    import shutil

    model = tmp_path / "models" / "f.mlpackage"
    shutil.copytree(fp32_model, model)

    def configure(text: str) -> Path:
        (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.mil-passes]\n{text}\n")
        return model

    return configure


def test_by_default_every_rule_reports(fp32_model, capsys):
    assert rules_of(capsys, fp32_model) == (1, {REFUSED: 2, FP32: 11, PADDING: 4})


def test_select_ignore_and_extend_select_take_ids_and_prefixes(fp32_model, capsys):
    assert rules_of(capsys, fp32_model, "--select", FP32) == (1, {FP32: 11})
    assert rules_of(capsys, fp32_model, "--select", "ane-last") == (0, {PADDING: 4})
    assert rules_of(capsys, fp32_model, "--select", "ane-last", "--extend-select", "ane-refused") == (
        1,
        {REFUSED: 2, PADDING: 4},
    )
    assert rules_of(capsys, fp32_model, "--ignore", "ane-fp32") == (1, {REFUSED: 2, PADDING: 4})
    assert rules_of(capsys, fp32_model, "--ignore", f"{FP32},{REFUSED}") == (0, {PADDING: 4})
    assert rules_of(capsys, fp32_model, "--ignore", "ane-", "--extend-select", PADDING) == (0, {PADDING: 4})
    assert rules_of(capsys, fp32_model, "--select", "ALL", "--ignore", "ALL") == (0, {})


def test_exit_zero_keeps_the_findings_and_exits_0(fp32_model, capsys):
    status, out, _ = run(capsys, "lint", fp32_model, "--exit-zero")
    assert status == 0 and f"error: [{FP32}]" in out


def test_compute_units_without_the_neural_engine_leave_its_rules_out_and_say_so(fp32_model, capsys):
    for units in ("cpu_only", "cpu_and_gpu", "CPU_AND_GPU"):
        assert rules_of(capsys, fp32_model, "--compute-units", units) == (0, {})
    for units in ("cpu_and_ne", "all"):
        assert rules_of(capsys, fp32_model, "--compute-units", units)[1] == {REFUSED: 2, FP32: 11, PADDING: 4}
    status, out, _ = run(capsys, "lint", fp32_model, "--compute-units", "cpu_and_gpu")
    assert out.splitlines() == [
        "placement: not predicted: compute units cpu_and_gpu leave out the Neural Engine "
        "(17 findings of its rules not reported)",
        f"{fp32_model}: no findings",
    ]
    _, out, _ = run(capsys, "lint", fp32_model, "--compute-units", "cpu_only", "--json")
    assert json.loads(out)["compute_units"] == "cpu_only"


def test_quiet_prints_the_findings_only_and_verbose_says_which_configuration(fp32_model, capsys):
    status, out, err = run(capsys, "lint", fp32_model, "--quiet")
    assert status == 1 and err == ""
    assert [line.split("]")[0] for line in out.splitlines()] == [
        f"error: [{FP32}",
        f"error: [{REFUSED}",
        f"info: [{PADDING}",
    ]
    status, out, err = run(capsys, "lint", fp32_model, "-v")
    assert err.splitlines()[0] == f"mil-passes: {fp32_model}: no configuration file; compute units all"
    assert out.splitlines()[-1].startswith(f"{fp32_model}: 13 errors")


def test_optimize_reports_and_exits_by_the_selection(fp32_model, tmp_path, capsys):
    def optimized(*flags):
        out_path = tmp_path / f"out{len(list(tmp_path.iterdir()))}.mlpackage"
        status, out, err = run(capsys, "optimize", fp32_model, "-o", out_path, "--json", *flags)
        assert err == ""
        document = json.loads(out)
        return (
            status,
            {f["rule"] for f in document["findings"]["before"]},
            {f["rule"] for f in document["findings"]["after"]},
        )

    assert optimized() == (1, {REFUSED, FP32, PADDING}, {FP32, PADDING})
    assert optimized("--ignore", FP32) == (0, {REFUSED, PADDING}, {PADDING})
    assert optimized("--select", REFUSED) == (0, {REFUSED}, set())
    assert optimized("--select", PADDING, "--extend-select", FP32) == (1, {FP32, PADDING}, {FP32, PADDING})
    assert optimized("--compute-units", "cpu_only") == (0, set(), set())
    assert optimized("--exit-zero")[0] == 0
    status, out, _ = run(capsys, "optimize", fp32_model, "-o", tmp_path / "q.mlpackage", "-q", "--ignore", PADDING)
    assert status == 1 and out.splitlines() == [line for line in out.splitlines() if line.startswith("error: [")]


# -- the configuration file ------------------------------------------------------------------------


def test_each_key_of_the_file_changes_what_is_reported(project, capsys):
    model = project(f'select = ["{FP32}"]')
    assert rules_of(capsys, model) == (1, {FP32: 11})
    project(f'select = ["{FP32}"]\nextend-select = ["{PADDING}"]')
    assert rules_of(capsys, model) == (1, {FP32: 11, PADDING: 4})
    project(f'ignore = ["{FP32}", "{REFUSED}"]')
    assert rules_of(capsys, model) == (0, {PADDING: 4})
    project(f'[tool.mil-passes.severity]\n{FP32} = "warning"\n{REFUSED} = "info"')
    status, out, _ = run(capsys, "lint", model, "--json")
    severities = {f["rule"]: f["severity"] for f in json.loads(out)["findings"]}
    assert status == 0 and severities == {FP32: "warning", REFUSED: "info", PADDING: "info"}
    assert json.loads(out)["counts"] == {"error": 0, "warning": 11, "info": 6}
    project('compute-units = "cpu_and_gpu"')
    assert rules_of(capsys, model) == (0, {})
    project('chip = "M4"')
    assert "placement on M4/A17 Pro: 11 ops" in run(capsys, "lint", model)[1]
    project('output-format = "github"')
    assert f"::error file={model},title={REFUSED}::" in run(capsys, "lint", model)[1]


def test_passes_and_pipeline_keys_choose_what_optimize_and_verify_run(project, tmp_path, capsys):
    model = project('passes = ["rename_duplicate_temporaries"]')
    status, out, _ = run(capsys, "optimize", model, "-o", tmp_path / "o.mlpackage", "--json")
    assert [p["name"] for p in json.loads(out)["passes"]] == [
        "webnn::rename_duplicate_temporaries",
        "common::dead_code_elimination",
    ]
    project('pipeline = "common::dead_code_elimination"')
    status, out, _ = run(capsys, "verify", model, "--feeds", "1")
    assert status == 0 and out.startswith(f"verify {model}: pipeline common::dead_code_elimination (1 pass)")


def test_flags_override_the_file(project, capsys):
    model = project(f'ignore = ["{FP32}"]\ncompute-units = "cpu_only"\nchip = "M4"\noutput-format = "github"')
    assert rules_of(capsys, model, "--compute-units", "all", "--select", FP32) == (1, {FP32: 11})
    _, out, _ = run(capsys, "lint", model, "--compute-units", "all", "--chip", "M1", "--output-format", "text")
    assert "placement on M1/A14" in out


def test_config_names_a_file_for_every_input(project, tmp_path, capsys):
    model = project('compute-units = "cpu_only"')
    other = tmp_path / "other.toml"
    other.write_text(f'[tool.mil-passes]\nselect = ["{PADDING}"]\n')
    assert rules_of(capsys, model, "--config", other) == (0, {PADDING: 4})
    _, _, err = run(capsys, "lint", model, "--config", other, "-v")
    assert f"configuration {other}; compute units all" in err


def test_the_nearest_pyproject_with_the_table_applies(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.mil-passes]\nchip = "M1"\n')
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname = 'no table here'\n")
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / "pyproject.toml").write_text('[tool.mil-passes]\nchip = "M5"\n')
    finder = Finder()
    assert finder.for_input(tmp_path / "a" / "b" / "m.mlpackage").chip == "M5"
    assert finder.for_input(tmp_path / "a" / "m.mlpackage").chip == "M1"
    assert finder.for_input(tmp_path / "a" / "m.mlpackage").path == tmp_path / "pyproject.toml"


BAD = [
    ("[tool.mil-passes\n", r"pyproject.toml: not valid TOML: "),
    ("[tool.mil-passes]\nselet = ['ane-']\n", r"pyproject.toml: unknown key 'selet' in \[tool.mil-passes\] \(known: "),
    ("[tool.mil-passes]\nselect = ['ane-fp33']\n", r"\[tool.mil-passes\] select: unknown rule 'ane-fp33' \(did you"),
    ("[tool.mil-passes]\nignore = ['nope']\n", r"\[tool.mil-passes\] ignore: unknown rule 'nope' \(mil-passes rule"),
    (
        "[tool.mil-passes]\ncompute-units = 'gpu'\n",
        r"compute-units: unknown value 'gpu' \(known: cpu_and_ne, all, cpu_",
    ),
    ("[tool.mil-passes]\noutput-format = 'xml'\n", r"output-format: unknown value 'xml' \(known: text, json, github"),
    ("[tool.mil-passes]\nchip = 'M9'\n", r"\[tool.mil-passes\] chip: unknown chip 'M9' \(known: M1, A14"),
    (
        "[tool.mil-passes.severity]\nane-gather = 'fatal'\n",
        r"severity.ane-gather: unknown value 'fatal' \(known: error",
    ),
    (
        "[tool.mil-passes.severity]\nane-gathr = 'info'\n",
        r"severity: unknown rule 'ane-gathr' \(did you mean ane-gather",
    ),
    ("[tool.mil-passes]\nselect = 3\n", r"select: expected a list of strings, got 3"),
    ("[tool.mil-passes]\nchip = 1\n", r"chip: expected a string, got 1"),
]


@pytest.mark.parametrize("text, message", BAD, ids=[m.split(":")[0][:30] for _, m in BAD])
def test_a_bad_file_is_one_line_naming_file_key_and_values_and_exit_2(tmp_path, fp32_model, capsys, text, message):
    import re

    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "m").symlink_to(fp32_model.parent)
    for command in (["lint"], ["optimize", "-o", tmp_path / "out.mlpackage"]):
        status, out, err = run(capsys, *command, tmp_path / "m" / fp32_model.name)
        assert (status, out) == (2, ""), err
        assert len(err.splitlines()) == 1 and err.startswith(f"mil-passes: error: {tmp_path / 'pyproject.toml'}")
        assert re.search(message, err), err
    assert not (tmp_path / "out.mlpackage").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--select", "ane-fp33"],
            "mil-passes: error: --select: unknown rule 'ane-fp33' (did you mean ane-fp32-compute?)",
        ),
        (["--ignore", "x"], "mil-passes: error: --ignore: unknown rule 'x' (mil-passes rule --all lists them)"),
        (
            ["--extend-select", "dupe-name"],
            "mil-passes: error: --extend-select: unknown rule 'dupe-name' (did you mean",
        ),
        (
            ["--compute-units", "gpu"],
            "mil-passes: error: mil-passes lint: argument --compute-units: invalid choice: 'gpu'",
        ),
        (["--config", "missing.toml"], "mil-passes: error: missing.toml: --config: no such file"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(fp32_model, capsys, flags, message):
    status, out, err = run(capsys, "lint", fp32_model, *flags)
    assert (status, out) == (2, "") and len(err.splitlines()) == 1
    assert err.startswith(message), err


# -- the pieces ---------------------------------------------------------------------------------


def test_layers_most_specific_entry_wins_and_ignore_wins_a_tie():
    assert Layer(select=("ane-",), ignore=("ane-gather",)).decide("ane-gather", True) is False
    assert Layer(select=("ane-gather",), ignore=("ane-",)).decide("ane-gather", False) is True
    assert Layer(extend_select=("ane-gather",), ignore=("ane-gather",)).decide("ane-gather", True) is False
    assert Layer(select=("duplicate-name",)).decide("ane-gather", True) is False
    assert Layer().decide("ane-gather", False) is False


def test_selection_applies_severities_and_the_compute_units():
    findings = [Finding(FP32, "error", "a", "m"), Finding("duplicate-name", "error", "b", "m")]
    chosen = Selection(severity={"duplicate-name": "warning"}, compute_units="cpu_only")
    assert [(f.rule, f.severity) for f in chosen.apply(findings)] == [("duplicate-name", "warning")]
    assert chosen.hidden_by_compute_units(findings) == 1 and not chosen.neural_engine
    assert (
        FP32 in NEURAL_ENGINE_RULES and REFUSED in NEURAL_ENGINE_RULES and "duplicate-name" not in NEURAL_ENGINE_RULES
    )
    assert nearest_rules("ane-gathr")[0] == "ane-gather"


def test_every_key_is_documented_in_docs_cli():
    text = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text()
    assert all(f"`{key}`" in text for key in KEYS)
    assert set(RULES) >= {FP32, REFUSED, PADDING}


def test_load_refuses_a_file_without_the_table(tmp_path):
    plain = tmp_path / "plain.toml"
    plain.write_text("[tool.other]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"plain.toml: --config: the file has no \[tool.mil-passes\] table"):
        load(plain)


def test_flag_lists_take_repeats_and_comma_lists():
    import argparse

    from mil_passes.cli.settings import flag_list

    args = argparse.Namespace(ignore=["ane-gather, ane-fp32", "duplicate-name,"], select=None)
    assert flag_list(args, "ignore") == ["ane-gather", "ane-fp32", "duplicate-name"]
    assert flag_list(args, "select") is None and flag_list(args, "passes") is None

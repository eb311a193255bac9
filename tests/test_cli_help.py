"""mil-passes rule ID / rule --all; the help: plain text, a description per command, every option
explained, the exit statuses in an epilog; -q/-v on every command; one vocabulary."""

import argparse
import json

import pytest

from mil_passes.cli import build_parser, main
from mil_passes.cli.rule_doc import all_rule_facts, rule_facts, rule_text
from mil_passes.lint import RULES
from mil_passes.lint.placement import RULES as PLACEMENT_RULES

FIELDS = ["id", "severity", "trigger", "chips", "consequence", "confidence", "sources", "fix"]


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(action for action in parser._actions if action.dest == "command").choices


def test_rule_prints_trigger_severity_chips_consequence_confidence_sources_and_fix(capsys):
    status, out, err = run(capsys, "rule", "ane-gather")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "ane-gather (warning)"
    labels = [line.split(":")[0].strip() for line in lines[1:] if not line.startswith("    ")]
    assert labels == ["trigger", "severity", "chips", "consequence", "confidence", "sources", "fix"]
    assert "    - roboflow/rf-detr#1495 (measured through Core ML): " in out
    assert "fix:         mil-passes optimize runs webnn::gather_to_one_hot_matmul, webnn::gather_to_slice," in out


def test_rule_of_a_pass_says_its_evidence_and_fix(capsys):
    status, out, _ = run(capsys, "rule", "duplicate-name", "--json")
    facts = json.loads(out)
    assert status == 0 and list(facts) == FIELDS
    assert facts["fix"] == {"pass": "webnn::rename_duplicate_temporaries", "advice": None}
    assert facts["chips"] is None and facts["sources"][0]["says"] == RULES["duplicate-name"].evidence
    refused = rule_facts("ane-refused-slice-of-concat")
    assert refused["consequence"].startswith("the Neural Engine compiler rejects the whole model")


def test_rule_all_lists_every_rule_with_json(capsys):
    status, out, _ = run(capsys, "rule", "--all", "--json")
    listed = json.loads(out)
    assert status == 0 and [r["id"] for r in listed] == list(RULES)
    assert all(list(r) == FIELDS for r in listed)
    placement = {r.id: r for r in PLACEMENT_RULES}
    for facts in listed:
        if facts["id"] in placement:
            assert facts["sources"] and facts["confidence"] and facts["chips"] == placement[facts["id"]].chips
    status, out, _ = run(capsys, "rule", "--all")
    assert status == 0 and sum(bool(line) and not line.startswith(" ") for line in out.splitlines()) == len(RULES)
    assert rule_text(all_rule_facts()[0])[0].startswith(f"{next(iter(RULES))} (")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["rule", "ane-gathr"], "mil-passes: error: unknown rule 'ane-gathr' (did you mean ane-gather, "),
        (["rule", "zzzz"], "mil-passes: error: unknown rule 'zzzz' (mil-passes rule --all lists them)"),
        (["rule"], "mil-passes: error: rule: name one rule ID, or --all"),
        (["rule", "ane-gather", "--all"], "mil-passes: error: rule: name one rule ID, or --all"),
    ],
)
def test_rule_mistakes_exit_2_in_one_line(capsys, argv, message):
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "") and len(err.splitlines()) == 1 and err.startswith(message)


def test_help_is_plain_text_with_a_description_every_option_explained_and_the_exit_statuses(capsys):
    parser = build_parser()
    for name, command in commands().items():
        assert command.description, name
        text = command.format_help()
        assert "``" not in text and ":mod:" not in text, name
        assert "exit status:" in text and "130  interrupted" in text, name
        for action in command._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
    top = parser.format_help()
    assert "``" not in top and "exit status:" in top
    assert run(capsys, "--help")[0] == 0


def test_quiet_and_verbose_on_every_command_and_one_output_option():
    for name, command in commands().items():
        options = {option for action in command._actions for option in action.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= options, name
        assert "--out" not in options and "--explain" not in options or name == "optimize", name
    assert {"-o", "--output"} <= {o for a in commands()["demo"]._actions for o in a.option_strings}
    assert "--segments" in {o for a in commands()["lint"]._actions for o in a.option_strings}


def test_usage_mistakes_are_one_line(capsys):
    status, out, err = run(capsys, "lint")
    assert (status, out) == (2, "")
    assert (
        err
        == "mil-passes: error: mil-passes lint: the following arguments are required: IN (--help lists the options)\n"
    )
    status, _, err = run(capsys, "frobnicate")
    assert status == 2 and len(err.splitlines()) == 1


def test_pass_lists_name_passes_one_way(tmp_path, capsys):
    """optimize --pass takes NAME or NAME,NAME like verify --pipeline P1,P2; one resolver, one message."""
    status, _, err = run(
        capsys, "optimize", "x.mlpackage", "-o", tmp_path / "o.mlpackage", "--pass", "fold_shape_ops,nope"
    )
    assert status == 2 and err.startswith("mil-passes: error: unknown pass 'nope'")

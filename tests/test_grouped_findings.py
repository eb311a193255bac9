"""Lint's text a person reads: repeats grouped into one line of at most 200 characters, infos one
line per rule, --all and --json listing every finding; the placement line and --segments."""

from __future__ import annotations

import json

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.cli import main
from mil_passes.cli.grouped_findings import WIDTH, findings_lines, fit, grouped, placement_line, segment_lines
from mil_passes.examples import streaming_cache_program
from mil_passes.lint import Finding, lint, lint_report
from mil_passes.package import io as mlpackage


def layers(count: int):
    """``count`` layers, each with a topk (off the Neural Engine) and an fp16 relu."""

    @mb.program(input_specs=[mb.TensorSpec((1, 64), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        for layer in range(count):
            top = mb.topk(x=mb.relu(x=x, name=f"relu{layer}"), k=2, axis=-1, name=f"top{layer}")[0]
            x = mb.concat(values=(top, mb.slice_by_size(x=x, begin=[0, 0], size=[1, 62])), axis=-1)
        return x

    return prog


def test_repeats_of_one_rule_and_cause_are_one_line_whatever_the_layer_count():
    two, eight = grouped(lint(layers(2))), grouped(lint(layers(8)))
    assert len(two) == len(eight)
    (line,) = [line for line in eight if "[ane-topk-sort]" in line]
    assert line.startswith("error: [ane-topk-sort] 8 topk: is a topk: Core ML runs it on the CPU/GPU on every chip")
    assert line.endswith("first: top0, top1, top2, …")


def test_a_single_finding_is_its_own_line_within_the_width():
    (line,) = [line for line in grouped(lint(layers(1))) if "[ane-topk-sort]" in line]
    assert line.startswith("error: [ane-topk-sort] topk 'top0': is a topk: Core ML runs it") and len(line) <= WIDTH


def test_infos_are_one_line_per_rule_with_the_rules_words_when_causes_differ():
    findings = [
        Finding("runtime-shape", "info", f"op{i}", f"op{i}: value [{i}] is not known", None, "cast", f"cause {i}")
        for i in range(5)
    ]
    (line,) = grouped(findings)
    assert line.startswith("info: [runtime-shape] 5 cast: shape arithmetic a pass folds to constants")
    assert "first:" not in line


def test_no_line_is_wider_than_the_width():
    long = Finding("duplicate-name", "error", "x", "y" * 500, None, "add", "z" * 500)
    assert [len(line) for line in grouped([long, long])] == [WIDTH]
    assert len(grouped([long])[0]) == WIDTH and fit("a" * 10, 5) == "abcd…".replace("bcd", "aaa")


def test_every_finding_with_all():
    findings = lint(layers(3))
    assert findings_lines(findings, every=True) == [str(f) for f in findings]


def test_the_placement_line_and_the_segments(monkeypatch):
    from mil_passes.lint.placement import program_rules

    monkeypatch.setattr(program_rules, "SMALL_GRAPH_BYTES", 0)  # a tiny program: Core ML's cost decision aside
    _, placement = lint_report(layers(2))
    line = placement_line(placement)
    assert (
        line.startswith("placement on every chip from M1/A14: ") and "off the Neural Engine (ane-topk-sort 2)" in line
    )
    assert f"{len(placement.segments)} segments: {placement.copies} copies between compute units; confidence: " in line
    segments = segment_lines(placement)
    assert segments[0].startswith("  segment 1: Neural Engine, 1 ops: relu0")
    assert segments[1] == "  segment 2: CPU/GPU, 1 ops: top0 (ane-topk-sort)"


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    return mlpackage.save(streaming_cache_program(layers=4, channels=8), tmp_path_factory.mktemp("s") / "s.mlpackage")


def test_the_command_groups_by_default_and_lists_with_all(streaming, capsys):
    assert main(["lint", str(streaming)]) == 1
    grouped_out = capsys.readouterr().out.splitlines()
    assert main(["lint", str(streaming), "--all", "--segments"]) == 1
    every = capsys.readouterr().out.splitlines()
    assert len(grouped_out) == 4  # the windows, the infos, placement, counts
    assert len(every) == 4 + 4 + 3  # 4 windows, 4 infos, placement, its segment, counts
    assert every[-2] == "  segment 1: CPU/GPU, 19 ops: caches … new_cache (ane-refused-slice-of-concat)"
    assert all(len(line) <= WIDTH for line in grouped_out)


def test_the_json_lists_every_finding_and_the_placement(streaming, capsys):
    assert main(["lint", str(streaming), "--json", "--chip", "M4"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["schema", "path", "findings", "counts", "placement", "compute_units"]
    assert len(document["findings"]) == 8 and document["placement"]["chips"] == ["M4/A17 Pro"]
    assert set(document["placement"]) == {
        "chips",
        "ops",
        "off_ane",
        "by_cost",
        "glue",
        "leaves_neural_engine",
        "rejected_by",
        "confidence",
        "unknown",
        "segments",
        "rule_segments",
        "boundaries",
        "off_by_rule",
        "runs",
    }


def test_an_unknown_chip_is_one_line_and_exit_2(streaming, capsys):
    assert main(["lint", str(streaming), "--chip", "Z80"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "unknown chip 'Z80' (known: M1, A14, M2" in err


def test_optimize_reports_what_is_left_grouped(streaming, tmp_path, capsys):
    @mb.program(input_specs=[mb.TensorSpec((1, 64), dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(x):
        for layer in range(6):
            x = mb.topk(x=x, k=2, axis=-1, name=f"top{layer}")[0]
            x = mb.concat(values=(x, np.zeros((1, 62), np.float16)), axis=-1)
        return x

    source = mlpackage.save(prog, tmp_path / "t.mlpackage")
    assert main(["optimize", str(source), "-o", str(tmp_path / "o.mlpackage")]) == 1
    left = capsys.readouterr().out.split("findings left:")[1]
    assert left.count("[ane-topk-sort]") == 1 and "6 topk" in left

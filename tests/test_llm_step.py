"""benchmarks/llm_step.py's table and verify_memory sections on the TINY decoder.

No timing is asserted: the TINY decoder steps in milliseconds and measures nothing worth comparing.
What is checked is the bookkeeping: each row's figures come from where they should (the child's
memory, the states' bytes, verify and optimize as child processes), and a ratio over its target
is marked and reported as missed.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from benchmarks import llm_step

pytest.importorskip("torch")
pytest.importorskip("transformers")
from mil_passes.testing.models import llama  # noqa: E402

TINY_STATES = 2 * int(np.prod(llama.TINY.cache_shape)) * 2  # two fp16 caches


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One folder of converted TINY packages for the module's tests."""
    return tmp_path_factory.mktemp("llm_cache")


def _row(shape="smollm_135m", layers=30, kind="uncompressed", **figures) -> llm_step.Row:
    values = dict(
        step=0.3,
        torch=0.1,
        uncompressed=0.3,
        peak=150,
        budget=100,
        verify=40.0,
        optimize=10.0,
        verify_peak=1 << 30,
        verify_culprit=None,
    )
    values.update(figures)
    return llm_step.Row(shape, layers, kind, **values)  # type: ignore[arg-type]


def _cells(text: str) -> list[list[str]]:
    lines = text.splitlines()
    assert lines[0].startswith("| shape | weights |") and lines[1].startswith("|---|---|")
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_rows_of_the_tiny_decoder(cache):
    errors: set[str] = set()
    rows = llm_step.shape_rows(llama.TINY, cache, kinds=("uncompressed", "int4"), errors=errors)
    assert [row.kind for row in rows] == ["uncompressed", "int4"]
    plain, int4 = rows
    assert (cache / "tiny_2l_int4.mlpackage").is_dir()
    # The budget is the uncompressed program's consts (its fp16 weights) plus the two caches' bytes,
    # for both rows; int4's step is measured against the uncompressed one.
    assert plain.budget == int4.budget and plain.budget > TINY_STATES
    assert int4.uncompressed == plain.step and plain.vs_uncompressed == 1.0
    for row in rows:
        assert row.step > 0 and row.torch > 0 and row.peak > 0
        assert row.verify > 0.5 and row.optimize > 0.5  # a child importing coremltools, not this process
        assert row.verify_peak > 100 << 20 and row.verify_culprit is None
    # Either the command verified the packages itself, or it failed on its own random feeds and said so.
    assert all(row.verify_by_command for row in rows) == (not errors)
    assert all("fails on a random feed" in error for error in errors)
    cells = _cells(llm_step.table_text(rows))
    assert [row[:2] for row in cells] == [["tiny (2 layers)", "uncompressed"], ["tiny (2 layers)", "int4"]]
    assert all(len(row) == len(llm_step.COLUMNS) for row in cells)
    assert cells[0][5] == "—" and cells[1][5].startswith(f"{int4.vs_uncompressed:.2f}x")


def test_targets_are_judged_where_the_issue_sets_them():
    rows = [
        _row(step=0.35, torch=0.1, verify=60.0),  # 3.5x torch, verify 6x optimize: both missed
        _row(kind="int4", step=0.6, uncompressed=0.35),  # 1.71x the uncompressed step: missed
        _row(kind="int8", step=9.0),  # no target: shown only
        _row("llama_1b", 2, peak=140, budget=100, verify=60.0),  # memory 1.4x met; 2 layers: verify not judged
    ]
    checks = {figure: (ratio, target) for row in rows for _, figure, ratio, target in row.checks()}
    assert checks == {
        "smollm_135m (30 layers) uncompressed step ÷ torch": (pytest.approx(3.5), 3.0),
        "smollm_135m (30 layers) uncompressed verify ÷ optimize": (pytest.approx(6.0), 5.0),
        "smollm_135m (30 layers) int4 step ÷ uncompressed": (pytest.approx(0.6 / 0.35), 1.5),
        "llama_1b (2 layers) uncompressed step ÷ torch": (pytest.approx(3.0), 2.5),
        "llama_1b (2 layers) uncompressed decode-step peak RSS ÷ (fp16 weights + states)": (pytest.approx(1.4), 1.5),
    }
    cells = _cells(llm_step.table_text(rows))
    assert cells[0][4] == "3.50x MISSED" and cells[0][10] == "6.00x MISSED"
    assert cells[1][5] == "1.71x MISSED" and cells[2][4] == "90.00x" and cells[2][5] == "30.00x"
    assert cells[3][4] == "3.00x MISSED" and cells[3][7] == "1.40x ✓" and cells[3][10] == "6.00x"


def test_run_child_measures_that_child_alone():
    script = "import sys, numpy; a = numpy.ones(300 << 17); sum(range(3_000_000)); sys.exit(3)"  # 300 MiB
    done = llm_step.run_child([sys.executable, "-c", script])
    assert done.returncode == 3
    assert done.maxrss >= 300 << 20 and done.cpu > 0.01
    small = llm_step.run_child([sys.executable, "-c", "print('hi')"])
    assert (small.returncode, small.stdout) == (0, "hi\n") and small.maxrss < 100 << 20  # not this process's memory


def test_verify_memory_section_through_main(cache, monkeypatch, capsys):
    # The 1B shape's place taken by TINY: the same code path, the package converted in a child.
    monkeypatch.setattr(llm_step, "_shape", lambda name, layers: llama.TINY.with_layers(layers))
    assert llm_step.main(["--only", "verify_memory", "--verify-layers", "1", "--cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert (cache / "tiny_1l.mlpackage").is_dir()
    assert out.splitlines()[0].startswith("load average at the start: ")
    (line,) = [line for line in out.splitlines() if line.startswith("verify peak RSS, 1B widths 1 layers: ")]
    assert line.endswith("target <= 8 GiB: met")
    assert "load average at the end: " in out and out.rstrip().endswith("every target met")


def test_verify_memory_reports_a_miss(cache, monkeypatch, capsys):
    monkeypatch.setattr(llm_step, "_shape", lambda name, layers: llama.TINY.with_layers(layers))
    monkeypatch.setattr(llm_step, "VERIFY_MEMORY_TARGET", 1 << 20)  # 1 MiB: no process stays under it
    assert llm_step.main(["--only", "verify_memory", "--verify-layers", "1", "--cache", str(cache)]) == 1
    out = capsys.readouterr().out
    assert "target <= 0.000976562 GiB: MISSED" in out
    assert out.rstrip().endswith("missed: verify peak RSS, 1B widths 1 layers")

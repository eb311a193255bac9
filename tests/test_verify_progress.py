"""verify's progress: the lines ``on_progress`` gets (the pass, the feed, the step), and the status
line the command draws on stderr for a person at a terminal."""

import io
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.cli.status_line import CLEAR, StatusLine
from mil_passes.package import io as mlpackage
from mil_passes.verify import verify_package, verify_program
from test_verify_states import delayed_window

SHIFT = "verify_state_test::shift_state_window"  # registered by test_verify_states: changes the state update


def test_progress_names_the_original_then_each_pass_with_its_feeds_and_steps():
    lines: list[str] = []
    verify_program(delayed_window(), [SHIFT], feeds=2, steps=3, on_progress=lines.append)
    original = [f"original: feed {f}/2, step {s}/3" for f in (1, 2) for s in (1, 2, 3)]
    checked = [f"pass 1/1 {SHIFT}: feed {f}/2, step {s}/3" for f in (1, 2) for s in (1, 2, 3)]
    assert lines == [*original, f"pass 1/1 {SHIFT}", *checked]


def small_program():
    @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        unused = mb.mul(x=x, y=np.float32(3.0))  # noqa: F841 - dead code for the pass to remove
        return mb.add(x=x, y=np.float32(1.0), name="y")

    return prog


def test_a_pass_that_leaves_the_program_as_it_was_shows_no_feeds_and_no_steps_without_states():
    lines: list[str] = []
    passes = ["common::dead_code_elimination", "common::add_fp16_cast"]
    verify_program(small_program(), passes, feeds=2, on_progress=lines.append)
    assert lines == [
        "original: feed 1/2",
        "original: feed 2/2",
        f"pass 1/2 {passes[0]}",  # dead code only: the fingerprint is the same, nothing re-run
        f"pass 2/2 {passes[1]}",
        f"pass 2/2 {passes[1]}: feed 1/2",
        f"pass 2/2 {passes[1]}: feed 2/2",
    ]


def test_verify_package_says_it_reads_the_package_first(tmp_path):
    path = mlpackage.save(small_program(), tmp_path / "small.mlpackage")
    lines: list[str] = []
    verify_package(path, ["common::dead_code_elimination"], feeds=1, on_progress=lines.append)
    assert lines[:2] == [f"reading {path}", "original: feed 1/1"]


def test_status_line_rewrites_one_line_cut_to_the_terminal_and_escaped(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    stream = io.StringIO()
    line = StatusLine(True, stream)
    line.show("pass 1/95 common::x")
    line.show("a\nb" + "c" * 100)
    assert stream.getvalue().startswith(CLEAR + "pass 1/95 common::x" + CLEAR + "a\\nb")
    last = stream.getvalue().rsplit(CLEAR, 1)[1]
    assert len(last) == 39 and "…" in last  # one column left free: the cursor never wraps
    line.clear()
    line.clear()  # erased once
    assert stream.getvalue().endswith("c" + CLEAR)
    quiet = io.StringIO()
    StatusLine(False, quiet).show("anything")
    assert quiet.getvalue() == ""


def _verify_at_a_terminal(path: Path, *options: str) -> tuple[int, str, str]:
    """``mil-passes verify`` with stdout on a pseudo-terminal; (status, terminal text, stderr)."""
    primary, secondary = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    script = Path(sys.executable).parent / "mil-passes"
    done = subprocess.run(
        [script, "verify", str(path), "--feeds", "1", "--steps", "2", *options],
        stdout=secondary,
        stderr=subprocess.PIPE,  # bytes: text mode would read each "\r" as a line end
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(secondary)
    reader.join(timeout=10)
    os.close(primary)
    return done.returncode, b"".join(chunks).decode(), done.stderr.decode()


def test_the_command_draws_the_status_line_for_a_terminal_and_quiet_turns_it_off(tmp_path):
    from test_verify_states import stacked_layer_caches

    path = mlpackage.save(stacked_layer_caches(), tmp_path / "stacked.mlpackage")
    status, terminal, err = _verify_at_a_terminal(path, "--pipeline", "mil_passes")
    assert status == 0, err
    assert "no pass changed the outputs" in terminal
    drawn = [part for part in err.split(CLEAR) if part]
    assert drawn[0] == f"reading {path}" and "original: feed 1/1, step 2/2" in drawn
    assert any(part.startswith("pass 1/") for part in drawn)
    assert any(part.endswith(": feed 1/1, step 2/2") and part.startswith("pass ") for part in drawn)
    assert err.endswith(CLEAR)  # erased before the summary
    status, terminal, err = _verify_at_a_terminal(path, "--pipeline", "mil_passes", "--quiet")
    assert status == 0 and err == "" and "no pass changed the outputs" in terminal

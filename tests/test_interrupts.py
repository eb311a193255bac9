"""Ctrl-C means stop: an interrupt at any moment of a real run ends the command with 130 (or,
before the command's code runs, with Python's own death by SIGINT), and OUT is the old package
or the whole new one, never one written after the interrupt.

``MIL_PASSES_INTERRUPT_RUNS`` sets how many interrupted ``optimize`` runs the main test makes
(default 16; ``make``'s suite stays bounded); ``python tests/interrupt_runs.py`` counts ignored
interrupts of any checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import signal
import sys
import time
from pathlib import Path

import pytest

from mil_passes import _sigint_record
from mil_passes.cli import main
from mil_passes.cli.interrupts import interrupts_recorded
from mil_passes.examples import streaming_cache_program
from mil_passes.package import atomic
from mil_passes.package import io as mlpackage
from pass_helpers import without_placement
from mil_passes.package import optimize as package_optimize  # bound before any test patches io

from interrupt_runs import interrupted_runs, optimize_argv

TREE = Path(__file__).resolve().parents[1]
RUNS = int(os.environ.get("MIL_PASSES_INTERRUPT_RUNS", "16"))

# serial: `make test` runs these alone, after the parallel part: the signals' delays come from timed runs.
pytestmark = [pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals"), pytest.mark.serial]


@pytest.fixture(autouse=True)
def pythons_default_sigint():
    """SIGINT as an interactive shell starts Python with it: a suite started in the background
    (SIGINT ignored, inherited by every child) would otherwise test nothing here."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("interrupts")
    source = mlpackage.save(streaming_cache_program(layers=2, channels=8), folder / "in.mlpackage")
    old = mlpackage.save(streaming_cache_program(layers=1, channels=8), folder / "old.mlpackage")
    return source, old


def describe(runs) -> str:
    return "\n".join(
        f"delay {r.delay:.2f} s: exit {r.returncode}, OUT {r.out_state}, written after the signal "
        f"{r.written_after_signal}, leftovers {r.leftovers}\n{r.stderr[-600:]}"
        for r in runs
    )


def test_interrupts_at_many_points_of_a_real_optimize_run(packages):
    source, old = packages
    start = time.perf_counter()
    (whole,) = interrupted_runs(TREE, optimize_argv(source), [None], old=old)
    duration = time.perf_counter() - start
    assert whole.kept_its_promise and whole.returncode == 0, describe([whole])  # TMPDIR stays empty too
    delays = [0.02 + i * 1.1 * duration / (RUNS - 1) for i in range(RUNS)]
    runs = interrupted_runs(TREE, optimize_argv(source), list(delays), old=old)
    broken = [r for r in runs if not r.kept_its_promise]
    assert not broken, describe(broken)
    signalled = [r for r in runs if r.signalled]
    assert sum(r.returncode == 130 for r in signalled) >= len(signalled) // 2, describe(signalled)


@pytest.mark.parametrize(
    "argv",
    [["lint", "IN"], ["verify", "IN", "--feeds", "1"], ["demo", "-o", "demo", "--layers", "2", "--channels", "8"]],
    ids=["lint", "verify", "demo"],
)
def test_lint_verify_and_demo_end_with_130(packages, argv):
    source, _ = packages
    argv = [str(source) if a == "IN" else a for a in argv]
    start = time.perf_counter()
    (whole,) = interrupted_runs(TREE, argv, [None])
    duration = time.perf_counter() - start  # on a loaded machine, fixed delays would miss the run
    assert whole.kept_its_promise, describe([whole])
    runs = interrupted_runs(TREE, argv, [0.35 * duration, 0.6 * duration, 0.85 * duration])
    broken = [r for r in runs if not r.kept_its_promise]
    assert not broken, describe(broken)
    assert any(r.returncode == 130 for r in runs if r.signalled), describe(runs)


SWALLOWED: list[str] = []


def swallowing_sigint(function):
    """``function`` after a SIGINT that a bare ``except:`` swallows, as coremltools does."""

    def wrapped(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs between bytecodes, in here at the latest
                pass
        except:  # noqa: E722 - the point: what coremltools/_deps does around `import scipy`
            SWALLOWED.append(function.__name__)
        return function(*args, **kwargs)

    return wrapped


def test_a_swallowed_interrupt_still_ends_lint_with_130(packages, monkeypatch, capsys):
    source, _ = packages
    monkeypatch.setattr(mlpackage, "read", swallowing_sigint(mlpackage.read))  # what lint calls
    SWALLOWED.clear()
    assert main(["lint", str(source)]) == 130
    assert SWALLOWED == ["read"]  # the KeyboardInterrupt was caught; the record was not
    assert capsys.readouterr().err == "mil-passes: interrupted; nothing written\n"


def test_a_swallowed_interrupt_while_writing_stops_the_commit(packages, tmp_path, monkeypatch, capsys):
    source, old = packages
    out = tmp_path / "out.mlpackage"
    shutil.copytree(old, out)
    before = sorted(p.read_bytes() for p in out.rglob("*") if p.is_file())
    monkeypatch.setattr(package_optimize, "write_new", swallowing_sigint(package_optimize.write_new))
    SWALLOWED.clear()
    assert main(["optimize", str(source), "-o", str(out), "--force", "--quiet"]) == 130
    assert sorted(p.read_bytes() for p in out.rglob("*") if p.is_file()) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.mlpackage"]  # no staging left
    assert SWALLOWED == ["write_new"]
    assert "nothing written" in capsys.readouterr().err


def test_an_interrupt_in_the_cleanup_after_the_commit_leaves_no_staging(packages, tmp_path, monkeypatch, capsys):
    """The interrupt lands as ``replacing`` starts removing its staging folder, before it holds
    SIGINT back: the command removes the folder as it ends."""
    source, old = packages
    out = tmp_path / "out.mlpackage"
    shutil.copytree(old, out)
    real, calls = shutil.rmtree, []

    def interrupted_once(path, *args, **kwargs):
        calls.append(Path(path).name)
        if len(calls) == 1:
            _sigint_record.note_interrupt()
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(atomic.shutil, "rmtree", interrupted_once)
    assert main(["optimize", str(source), "-o", str(out), "--force", "--quiet"]) == 130
    assert capsys.readouterr().err == f"mil-passes: interrupted; wrote {out} before it\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.mlpackage"]  # the staging folder is gone
    assert len(calls) == 2 and calls[0].endswith(".partial")
    assert without_placement(mlpackage.read(out).lint()) == []  # the placement rules: an 8-wide cache


def test_an_interrupt_after_the_commit_says_what_was_written(packages, tmp_path, monkeypatch, capsys):
    source, _ = packages
    out = tmp_path / "out.mlpackage"
    real = package_optimize.optimize_package

    def then_interrupted(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(package_optimize, "optimize_package", then_interrupted)
    assert main(["optimize", str(source), "-o", str(out), "--quiet"]) == 130
    assert capsys.readouterr().err == f"mil-passes: interrupted; wrote {out} before it\n"
    assert without_placement(mlpackage.read(out).lint()) == []  # the placement rules: an 8-wide cache


def test_the_handler_is_only_installed_over_pythons_default():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_recorded():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a background job stays immune
    finally:
        signal.signal(signal.SIGINT, previous)
    with interrupts_recorded():
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is previous


def test_the_commit_refuses_after_an_interrupt_was_recorded(tmp_path):
    out = tmp_path / "m.mlpackage"
    _sigint_record.note_interrupt()
    try:
        with pytest.raises(KeyboardInterrupt):
            with atomic.replacing(out) as written:
                written.mkdir()
    finally:
        _sigint_record.forget_interrupts()
    assert list(tmp_path.iterdir()) == []


LOST_DURING_IMPORT = """
import os, signal, sys
sys.argv = [os.path.join(sys.prefix, "bin", "mil-passes"), *sys.argv[1:]]  # what the script's process holds
import mil_passes  # in the command's process, its handler is in place from here
try:
    os.kill(os.getpid(), signal.SIGINT)
except KeyboardInterrupt:
    pass  # lost, as in importlib's module-lock callback ("Exception ignored in: ... cb")
from mil_passes.cli import main
sys.exit(main())
"""


def test_an_interrupt_lost_during_the_imports_still_ends_optimize_with_130(packages, tmp_path):
    source, old = packages
    out = tmp_path / "out.mlpackage"
    shutil.copytree(old, out)
    before = sorted(p.read_bytes() for p in out.rglob("*") if p.is_file())
    argv = ["optimize", str(source), "-o", str(out), "--force", "--quiet"]
    env = dict(os.environ, PYTHONPATH=str(TREE))
    done = subprocess.run(
        [sys.executable, "-c", LOST_DURING_IMPORT, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a shell starts the command
    )
    assert (done.returncode, done.stderr) == (130, "mil-passes: interrupted; nothing written\n")
    assert sorted(p.read_bytes() for p in out.rglob("*") if p.is_file()) == before


@pytest.mark.parametrize(
    ("orig_argv", "argv0", "command"),
    [
        (["python", "-m", "mil_passes.cli", "lint", "x"], "-m", True),
        (["python", "-X", "importtime", "-m", "mil_passes.cli.__main__"], "-m", True),
        (["/venv/bin/python", "/venv/bin/mil-passes", "lint"], "/venv/bin/mil-passes", True),
        (["python", "-m", "pytest", "tests"], "-m", False),
        (["python", "script.py", "-m", "mil_passes.cli"], "script.py", False),  # script.py's own arguments
        (["python", "-c", "import mil_passes"], "-c", False),
    ],
)
def test_only_the_commands_process_installs_the_handler_at_import(orig_argv, argv0, command):
    assert _sigint_record.is_command_process(orig_argv, argv0) is command


def test_main_takes_over_the_handler_installed_at_start_with_its_record(monkeypatch):
    monkeypatch.setattr(_sigint_record, "is_command_process", lambda orig_argv, argv0: True)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        _sigint_record.install_if_command()
        assert signal.getsignal(signal.SIGINT) is _sigint_record.record_and_raise
        _sigint_record.note_interrupt()  # an interrupt during the imports
        with interrupts_recorded():
            assert _sigint_record.interrupted()  # kept, not forgotten as main starts
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert not _sigint_record.take_over_start_handler()  # once only
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _sigint_record.forget_interrupts()

"""What the OS refuses while a package is written is said in one line, in the user's terms:
``mil-passes: error: cannot write OUT: No space left on device``, never a staging path or a
repr; nothing is left behind, and staging a killed run left is removed by the next run."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mil_passes.cli import main
from mil_passes.examples import streaming_cache_program
from mil_passes.package import atomic, layout
from mil_passes.package import io as mlpackage

TREE = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A package with ~150 KB of weights (8 layers x 1,024 channels of conv weights)."""
    return mlpackage.save(
        streaming_cache_program(layers=8, channels=1024), tmp_path_factory.mktemp("big") / "in.mlpackage"
    )


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def mil_passes_in_a_mount(model: Path, folder: Path, mount_options: str, tmpdir: Path) -> subprocess.CompletedProcess:
    """``optimize`` into a fresh tmpfs mounted (in a mount namespace of its own) on ``folder``,
    then the folder's listing; skipped where mounting is not allowed."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    script = (
        f"mount -t tmpfs -o {mount_options} tmpfs {folder} || exit 77; "
        f"{sys.executable} -m mil_passes.cli optimize {model} -o {folder}/out.mlpackage --quiet; "
        f"echo status=$?; ls -A {folder}"
    )
    env = dict(os.environ, PYTHONPATH=str(TREE), TMPDIR=str(tmpdir))
    result = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, env=env)
    if result.returncode == 77 or "unshare failed" in result.stderr or "Operation not permitted" in result.stderr:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()[:200]}")
    return result


def test_a_full_disk_is_one_line_naming_out(model, tmp_path):
    folder, tmpdir = tmp_path / "full", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    result = mil_passes_in_a_mount(model, folder, "size=64k", tmpdir)  # the weights are ~150 KB
    message = f"mil-passes: error: cannot write {folder}/out.mlpackage: No space left on device"
    assert result.stderr.splitlines()[-1] == message, result.stderr
    assert len(message) <= 200 and ".partial" not in result.stderr and "[(" not in result.stderr
    assert result.stdout.split() == ["status=2"]  # and the folder is empty: no staging, no out
    assert list(tmpdir.iterdir()) == []  # nothing in the system's temporary folder either


def test_a_read_only_folder_is_one_line_naming_out(model, tmp_path):
    folder, tmpdir = tmp_path / "ro", tmp_path / "tmp"
    folder.mkdir()
    tmpdir.mkdir()
    result = mil_passes_in_a_mount(model, folder, "ro", tmpdir)
    assert result.stderr.splitlines()[-1] == (
        f"mil-passes: error: cannot write {folder}/out.mlpackage: Read-only file system"
    ), result.stderr
    assert result.stdout.split() == ["status=2"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM])
def test_each_refusal_of_the_os_is_said_in_its_words(model, tmp_path, monkeypatch, capsys, code):
    out = tmp_path / "out.mlpackage"
    shutil.copytree(model, out)
    before = files_of(out)
    real = layout.write_package

    def refused(path, export):
        real(path, export)  # written in staging, then the OS refuses the last write
        raise OSError(code, os.strerror(code), str(Path(path) / "Manifest.json"))

    monkeypatch.setattr(layout, "write_package", refused)
    monkeypatch.setattr(mlpackage, "write_package", refused)
    status = main(["optimize", str(model), "-o", str(out), "--force", "--quiet"])
    _, err = capsys.readouterr()
    assert status == 2
    assert err == f"mil-passes: error: cannot write {out}: {os.strerror(code)}\n"
    assert len(err) <= 200
    assert files_of(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["out.mlpackage"]


def test_a_weight_writer_that_fails_without_a_reason_gets_the_os_reason(tmp_path, monkeypatch):
    def export(weights: str):
        raise RuntimeError("[MIL FileWriter]: Unknown error occurred while writing data to the file.")

    monkeypatch.setattr(
        atomic, "probe_refusal", lambda folder: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
    )
    monkeypatch.setattr(layout, "probe_refusal", atomic.probe_refusal)
    with pytest.raises(OSError) as raised:
        layout.write_package(tmp_path / "m.mlpackage", export)
    assert raised.value.errno == errno.ENOSPC
    monkeypatch.setattr(layout, "probe_refusal", lambda folder: None)  # the disk is fine: a bug
    with pytest.raises(RuntimeError, match="Unknown error"):
        layout.write_package(tmp_path / "n.mlpackage", export)


def test_the_probe_reports_nothing_where_writing_works(tmp_path):
    assert atomic.probe_refusal(tmp_path) is None and list(tmp_path.iterdir()) == []


KILLED_WHILE_STAGED = """
    import os, sys, time
    from pathlib import Path
    from mil_passes.package import atomic
    out = Path(sys.argv[1])
    real_replace = os.replace
    def killed_between_renames(src, dst):
        real_replace(src, dst)
        if Path(dst).name.startswith(atomic.ASIDE_PREFIX):
            os.kill(os.getpid(), 9)  # the old package is aside, the new one not yet in place
    if sys.argv[2] == "commit":
        atomic.os.replace = killed_between_renames
    with atomic.replacing(out) as written:
        written.mkdir()
        (written / "Manifest.json").write_text("new")
        if sys.argv[2] == "write":
            print("staged", flush=True)
            time.sleep(600)
"""


def killed_writer(out: Path, when: str) -> subprocess.CompletedProcess:
    """A writer of ``out`` SIGKILLed mid-write (``write``) or between the commit's renames."""
    env = dict(os.environ, PYTHONPATH=str(TREE))
    code = textwrap.dedent(KILLED_WHILE_STAGED)
    if when == "commit":
        return subprocess.run([sys.executable, "-c", code, str(out), when], env=env, capture_output=True, text=True)
    child = subprocess.Popen([sys.executable, "-c", code, str(out), when], env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "staged\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    return subprocess.CompletedProcess(child.args, child.returncode)


def staging_of(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if atomic.STAGING_NAME.match(p.name))


def test_staging_a_killed_run_left_is_removed_by_the_next_run(model, tmp_path, capsys):
    out = tmp_path / "out.mlpackage"
    assert killed_writer(out, "write").returncode == -signal.SIGKILL
    assert len(staging_of(tmp_path)) == 1 and not out.exists()
    (tmp_path / ".notes.partial").mkdir()  # not of the naming: left alone
    assert main(["optimize", str(model), "-o", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert staging_of(tmp_path) == [] and (tmp_path / ".notes.partial").is_dir()


def test_a_package_a_killed_commit_moved_aside_is_put_back(model, tmp_path, capsys):
    out = tmp_path / "out.mlpackage"
    shutil.copytree(model, out)
    before = files_of(out)
    assert killed_writer(out, "commit").returncode == -signal.SIGKILL
    assert not out.exists() and len(staging_of(tmp_path)) == 1  # the old package is in the staging
    status = main(["optimize", str(model), "-o", str(out), "--quiet"])
    assert (status, capsys.readouterr().err) == (2, f"mil-passes: error: {out}: already exists (--force replaces it)\n")
    assert files_of(out) == before and staging_of(tmp_path) == []


def test_the_staging_of_a_running_process_is_left_alone(tmp_path):
    mine = tmp_path / f".m.mlpackage.mil-passes-{os.getpid()}-abc123.partial"
    parent = tmp_path / f".m.mlpackage.mil-passes-{os.getppid()}-abc123.partial"
    mine.mkdir()
    parent.mkdir()
    assert atomic.remove_stale_staging(tmp_path) == [] and mine.is_dir() and parent.is_dir()


def test_a_scratch_folder_a_killed_run_left_is_removed_by_the_next_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic.tempfile, "tempdir", str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = tmp_path / f"mil-passes-copy-{child.pid}-k1ll3d"
    running = tmp_path / f"mil-passes-copy-{os.getppid()}-alive"
    other = tmp_path / "mil-passes-copy-notes"  # not of the naming: left alone
    for folder in (dead, running, other):
        folder.mkdir()
    (dead / "weight.bin").write_bytes(b"\0" * 64)
    child.kill()
    child.wait()
    copied = mlpackage.copy_program(streaming_cache_program(layers=1, channels=4))
    assert "main" in copied.functions
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([running.name, other.name])

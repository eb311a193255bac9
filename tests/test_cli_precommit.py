"""The pre-commit hooks of .pre-commit-hooks.yaml, run by pre-commit itself (``pre-commit try-repo``)
on a repository holding a package: lint fails on its refused windows, fix rewrites it in place,
then both pass and the package is left as it is.

pre-commit installs this project (``language: python``) into a virtualenv of its own, from PyPI:
the test is marked ``precommit`` (``-m "not precommit"`` leaves it out) and skipped where the
pre-commit command is not installed (the ``test`` extra installs it).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mil_passes.cli import main
from mil_passes.examples import streaming_cache_program
from mil_passes.package import io as mlpackage

pytestmark = pytest.mark.precommit

ROOT = Path(__file__).resolve().parent.parent
PRE_COMMIT = shutil.which("pre-commit", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
PROJECT_FILES = ("pyproject.toml", "README.md", "LICENSE", ".pre-commit-hooks.yaml")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def git(folder: Path, *argv: str) -> None:
    subprocess.run(["git", *argv], cwd=folder, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def committed_copy_of_this_project(folder: Path) -> Path:
    """This project's package, metadata and hooks, as the one commit of a new git repository."""
    for name in PROJECT_FILES:
        shutil.copy(ROOT / name, folder / name)
    shutil.copytree(ROOT / "mil_passes", folder / "mil_passes", ignore=shutil.ignore_patterns("__pycache__"))
    git(folder, "init", "-q")
    git(folder, "add", ".")
    git(folder, "commit", "-q", "-m", "mil-passes")
    return folder


def try_repo(project: Path, repository: Path) -> subprocess.CompletedProcess:
    """Both hooks of ``project`` on every file of ``repository``, as pre-commit runs them (each
    try-repo installs the project afresh, so the test runs it once)."""
    env = {**os.environ, **GIT_ENV}
    env.pop("PYTHONPATH", None)  # the hooks run the copy pre-commit installed
    return subprocess.run(
        [PRE_COMMIT, "try-repo", str(project), "--all-files"],
        cwd=repository,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


def files_of(package: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(package.rglob("*")) if p.is_file()}


def hook_outputs(out: str) -> dict[str, str]:
    """What each hook printed, by hook name (pre-commit heads each with ``name....Passed|Failed``)."""
    parts = re.split(r"^(mil-passes \w+)\.+(?:Passed|Failed)$", out, flags=re.M)
    return {name: f"{status_line}" for name, status_line in zip(parts[1::2], parts[2::2])}


@pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is not installed (pip install -e '.[test]')")
def test_pre_commit_runs_the_lint_and_fix_hooks_on_a_repository_holding_packages(tmp_path):
    (tmp_path / "project").mkdir()
    project = committed_copy_of_this_project(tmp_path / "project")
    repository = tmp_path / "models"
    repository.mkdir()
    encoder = mlpackage.save(streaming_cache_program(layers=2, channels=8), repository / "encoder.mlpackage")
    fp32 = streaming_cache_program(layers=2, channels=8, dtype="fp32")  # stays off the Neural Engine when fixed
    (repository / "fp32").mkdir()
    fp32_encoder = mlpackage.save(fp32, repository / "fp32" / "encoder32.mlpackage")
    git(repository, "init", "-q")
    git(repository, "add", ".")
    before = {package: files_of(package) for package in (encoder, fp32_encoder)}

    ran = try_repo(project, repository)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert re.search(r"^mil-passes fix\.+Failed$", ran.stdout, flags=re.M), ran.stdout
    assert re.search(r"^mil-passes lint\.+Failed$", ran.stdout, flags=re.M), ran.stdout
    printed = hook_outputs(ran.stdout)
    fix, lint = printed["mil-passes fix"], printed["mil-passes lint"]
    assert "files were modified by this hook" in fix
    assert "wrote encoder.mlpackage" in fix and f"wrote {Path('fp32/encoder32.mlpackage')}" in fix
    # pre-commit passed every file of both packages; each package is linted once, fixed windows gone
    assert lint.count("placement on every chip") == 2 and "lint: 2 models" in lint
    assert "error: [ane-fp32-compute]" in lint and "ane-refused-slice-of-concat" not in lint
    assert sorted(p.name for p in repository.iterdir()) == [".git", "encoder.mlpackage", "fp32"]  # no staging left

    fixed = {package: files_of(package) for package in before}
    assert all(fixed[package] != before[package] for package in before)
    assert main(["lint", str(encoder)]) == 0
    assert main(["optimize", "--in-place", str(encoder / "Manifest.json"), str(repository / "fp32")]) == 0
    assert {package: files_of(package) for package in before} == fixed  # nothing left to fix: left untouched

"""package.atomic.replacing: a package is written whole or not at all, and an old one survives failure."""

from __future__ import annotations

import os

import pytest

from mil_passes.package import atomic
from mil_passes.package.atomic import replacing


def make_package(path, text):
    path.mkdir()
    (path / "Manifest.json").write_text(text)


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_a_new_package_appears_only_when_the_block_succeeds(tmp_path):
    out = tmp_path / "m.mlpackage"
    with replacing(out) as written:
        make_package(written, "new")
        assert not out.exists()
    assert (out / "Manifest.json").read_text() == "new" and leftovers(tmp_path) == []


def test_a_failure_leaves_the_old_package_and_no_partial_files(tmp_path):
    out = tmp_path / "m.mlpackage"
    make_package(out, "old")
    with pytest.raises(RuntimeError, match="boom"):
        with replacing(out) as written:
            make_package(written, "half")
            raise RuntimeError("boom")
    assert (out / "Manifest.json").read_text() == "old" and leftovers(tmp_path) == []


def test_an_interrupt_between_the_two_renames_puts_the_old_package_back(tmp_path, monkeypatch):
    out = tmp_path / "m.mlpackage"
    make_package(out, "old")
    real_replace = os.replace
    calls = []

    def interrupted(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the old package is aside; the new one never arrives
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with replacing(out) as written:
            make_package(written, "new")
    monkeypatch.setattr(atomic.os, "replace", real_replace)
    assert (out / "Manifest.json").read_text() == "old" and leftovers(tmp_path) == []


def test_writing_nothing_is_an_error_and_changes_nothing(tmp_path):
    out = tmp_path / "m.mlpackage"
    make_package(out, "old")
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with replacing(out):
            pass
    assert (out / "Manifest.json").read_text() == "old"

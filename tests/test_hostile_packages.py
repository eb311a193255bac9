"""Hostile strings in a package: each gets exit 2 and one line of at most ~300 characters (long
strings cut in the middle), nothing written, the input unchanged; and an exception that is not the
user's doing gets exit 3 and one line naming the file its traceback went to."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from coremltools import proto

from mil_passes.cli import main
from mil_passes.examples import streaming_cache_program
from mil_passes.package import io as mlpackage
from mil_passes.package.untrusted import json_depth, one_line, path_problem_of, shown

MODEL = "Data/com.apple.CoreML/model.mlmodel"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "small.mlpackage"
    return mlpackage.save(streaming_cache_program(layers=2, channels=8), path)


def _root_entry(pkg: Path, edit) -> None:
    manifest = json.loads((pkg / "Manifest.json").read_text())
    edit(manifest, manifest["itemInfoEntries"][manifest["rootModelIdentifier"]])
    (pkg / "Manifest.json").write_text(json.dumps(manifest))


def _set_path(value: str):
    return lambda pkg: _root_entry(pkg, lambda manifest, entry: entry.update(path=value))


def _manifest_bytes(data: bytes):
    return lambda pkg: (pkg / "Manifest.json").write_bytes(data)


def _weight_file_name(name: str):
    def edit(pkg: Path) -> None:
        spec = proto.Model_pb2.Model()
        spec.ParseFromString((pkg / MODEL).read_bytes())
        block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
        for op in block.operations:
            value = op.attributes["val"] if "val" in op.attributes else None
            if value is not None and value.HasField("blobFileValue"):
                value.blobFileValue.fileName = name
                break
        (pkg / MODEL).write_bytes(spec.SerializeToString())

    return edit


def _identifier(value: str):
    def edit(manifest, entry):
        entries = manifest["itemInfoEntries"]
        entries[value] = entries.pop(manifest["rootModelIdentifier"])
        manifest["rootModelIdentifier"] = value + "-not-listed"

    return lambda pkg: _root_entry(pkg, edit)


HOSTILE = {
    "manifest_100000_deep": (_manifest_bytes(b"[" * 100_000 + b"]" * 100_000), r"Manifest.json nests 100,000 levels"),
    "manifest_deep_object": (_manifest_bytes(b'{"a":' * 5000 + b"1" + b"}" * 5000), "nests 5,000 levels deep"),
    "nul_in_entry_path": (
        _set_path("com.apple.CoreML/mo\0del.mlmodel"),
        r"path 'com.apple.CoreML/mo\\x00del.mlmodel' holds a NUL",
    ),
    "lone_surrogate_in_path": (
        _manifest_bytes(b'{"itemInfoEntries": {"m": {"path": "a\\udc80.mlmodel"}}, "rootModelIdentifier": "m"}'),
        r"'a\\udc80.mlmodel' holds a lone surrogate",
    ),
    "control_character_in_path": (_set_path("com.apple.CoreML/model\n.mlmodel"), r"holds the control character \\n"),
    "path_of_50000_characters": (_set_path("x" * 50_000), "is 50,000 characters long"),
    "path_of_500_levels": (_set_path("a/" * 500 + "m"), "has 501 levels"),
    "name_of_300_bytes": (_set_path("é" * 150), "has a name of 300 bytes"),
    "integer_of_5000_digits": (
        _manifest_bytes(b'{"fileFormatVersion": ' + b"9" * 5000 + b"}"),
        "an integer of 5,000 digits",
    ),
    "identifier_of_newlines": (_identifier("x\n" * 5000), r"names root model 'x\\nx\\n.*…"),
    "nul_in_weight_file_name": (
        _weight_file_name("@model_path/weights/we\0ight.bin"),
        r"'we\\x00ight.bin' holds a NUL",
    ),
    "weight_file_name_of_10000_characters": (
        _weight_file_name("@model_path/weights/" + "w" * 10_000),
        "10,000 characters",
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_strings_get_exit_2_and_one_short_line(small, tmp_path, capsys, name):
    edit, message = HOSTILE[name]
    package = tmp_path / "model.mlpackage"
    shutil.copytree(small, package)
    edit(package)
    before = {p: p.read_bytes() for p in package.rglob("*") if p.is_file()}
    output = tmp_path / "fixed.mlpackage"
    for argv in (["lint", package], ["optimize", package, "-o", output], ["verify", package, "--feeds", "1"]):
        status = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert (status, out) == (2, ""), err
        assert len(err.splitlines()) == 1 and len(err) <= 301, err
        assert err.startswith(f"mil-passes: error: {package}: ") and re.search(message, err), err
    assert not output.exists()
    assert {p: p.read_bytes() for p in package.rglob("*") if p.is_file()} == before


def test_an_unexpected_exception_is_exit_3_with_one_line_and_the_traceback_in_a_file(small, capsys, monkeypatch):
    def broken(path):
        raise RuntimeError("an invariant broke\nover two lines")

    monkeypatch.setattr(mlpackage, "read", broken)
    assert main(["lint", str(small)]) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    found = re.fullmatch(
        r"mil-passes: internal error in mil-passes, please report: RuntimeError: an invariant broke over two "
        r"lines; traceback in (\S+)\n",
        err,
    )
    assert found, err
    traceback_file = Path(found.group(1))
    text = traceback_file.read_text()
    traceback_file.unlink()
    assert "Traceback (most recent call last)" in text and "in broken" in text and "RuntimeError" in text


def test_shown_strings_are_printable_and_cut_in_the_middle():
    assert shown("plain") == "plain"
    assert shown("a\0b\nc\ud800") == "a\\x00b\\nc\\ud800"
    cut = shown("head" + "x" * 10_000 + "tail", 40)
    assert len(cut) <= 40 and cut.startswith("headx") and cut.endswith("xtail") and "…" in cut
    assert one_line("a\n  b\tc") == "a b c" and len(one_line("y" * 100_000)) <= 300
    assert json_depth(b'[{"a": "[[[[{{{{"}]') == 2 and json_depth(b"") == 0
    assert path_problem_of("com.apple.CoreML/model.mlmodel") is None

"""Names from a package reach the terminal escaped: an op named with an escape sequence, a carriage
return or a line break cannot clear the screen, retitle the window or forge a line of the report."""

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.cli import main
from mil_passes.package import io as mlpackage

EVIL = "a\x1b]0;owned\x07\x1b[2J\rerror: forged\nb"


@pytest.fixture(scope="module")
def evil_package(tmp_path_factory):
    @mb.program(input_specs=[mb.TensorSpec((1, 8), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=mb.mul(x=x, y=np.float32(2.0), name=EVIL), y=np.float32(1.0), name="y")

    return mlpackage.save(prog, tmp_path_factory.mktemp("evil") / "evil.mlpackage")


@pytest.mark.parametrize("options", [[], ["--all"], ["--segments"]])
def test_lint_prints_names_escaped(evil_package, capsys, options):
    main(["lint", str(evil_package), *options])
    out = capsys.readouterr().out
    assert "a\\x1b]0;owned\\x07\\x1b[2J\\rerror: forged\\nb" in out  # the fp32 op is named
    assert not any(ch in out for ch in "\x1b\x07\r")
    assert not any(line.startswith("error: forged") for line in out.splitlines())


@pytest.fixture(scope="module")
def evil_refusal_package(tmp_path_factory):
    """An output named EVIL, and a gather named after it that optimize leaves (5 runs: a refusal)."""

    @mb.program(input_specs=[mb.TensorSpec((1, 8), dtype=types.fp32)], opset_version=ct.target.iOS17)
    def prog(x):
        picked = mb.gather(x=x, indices=np.array([0, 2, 4, 6, 7, 1], np.int32), axis=1, name=EVIL + "g")
        return mb.add(x=picked, y=np.float32(1.0), name=EVIL)

    return mlpackage.save(prog, tmp_path_factory.mktemp("evil") / "evil_refusal.mlpackage")


@pytest.mark.parametrize(
    "command, status",
    [
        (["optimize", "{package}", "-o", "{out}", "--explain"], 1),  # the fp32 findings stay: exit 1
        (["verify", "{package}", "--pipeline", "common::dead_code_elimination", "--feeds", "1"], 0),
    ],
    ids=["optimize", "verify"],
)
def test_optimize_and_verify_print_names_escaped(evil_refusal_package, capsys, tmp_path, command, status):
    argv = [arg.format(package=evil_refusal_package, out=tmp_path / "out.mlpackage") for arg in command]
    assert main(argv) == status
    out = capsys.readouterr().out
    assert "a\\x1b]0;owned\\x07\\x1b[2J\\rerror: forged\\nb" in out  # the refusal's op, the output's name
    assert not any(ch in out for ch in "\x1b\x07\r")
    assert not any(line.startswith("error: forged") for line in out.splitlines())

"""mil-passes specialize: a RangeDim input fixed to one shape (its shape arithmetic folded) or to
EnumeratedShapes; OUT predicts what IN predicts at each shape; bad requests exit 2 in one line,
nothing written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import coremltools as ct

from mil_passes.cli import main
from mil_passes.ir import op_counts
from mil_passes.lint import lint
from mil_passes.package.io import read
from mil_passes.package.specialize import (
    SpecializeError,
    allowed,
    check_request,
    parse_shape,
    shapes_by_input,
    specialize_package,
    specialized_spec,
)
from mil_passes.reference import predict

torch = pytest.importorskip("torch")


class Heads(torch.nn.Module):
    """Splits a sequence into heads by its run-time batch and length: with two RangeDims,
    DEFAULT keeps the shape arithmetic."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, scale):
        y = self.proj(x).view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        return (y * scale).sum(-1)


def convert(path: Path, *, flexible: bool = True, enumerated: bool = False) -> Path:
    torch.manual_seed(0)
    module = Heads().eval()
    example = (torch.randn(1, 5, 8), torch.ones(1))
    batch = ct.RangeDim(lower_bound=1, upper_bound=4, default=1) if flexible else 1
    seq = ct.RangeDim(lower_bound=2, upper_bound=16, default=5) if flexible else 5
    shape = ct.EnumeratedShapes(shapes=[(1, 3, 8), (1, 5, 8)], default=(1, 5, 8)) if enumerated else (batch, seq, 8)
    mlmodel = ct.convert(
        torch.jit.trace(module, example),
        inputs=[ct.TensorType(name="x", shape=shape), ct.TensorType(name="scale", shape=(1,))],
        outputs=[ct.TensorType(name="y")],
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS17,
        skip_model_load=True,
    )
    mlmodel.save(str(path))
    return path


@pytest.fixture(scope="module")
def flexible(tmp_path_factory) -> Path:
    return convert(tmp_path_factory.mktemp("flexible") / "heads.mlpackage")


def outputs(path: Path, length: int) -> np.ndarray:
    rng = np.random.default_rng(length)
    feed = {"x": rng.standard_normal((1, length, 8)).astype(np.float32), "scale": np.array([1.5], np.float32)}
    return predict(ct.models.MLModel(str(path), skip_model_load=True), feed)["y"]


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + file.read_bytes())
    return digest.hexdigest()


def test_one_shape_fixes_the_input_folds_its_shape_arithmetic_and_predicts_the_same(flexible, tmp_path):
    out = tmp_path / "fixed.mlpackage"
    run = specialize_package(flexible, out, {"x": [(1, 7, 8)]})
    assert run.ops_after < run.ops_before
    package = read(out)
    assert "shape" in op_counts(read(flexible).program) and "shape" not in op_counts(package.program)
    (x, scale) = package.spec.description.input
    assert (
        list(x.type.multiArrayType.shape) == [1, 7, 8] and x.type.multiArrayType.WhichOneof("ShapeFlexibility") is None
    )
    assert list(scale.type.multiArrayType.shape) == [1]
    assert [o.name for o in package.spec.description.output] == ["y"]
    assert tuple(package.program.functions["main"].inputs["x"].shape) == (1, 7, 8)
    assert "ane-range-shape" in {f.rule for f in read(flexible).lint()}
    assert "ane-range-shape" not in {f.rule for f in package.lint()}
    assert outputs(out, 7).tobytes() == outputs(flexible, 7).tobytes()


def test_several_shapes_make_enumerated_shapes_that_predict_the_same(flexible, tmp_path):
    out = tmp_path / "enumerated.mlpackage"
    specialize_package(flexible, out, {"x": [(1, 4, 8), (1, 12, 8)]})
    array = read(out).spec.description.input[0].type.multiArrayType
    assert [list(s.shape) for s in array.enumeratedShapes.shapes] == [[1, 4, 8], [1, 12, 8]]
    assert list(array.shape) == [1, 4, 8]  # the default
    for length in (4, 12):
        assert outputs(out, length).tobytes() == outputs(flexible, length).tobytes()


def test_the_command_writes_and_says_what_it_did(flexible, tmp_path, capsys):
    out = tmp_path / "cli.mlpackage"
    status = main(["specialize", str(flexible), "-o", str(out), "--shape", "x=1,3,8", "--quiet"])
    text = capsys.readouterr().out
    assert status == 0 and out.is_dir()
    assert "input 'x': 1x3x8 (fixed)" in text and text.rstrip().splitlines()[-1].startswith(f"wrote {out}")


@pytest.mark.parametrize(
    "shape, message",
    [
        ("nope=1,3,8", "the model has no input 'nope' (inputs: scale, x)"),
        ("x=1,3", "input 'x' has rank 3, not 2 (1x3 asked)"),
        ("x=1,17,8", "input 'x' takes 2–16 on axis 1, not 17 (1x17x8 asked)"),
        ("scale=1", "input 'scale' is not flexible: it has one shape already"),
        ("x=1,three,8", "--shape 'x=1,three,8': write NAME=D0,D1,… with sizes of at least 1"),
        ("x=1,0,8", "with sizes of at least 1"),
    ],
)
def test_bad_requests_exit_2_in_one_line_and_write_nothing(flexible, tmp_path, capsys, shape, message):
    before = tree_digest(flexible)
    out = tmp_path / "bad.mlpackage"
    status = main(["specialize", str(flexible), "-o", str(out), "--shape", shape, "--quiet"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and list(tmp_path.iterdir()) == [] and tree_digest(flexible) == before


def test_a_failed_write_leaves_nothing(flexible, tmp_path, monkeypatch):
    import mil_passes.package.specialize as specialize

    def broken(*args, **kwargs):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(specialize, "write_new", broken)
    out = tmp_path / "broken.mlpackage"
    with pytest.raises(RuntimeError):
        specialize_package(flexible, out, {"x": [(1, 3, 8)]})
    assert list(tmp_path.iterdir()) == []


def test_an_enumerated_input_takes_only_its_shapes(tmp_path):
    spec = read(convert(tmp_path / "enum.mlpackage", enumerated=True)).spec
    x = spec.description.input[0]
    assert allowed(x, (1, 3, 8)) is None
    assert allowed(x, (1, 4, 8)).startswith("takes only the shapes ") and "1x3x8" in allowed(x, (1, 4, 8))
    check_request(spec, {"x": [(1, 5, 8)]})
    fixed = specialized_spec(spec, {"x": [(1, 5, 8)]})
    assert list(fixed.description.input[0].type.multiArrayType.shape) == [1, 5, 8]


def test_states_and_empty_requests_are_refused():
    from coremltools import proto

    spec = proto.Model_pb2.Model()
    spec.description.state.add().name = "cache"
    with pytest.raises(SpecializeError, match="input 'cache' is a state"):
        check_request(spec, {"cache": [(1, 2)]})
    with pytest.raises(SpecializeError, match="give at least one --shape"):
        check_request(spec, {})


def test_shapes_parse_and_group_by_input():
    assert parse_shape("x=1,3,8") == ("x", (1, 3, 8))
    assert shapes_by_input(["x=1,3", "y=2", "x=1,4", "x=1,3"]) == {"x": [(1, 3), (1, 4)], "y": [(2,)]}
    for bad in ("x", "=1,2", "x=", "x=1,,2"):
        with pytest.raises(SpecializeError):
            parse_shape(bad)


def test_lint_of_the_fixed_model_finds_no_run_time_shape(flexible, tmp_path):
    out = tmp_path / "lint.mlpackage"
    specialize_package(flexible, out, {"x": [(1, 9, 8)]})
    assert not [f for f in lint(read(out).program) if f.rule == "runtime-shape"]

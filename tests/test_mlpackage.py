"""mlpackage.read/load/save: round trips keep the protobuf and weights exactly; the protobuf
check reports and fixes duplicated names and wrong declared types."""

import hashlib
import json

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.frontend.milproto.load import load as coremltools_load
from coremltools.converters.mil.mil import get_new_symbol, types
from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipeline

from mil_passes.package import io as mlpackage
from pass_helpers import without_placement
from mil_passes.package.files import PackageError
from mil_passes.reference import evaluate
from mil_passes.ir import iter_ops, iter_proto_ops
from mil_passes.testing.models import handwritten as hand
from mil_passes.testing.check import random_inputs

IOS17 = ct.target.iOS17
WEIGHTS = "Data/com.apple.CoreML/weights/weight.bin"


def spec_of(path):
    return ct.utils.load_spec(str(path))


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def convert(prog, inputs=None, target=IOS17):
    return ct.convert(
        prog,
        convert_to="mlprogram",
        pass_pipeline=PassPipeline.EMPTY,
        minimum_deployment_target=target,
        skip_model_load=True,
        inputs=inputs,
    )


def assert_same_outputs(a, b, feeds):
    out_a, out_b = evaluate(a, feeds), evaluate(b, feeds)
    assert list(out_a) == list(out_b)
    for name in out_a:
        assert out_a[name].dtype == out_b[name].dtype
        assert out_a[name].tobytes() == out_b[name].tobytes(), name


def round_trip(source, tmp_path, name="round_trip.mlpackage"):
    """read ``source``, save it with no pass, read the result back."""
    package = mlpackage.read(source)
    written = mlpackage.save(package.program, tmp_path / name, like=package)
    return package, mlpackage.read(written)


# -- round trips --------------------------------------------------------------------------------


def flexible_program():
    """Ranged and enumerated inputs, fp32 and fp16 weights large enough to live in weight.bin."""
    rng = np.random.default_rng(0)
    batch, rows = get_new_symbol(), get_new_symbol()
    w32 = rng.standard_normal((4, 50)).astype(np.float32)
    w16 = rng.standard_normal((3, 20)).astype(np.float16)

    @mb.program(
        input_specs=[mb.TensorSpec((batch, 4)), mb.TensorSpec((rows, 3), dtype=types.fp16)], opset_version=IOS17
    )
    def prog(x, y):
        return mb.matmul(x=x, y=w32, name="projected"), mb.relu(x=mb.matmul(x=y, y=w16), name="gated")

    return prog


@pytest.fixture(scope="module")
def flexible_package(tmp_path_factory):
    model = convert(
        flexible_program(),
        inputs=[
            ct.TensorType("x", shape=(ct.RangeDim(1, 10, 3), 4)),
            ct.TensorType("y", shape=ct.EnumeratedShapes([(2, 3), (4, 3)], default=(4, 3)), dtype=np.float16),
        ],
    )
    model.author, model.license, model.version = "A. Author", "BSD-3-Clause", "1.2.3"
    model.short_description = "a flexible model"
    model.input_description["x"] = "features"
    model.output_description["gated"] = "gated rows"
    model.user_defined_metadata["origin"] = "test"
    path = tmp_path_factory.mktemp("flexible") / "flexible.mlpackage"
    model.save(str(path))
    return path


def test_round_trip_keeps_the_whole_protobuf_and_weight_bytes(flexible_package, tmp_path):
    _, reread = round_trip(flexible_package, tmp_path)
    before, after = spec_of(flexible_package), spec_of(reread.path)
    x, y = before.description.input
    assert x.type.multiArrayType.shapeRange.sizeRanges[0].upperBound == 10  # what is kept
    assert len(y.type.multiArrayType.enumeratedShapes.shapes) == 2
    assert before.description.metadata.author == "A. Author"
    assert after.description == before.description
    assert after.specificationVersion == before.specificationVersion
    assert after.mlProgram == before.mlProgram
    assert after == before
    assert digest(reread.path / WEIGHTS) == digest(flexible_package / WEIGHTS)
    assert reread.findings == []


@pytest.mark.parametrize("batch, rows", [(1, 2), (3, 4), (10, 2)])
def test_round_trip_outputs_are_bit_identical_and_match_the_source_program(flexible_package, tmp_path, batch, rows):
    package, reread = round_trip(flexible_package, tmp_path)
    rng = np.random.default_rng(batch)
    feeds = {
        "x": rng.standard_normal((batch, 4)).astype(np.float32),
        "y": rng.standard_normal((rows, 3)).astype(np.float16),
    }
    assert_same_outputs(package.program, reread.program, feeds)
    assert_same_outputs(flexible_program(), package.program, feeds)


def control_flow_program():
    @mb.program(input_specs=[mb.TensorSpec((2,)), mb.TensorSpec((1,), dtype=types.int32)], opset_version=IOS17)
    def prog(x, n):
        def cond(a, i):
            return mb.less(x=i, y=mb.squeeze(x=n))

        def body(a, i):
            return mb.add(x=a, y=1.0), mb.add(x=i, y=1)

        a, _ = mb.while_loop(_cond=cond, _body=body, loop_vars=(x, 0))
        positive = mb.greater(x=mb.reduce_sum(x=a), y=0.0)
        return mb.cond(
            pred=positive, _true_fn=lambda: mb.mul(x=a, y=2.0), _false_fn=lambda: mb.mul(x=a, y=3.0), name="out"
        )

    return prog


def test_round_trip_of_control_flow_adds_no_placeholder_ops(tmp_path):
    source = tmp_path / "loop.mlpackage"
    convert(control_flow_program()).save(str(source))
    package, reread = round_trip(source, tmp_path)
    assert spec_of(reread.path) == spec_of(source)  # the loader's stand-in consts are not written
    assert package.findings == []  # while_loop cond/body inputs share names by design
    for count in (0, 3):
        feeds = {"x": np.array([-1.0, 0.5], np.float32), "n": np.array([count], np.int32)}
        assert_same_outputs(control_flow_program(), reread.program, feeds)


def test_the_loader_stand_ins_are_dropped_even_under_a_name_the_file_uses(tmp_path):
    """The loader names a nested block's stand-in parent with the builder's next free name; in a
    process whose counter is at 0 that is ``const_0``, a name builder-made files use too."""
    from coremltools.converters.mil.mil import Builder

    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def prog(x):
        def body(i, v):
            grown = mb.cond(pred=mb.greater(x=i, y=1.0), _true_fn=lambda: mb.add(x=v, y=1.0), _false_fn=lambda: v)
            return mb.add(x=i, y=1.0), grown

        start = mb.const(val=np.float32(0), name="const_0")
        _, out = mb.while_loop(_cond=lambda i, v: mb.less(x=i, y=3.0), _body=body, loop_vars=(start, x))
        return mb.identity(x=out, name="out")

    source = mlpackage.save(prog, tmp_path / "loop.mlpackage")
    saved = dict(Builder.name_count)
    Builder.name_count.clear()  # as in a fresh process
    try:
        package = mlpackage.read(source)
    finally:
        Builder.name_count.clear()
        Builder.name_count.update(saved)
    assert without_placement(package.lint()) == []
    names = [var.name for op in iter_ops(package.program) for var in op.outputs]
    assert len(names) == len(set(names)) and sum(op.op_type == "const" for op in iter_ops(package.program)) == sum(
        op.type == "const" for op in iter_proto_ops(spec_of(source))
    )


def test_a_saved_package_is_laid_out_as_coremltools_lays_it_out(flexible_package, tmp_path):
    from coremltools.libmodelpackage import ModelPackage

    written = mlpackage.save(mlpackage.load(flexible_package), tmp_path / "m.mlpackage", like=flexible_package)
    package = ModelPackage(str(written))
    assert Path(package.getRootModel().path()) == written / "Data/com.apple.CoreML/model.mlmodel"
    assert sorted(p.relative_to(written).as_posix() for p in written.rglob("*")) == sorted(
        p.relative_to(flexible_package).as_posix() for p in Path(flexible_package).rglob("*")
    )
    theirs, ours = (json.loads((p / "Manifest.json").read_text()) for p in (flexible_package, written))
    shape = lambda m: sorted(
        (e["name"], e["path"], e["author"], e["description"]) for e in m["itemInfoEntries"].values()
    )  # noqa: E731
    assert shape(ours) == shape(theirs) and ours["fileFormatVersion"] == theirs["fileFormatVersion"]
    assert ct.models.MLModel(str(written), skip_model_load=True).get_spec() == spec_of(written)


@pytest.fixture(scope="module")
def torch_packages(tmp_path_factory):
    pytest.importorskip("torch")
    from mil_passes.testing.models.torch_modules import CASES, convert as convert_torch

    folder = tmp_path_factory.mktemp("torch")
    packages = {}
    for case in CASES:
        examples = case.example_inputs(np.random.default_rng(0))
        model = convert_torch(case, case.instantiate(), examples)
        path = folder / f"{case.name}.mlpackage"
        model.save(str(path))
        packages[case.name] = (path, model._mil_program)
    return packages


@pytest.mark.parametrize(
    "name", ["conv_stack", "transformer_block", "embedding_where", "streaming_conv", "flexible_conv"]
)
def test_round_trip_of_torch_conversions(torch_packages, tmp_path, name):
    source, converted = torch_packages[name]
    package, reread = round_trip(source, tmp_path)
    assert spec_of(reread.path) == spec_of(source)
    assert digest(reread.path / WEIGHTS) == digest(source / WEIGHTS)
    for seed in range(2):
        feeds = random_inputs(package.program, seed=seed, sizes=4)
        assert_same_outputs(package.program, reread.program, feeds)
        assert_same_outputs(converted, package.program, feeds)


def test_mlmodel_file_holding_an_ml_program(tmp_path):
    f32 = lambda *shape: hand.tensor_type("fp32", shape)  # noqa: E731
    model = hand.ml_program(
        [("x", f32(2, 3))],
        [
            hand.const("bias", np.arange(3, dtype=np.float32)),
            hand.operation("add", [("y", f32(2, 3))], {"x": "x", "y": "bias"}),
        ],
        ["y"],
    )
    model.description.metadata.author = "hand"
    source = tmp_path / "model.mlmodel"
    source.write_bytes(model.SerializeToString())
    package = mlpackage.read(source)
    written = mlpackage.save(package.program, tmp_path / "model.mlpackage", like=source)
    assert spec_of(written).description == model.description
    feeds = {"x": np.ones((2, 3), np.float32)}
    assert evaluate(mlpackage.load(written), feeds)["y"].tolist() == [[1, 2, 3], [1, 2, 3]]


# -- names defined twice ------------------------------------------------------------------------

F32 = lambda *shape: hand.tensor_type("fp32", shape)  # noqa: E731


def write_duplicated_names(path):
    """``a`` defined twice: ``b`` reads the first (x + 1), ``out`` the second (x - 1)."""
    ops = [
        hand.const("one", np.float32(1)),
        hand.const("two", np.float32(2)),
        hand.operation("add", [("a", F32(2, 2))], {"x": "x", "y": "one"}),
        hand.operation("mul", [("b", F32(2, 2))], {"x": "a", "y": "two"}),
        hand.operation("sub", [("a", F32(2, 2))], {"x": "x", "y": "one"}),
        hand.operation("add", [("out", F32(2, 2))], {"x": "a", "y": "b"}),
    ]
    return hand.write_package(hand.ml_program([("x", F32(2, 2))], ops, ["out"]), path)


def test_duplicate_name_is_reported_resolved_by_order_and_renamed(tmp_path):
    package = mlpackage.read(write_duplicated_names(tmp_path / "dup.mlpackage"))
    (finding,) = package.findings
    assert finding.rule == "duplicate-name" and finding.severity == "error" and finding.op == "a"
    assert "'a' is defined 2 times in function 'main' (add 'a', sub 'a')" in finding.message
    assert "renamed sub 'a' -> 'a_1'" in finding.message
    x = np.array([[0, 1], [2, 3]], np.float32)
    assert evaluate(package.program, {"x": x})["out"].tolist() == ((x - 1) + 2 * (x + 1)).tolist()

    written = mlpackage.save(package.program, tmp_path / "fixed.mlpackage", like=package)
    fixed = mlpackage.read(written)
    assert fixed.findings == []
    names = [out.name for op in iter_ops(fixed.program) for out in op.outputs]
    assert len(names) == len(set(names))
    assert_same_outputs(package.program, fixed.program, {"x": x})


def test_webnn_bool_temporaries_defined_twice(tmp_path):
    """docs/evidence.md §2: logical_and(greater(x, y), lesser(x, z)) as the WebNN converter wrote it."""
    b, u8 = hand.tensor_type("bool", (2, 2)), hand.tensor_type("uint8", (2, 2))
    uint8, boolean = hand.const("uint8_name", np.array("uint8")), hand.const("bool_name", np.array("bool"))
    ops = [
        uint8,
        boolean,
        hand.const("int32_name", np.array("int32")),
        hand.operation("greater", [("t_bool", b)], {"x": "x", "y": "y"}),
        hand.operation("cast", [("t", u8)], {"x": "t_bool", "dtype": "uint8_name"}),
        hand.operation("less", [("u_bool", b)], {"x": "x", "y": "z"}),
        hand.operation("cast", [("u", u8)], {"x": "u_bool", "dtype": "uint8_name"}),
        hand.operation("cast", [("t_bool", b)], {"x": "t", "dtype": "bool_name"}),
        hand.operation("cast", [("u_bool", b)], {"x": "u", "dtype": "bool_name"}),
        hand.operation("logical_and", [("out_bool", b)], {"x": "t_bool", "y": "u_bool"}),
        hand.operation("cast", [("out", hand.tensor_type("int32", (2, 2)))], {"x": "out_bool", "dtype": "int32_name"}),
    ]
    path = hand.write_package(hand.ml_program([(n, F32(2, 2)) for n in "xyz"], ops, ["out"]), tmp_path / "w.mlpackage")
    package = mlpackage.read(path)
    assert [(f.rule, f.op) for f in package.findings] == [("duplicate-name", "t_bool"), ("duplicate-name", "u_bool")]
    logical_and = next(op for op in iter_ops(package.program) if op.op_type == "logical_and")
    assert (logical_and.x.name, logical_and.y.name) == ("t_bool_1", "u_bool_1")
    assert logical_and.x.op.op_type == "cast"  # the definition before the use: the cast back to bool
    feeds = random_inputs(package.program, seed=1)
    expected = ((feeds["x"] > feeds["y"]) & (feeds["x"] < feeds["z"])).astype(np.int32)
    assert evaluate(package.program, feeds)["out"].tolist() == expected.tolist()


def test_duplicate_output_name_keeps_the_interface(tmp_path):
    """The output reads the last 'out'; that definition keeps the name, the first is renamed."""
    ops = [
        hand.const("one", np.float32(1)),
        hand.operation("add", [("out", F32(2))], {"x": "x", "y": "one"}),
        hand.operation("mul", [("out", F32(2))], {"x": "out", "y": "out"}),
    ]
    path = hand.write_package(hand.ml_program([("x", F32(2))], ops, ["out"]), tmp_path / "o.mlpackage")
    package = mlpackage.read(path)
    assert "renamed add 'out' -> 'out_1'" in package.findings[0].message
    x = np.array([1, 2], np.float32)
    assert evaluate(package.program, {"x": x})["out"].tolist() == ((x + 1) ** 2).tolist()


def test_a_branch_shadowing_an_outer_name_is_renamed_and_scoped(tmp_path):
    """A cond branch redefines 'a'; the other branch and the ops after the cond read the outer
    one (coremltools' loader has one table of names, so the branch's 'a' would leak out)."""
    true_branch, false_branch = hand.MIL.Block(), hand.MIL.Block()
    true_branch.operations.append(hand.operation("mul", [("a", F32(2))], {"x": "x", "y": "two"}))
    true_branch.outputs.append("a")
    false_branch.operations.append(hand.operation("mul", [("t", F32(2))], {"x": "a", "y": "three"}))
    false_branch.outputs.append("t")
    branch = hand.operation("cond", [("c", F32(2))], {"pred": "pred"})
    branch.blocks.extend([true_branch, false_branch])
    ops = [
        hand.const("zero", np.float32(0)),
        hand.const("one", np.float32(1)),
        hand.const("two", np.float32(2)),
        hand.const("three", np.float32(3)),
        hand.operation("reduce_sum", [("total", F32())], {"x": "p"}),
        hand.operation("greater", [("pred", hand.tensor_type("bool", ()))], {"x": "total", "y": "zero"}),
        hand.operation("add", [("a", F32(2))], {"x": "x", "y": "one"}),
        branch,
        hand.operation("add", [("out", F32(2))], {"x": "a", "y": "c"}),
    ]
    model = hand.ml_program([("x", F32(2)), ("p", F32(1))], ops, ["out"])
    package = mlpackage.read(hand.write_package(model, tmp_path / "branch.mlpackage"))
    (finding,) = package.findings
    assert "renamed mul 'a' -> 'a_1'" in finding.message
    x = np.array([1, 2], np.float32)
    for pred, branch_value in ((True, 2 * x), (False, 3 * (x + 1))):
        got = evaluate(package.program, {"x": x, "p": np.array([1 if pred else -1], np.float32)})["out"]
        assert got.tolist() == ((x + 1) + branch_value).tolist()


def test_input_and_output_sharing_a_name_cannot_be_fixed(tmp_path):
    ops = [hand.const("one", np.float32(1)), hand.operation("add", [("x", F32(2))], {"x": "x", "y": "one"})]
    path = hand.write_package(hand.ml_program([("x", F32(2))], ops, ["x"]), tmp_path / "clash.mlpackage")
    with pytest.raises(PackageError, match=r"clash.mlpackage: function 'main': input 'x' and the output add 'x'"):
        mlpackage.read(path)


def test_use_before_any_definition_is_refused(tmp_path):
    ops = [hand.operation("relu", [("y", F32(2))], {"x": "ghost"})]
    model = hand.ml_program([("x", F32(2))], ops, ["y"])
    path = hand.write_package(model, tmp_path / "ghost.mlpackage")
    with pytest.raises(PackageError, match="relu 'y' reads 'ghost', which nothing defines before it"):
        mlpackage.read(path)


# -- declared types -----------------------------------------------------------------------------


def write_wrong_conv_input_type(path):
    """The pywebnn MobileNetV2 case: clip's output declared tensor<fp32, [1]>, a conv reads it."""
    weight = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    blob, (offset,) = hand.blob_file([weight])
    ops = [
        hand.const("lo", np.float32(0)),
        hand.const("hi", np.float32(6)),
        hand.operation("clip", [("act", F32(1))], {"x": "x", "alpha": "lo", "beta": "hi"}),
        hand.blob_const("w", "fp32", weight.shape, offset),
        hand.const("valid", np.array("valid")),
        hand.operation("conv", [("out", F32(1, 4, 6, 6))], {"x": "act", "weight": "w", "pad_type": "valid"}),
    ]
    model = hand.ml_program([("x", F32(1, 3, 8, 8))], ops, ["out"])
    return hand.write_package(model, path, weights={"weight.bin": blob}), model


def test_wrong_declared_type_is_named_and_fixed(tmp_path):
    path, model = write_wrong_conv_input_type(tmp_path / "conv.mlpackage")
    with pytest.raises(AssertionError, match="Mismatch between var types"):  # what coremltools says
        coremltools_load(
            model_spec=model, specification_version=8, file_weights_dir=str(path / "Data/com.apple.CoreML/weights")
        )
    package = mlpackage.read(path)
    (finding,) = package.findings
    assert (finding.rule, finding.severity, finding.op) == ("declared-type-mismatch", "error", "act")
    assert (
        "clip 'act' declares 'act' as tensor<fp32, [1]>, but its inputs give tensor<fp32, [1, 3, 8, 8]>"
    ) in finding.message

    written = mlpackage.save(package.program, tmp_path / "fixed.mlpackage", like=package)
    fixed = mlpackage.read(written)
    assert fixed.findings == []
    clip = next(
        op
        for op in spec_of(written).mlProgram.functions["main"].block_specializations["CoreML7"].operations
        if op.type == "clip"
    )
    assert [d.constant.size for d in clip.outputs[0].type.tensorType.dimensions] == [1, 3, 8, 8]
    feeds = random_inputs(package.program, seed=0)
    assert_same_outputs(package.program, fixed.program, feeds)


def reshape_with_zeros():
    """docs/evidence.md §3: reshape(expand_dims(x[B, S, 32], -1), [0, 0, 4, 8]) gets the type [0, 0, 4, 8]."""
    batch, seq = get_new_symbol(), get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec((batch, seq, 32))], opset_version=IOS17)
    def prog(x):
        heads = mb.reshape(x=mb.expand_dims(x=x, axes=[-1], name="column"), shape=[0, 0, 4, 8], name="heads")
        return mb.mul(x=heads, y=2.0, name="out")

    return prog


def test_coremltools_writes_a_literal_zero_type_for_reshape_and_it_is_fixed(tmp_path):
    source = tmp_path / "heads.mlpackage"
    flexible = ct.TensorType("x", shape=(ct.RangeDim(1, 4), ct.RangeDim(1, 16), 32))
    convert(reshape_with_zeros(), inputs=[flexible]).save(str(source))
    block = spec_of(source).mlProgram.functions["main"].block_specializations["CoreML7"]
    reshape = next(op for op in block.operations if op.type == "reshape")
    assert [d.constant.size for d in reshape.outputs[0].type.tensorType.dimensions] == [0, 0, 4, 8]

    package = mlpackage.read(source)
    assert [(f.rule, f.op) for f in package.findings] == [
        ("declared-type-mismatch", "heads"),
        ("declared-type-mismatch", "out"),
    ]
    assert "tensor<fp32, [0, 0, 4, 8]>, but its inputs give tensor<fp32, [?, ?, 4, 8]>" in package.findings[0].message
    assert "leaves a reshape's 0 unresolved" in package.findings[0].message

    written = mlpackage.save(package.program, tmp_path / "fixed.mlpackage", like=package)
    fixed = mlpackage.read(written)
    assert fixed.findings == []
    output = spec_of(written).description.output[0].type.multiArrayType
    assert list(output.shape) == []  # no literal zeros left in the description either
    for shape in [(1, 1, 32), (2, 3, 32), (4, 16, 32)]:
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        got = evaluate(fixed.program, {"x": x})["out"]
        assert got.tobytes() == (x.reshape(shape[0], shape[1], 4, 8) * np.float32(2)).tobytes()


# -- save ---------------------------------------------------------------------------------------


def test_save_refuses_what_it_cannot_write(flexible_package, tmp_path):
    package = mlpackage.read(flexible_package)
    with pytest.raises(PackageError, match=r"model.mlmodel: an ML Program is written as a folder named \*.mlpackage"):
        mlpackage.save(package.program, tmp_path / "model.mlmodel", like=package)
    with pytest.raises(PackageError, match="does not exist"):
        mlpackage.save(package.program, tmp_path / "missing" / "m.mlpackage", like=package)
    with pytest.raises(PackageError, match=r"already exists \(--force replaces it\)"):
        mlpackage.save(package.program, flexible_package, like=package)
    (tmp_path / "notes.mlpackage").mkdir()
    with pytest.raises(PackageError, match="exists and is not an .mlpackage; not replacing it"):
        mlpackage.save(package.program, tmp_path / "notes.mlpackage", like=package, overwrite=True)
    other = mlpackage.read(write_duplicated_names(tmp_path / "other.mlpackage"))
    with pytest.raises(ValueError, match=r"the program's inputs \['x', 'y'\] are not the described \['x'\]"):
        mlpackage.save(package.program, tmp_path / "mixed.mlpackage", like=other)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.mlpackage", "other.mlpackage"]


def test_save_overwrites_a_package_when_asked(flexible_package, tmp_path):
    package = mlpackage.read(flexible_package)
    target = write_duplicated_names(tmp_path / "target.mlpackage")
    mlpackage.save(package.program, target, like=package, overwrite=True)
    assert spec_of(target) == spec_of(flexible_package)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target.mlpackage"]


def test_save_without_like_describes_the_program(tmp_path):
    written = mlpackage.save(control_flow_program(), tmp_path / "plain.mlpackage")
    spec = spec_of(written)
    assert [f.name for f in spec.description.input] == ["x", "n"]
    assert spec.specificationVersion == int(IOS17)
    assert mlpackage.read(written).findings == []


def test_many_definitions_of_one_name_are_renamed_in_linear_time():
    """4,000 ops all defining ``t`` (8x 500): about 8x the time, not the 40x a suffix search from
    ``t_1`` for each rename took."""
    import time

    from mil_passes.package.duplicate_names import fix_duplicate_names

    def chain(count):
        ops = [hand.operation("relu", [("t", F32(2))], {"x": "x"})]
        ops += [hand.operation("relu", [("t", F32(2))], {"x": "t"}) for _ in range(count - 1)]
        ops += [hand.operation("relu", [("out", F32(2))], {"x": "t"})]
        return hand.ml_program([("x", F32(2))], ops, ["out"])

    def best_seconds(count):
        best = float("inf")
        for _ in range(3):
            spec = chain(count)
            start = time.perf_counter()
            (finding,) = fix_duplicate_names(spec)
            best = min(best, time.perf_counter() - start)
        assert f"'t' is defined {count} times" in finding.message
        names = [
            out.name
            for op in spec.mlProgram.functions["main"].block_specializations["CoreML7"].operations
            for out in op.outputs
        ]
        assert len(set(names)) == len(names) and names[-2] == f"t_{count - 1}"
        return best

    assert best_seconds(4000) < 20 * best_seconds(500)


@given(st.lists(st.lists(st.integers(1, 3), max_size=3).map(tuple), min_size=2, max_size=12))
def test_clashing_definitions_are_those_whose_scopes_nest(scopes):
    """The counting check agrees with the definition: two definitions of a name clash when one's
    scope encloses or equals the other's (siblings, like a cond's two branches, do not)."""
    from mil_passes.package.duplicate_names import _clashing, _Definition

    definitions = [_Definition("x", scope, f"def {i}") for i, scope in enumerate(scopes)]

    def nests(a: tuple, b: tuple) -> bool:
        shorter, longer = sorted((a, b), key=len)
        return longer[: len(shorter)] == shorter

    pairwise = [i for i, a in enumerate(scopes) if any(nests(a, b) for j, b in enumerate(scopes) if j != i)]
    assert _clashing(definitions, list(range(len(scopes)))) == pairwise

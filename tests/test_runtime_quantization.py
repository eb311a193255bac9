"""quantize/dequantize whose scale or zero point is computed at run time: found in the protobuf
(``dynamic-quantization-param``), lowered before coremltools' loader, bit for bit the op spec's
formula in the input's float dtype; the Builder helpers emit the same ops."""

import json
import re
from collections import Counter

import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.frontend.milproto.load import load as coremltools_load
from coremltools.converters.mil.mil import types
from hypothesis import given, strategies as st

import coremltools as ct

from mil_passes.cli import main
from mil_passes.ir import iter_ops, op_counts
from mil_passes.package import io as mlpackage
from mil_passes.package.files import PackageError
from mil_passes.package.optimize import as_read, optimize_package
from mil_passes.package.runtime_quantization import RULE, lower_runtime_quantization
from mil_passes.quantization import FLOAT_DTYPES, RANGES, dequantize, fold, quantize
from mil_passes.reference import evaluate
from mil_passes.testing.models import handwritten as hand
from pass_helpers import without_placement

F32 = lambda *shape: hand.tensor_type("fp32", shape)  # noqa: E731


# -- the op spec's formulas in numpy, in the input's float dtype ------------------------------


def along_axis(param, rank: int, axis):
    param = np.asarray(param)
    if axis is None or param.ndim != 1:
        return param
    axis = axis % rank
    return param.reshape([-1] + [1] * (rank - 1 - axis))


def quantize_formula(x, scale, zero_point, axis, output_dtype):
    """``clip(round_half_even(x / scale) + zero_point)`` with every step in x's dtype."""
    dtype = x.dtype
    result = np.rint(x / along_axis(scale, x.ndim, axis).astype(dtype))
    if zero_point is not None:
        result = result + along_axis(zero_point, x.ndim, axis).astype(dtype)
    low, high = RANGES[output_dtype]
    assert result.dtype == dtype
    return np.clip(result, dtype.type(low), dtype.type(high)).astype(output_dtype)


def dequantize_formula(q, scale, zero_point, axis):
    """``(q - zero_point) * scale`` with every step in scale's dtype."""
    dtype = np.asarray(scale).dtype
    shifted = q.astype(dtype)
    if zero_point is not None:
        shifted = shifted - along_axis(zero_point, q.ndim, axis).astype(dtype)
    return shifted * along_axis(scale, q.ndim, axis)


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- the issue's package: zero point computed from an input, a dequantize scale computed ------


def webnn_package(path):
    """quantize(x, 0.5, zp) and dequantize(q, s * 0.5, zp) per channel (axis 1), zp = cast(z, int8)."""
    i8 = lambda *shape: hand.tensor_type("int8", shape)  # noqa: E731
    ops = [
        hand.const("int8_name", np.array("int8")),
        hand.const("axis", np.int32(1)),
        hand.const("half", np.float32(0.5)),
        hand.operation("cast", [("zp", i8(3))], {"x": "z", "dtype": "int8_name"}),
        hand.operation(
            "quantize",
            [("q", i8(2, 3, 4))],
            {"input": "x", "scale": "half", "zero_point": "zp", "axis": "axis", "output_dtype": "int8_name"},
        ),
        hand.operation("mul", [("s_half", F32(3))], {"x": "s", "y": "half"}),
        hand.operation(
            "dequantize", [("out", F32(2, 3, 4))], {"input": "q", "scale": "s_half", "zero_point": "zp", "axis": "axis"}
        ),
    ]
    model = hand.ml_program([("x", F32(2, 3, 4)), ("z", hand.tensor_type("int32", (3,))), ("s", F32(3))], ops, ["out"])
    return hand.write_package(model, path), model


def webnn_expected(feeds):
    zp = feeds["z"].astype(np.int8)
    q = quantize_formula(feeds["x"], np.float32(0.5), zp, 1, "int8")
    return dequantize_formula(q, feeds["s"] * np.float32(0.5), zp, 1)


def webnn_feeds(seed: int):
    rng = np.random.default_rng(seed)
    return {
        "x": (rng.standard_normal((2, 3, 4)) * 60).astype(np.float32),  # some values clip
        "z": rng.integers(-128, 128, 3).astype(np.int32),
        "s": rng.uniform(0.1, 4, 3).astype(np.float32),
    }


def test_coremltools_refuses_the_package_as_written(tmp_path):
    _, model = webnn_package(tmp_path / "w.mlpackage")
    with pytest.raises(ValueError, match="zero_point must be const at compile time"):
        coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")


def test_each_op_is_a_finding_naming_the_op_the_parameter_the_var_and_the_fix(tmp_path):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    findings = mlpackage.read(path).findings
    assert [(f.rule, f.severity, f.op) for f in findings] == [(RULE, "error", "q"), (RULE, "error", "out")]
    assert findings[0].message.startswith(
        "quantize 'q' reads zero_point from 'zp', which is computed at run time: the iOS17 op spec "
        "requires const zero_point"
    )
    assert findings[1].message.startswith(
        "dequantize 'out' reads scale from 's_half' and zero_point from 'zp', which are"
    )
    assert all("(fix: mil-passes optimize lowers it to " in f.message for f in findings)
    assert "real_div, round, reshape, cast, add and clip" in findings[0].message


def test_read_lowers_both_ops_and_the_program_is_the_formula(tmp_path):
    path, model = webnn_package(tmp_path / "w.mlpackage")
    package = mlpackage.read(path)
    op_types = [op.op_type for op in iter_ops(package.program)]
    assert "quantize" not in op_types and "dequantize" not in op_types
    names = [out.name for op in iter_ops(package.program) for out in op.outputs]
    assert len(names) == len(set(names))
    assert list(package.program.functions["main"].inputs) == ["x", "z", "s"]
    assert package.spec.description == model.description
    for seed in range(5):
        feeds = webnn_feeds(seed)
        assert same_bits(evaluate(package.program, feeds)["out"], webnn_expected(feeds))


def test_optimize_writes_a_package_coremltools_builds_that_lints_clean(tmp_path):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    run = optimize_package(path, tmp_path / "fixed.mlpackage")
    assert [f.rule for f in without_placement(run.report.findings_before)] == [RULE, RULE]
    assert without_placement(run.report.findings_after) == []
    written = mlpackage.read(run.output)
    assert written.findings == [] and without_placement(written.lint()) == []
    spec = written.spec
    coremltools_load(
        model_spec=spec,
        specification_version=spec.specificationVersion,
        file_weights_dir=str(run.output / "Data/com.apple.CoreML/weights"),
    )
    assert [f.name for f in spec.description.input] == ["x", "z", "s"]
    assert [f.name for f in spec.description.output] == ["out"]
    for seed in range(5):
        feeds = webnn_feeds(seed)
        assert same_bits(evaluate(written.program, feeds)["out"], webnn_expected(feeds))


def test_op_counts_before_are_those_of_the_file(tmp_path):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    package = mlpackage.read(path)
    assert +package.op_changes == Counter(quantize=1, dequantize=1)
    assert as_read(op_counts(package.program), package.op_changes) == Counter(cast=1, mul=1, quantize=1, dequantize=1)
    assert as_read(Counter(add=2), Counter()) == Counter(add=2)


def test_an_op_whose_parameters_are_const_is_left_alone(tmp_path):
    model = hand.quantization_model("quantize", (2, 3), axis=1, scale=[0.5, 1, 2], zero_point=[1, 2, 3], runtime=())
    package = mlpackage.read(hand.write_package(model, tmp_path / "c.mlpackage"))
    assert package.findings == []
    assert [op.op_type for op in iter_ops(package.program) if op.op_type != "const"] == ["quantize", "cast"]


def test_a_parameter_computed_from_consts_is_const(tmp_path):
    """coremltools counts an op reading only consts as const (``is_descendant_of_const``)."""
    model = hand.quantization_model("dequantize", (2, 3), scale=np.float32(0.5), zero_point=np.int8(0), runtime=())
    ops = model.mlProgram.functions["main"].block_specializations["CoreML7"].operations
    index = next(i for i, op in enumerate(ops) if op.type == "dequantize")
    dequantize_op = ops[index]
    dequantize_op.inputs["scale"].arguments[0].name = "scale_twice"
    mul = hand.operation("mul", [("scale_twice", hand.tensor_type("fp32", ()))], {"x": "scale", "y": "scale"})
    ops.insert(index, mul)
    assert lower_runtime_quantization(model) == []


def test_an_immediate_parameter_is_kept_as_a_const(tmp_path):
    """A parameter bound to an immediate value (no const op) becomes a const op of its own."""
    model = hand.quantization_model("quantize", (4,), scale=np.float32(0.25), runtime=("zero_point",))
    ops = model.mlProgram.functions["main"].block_specializations["CoreML7"].operations
    quantize_op = next(op for op in ops if op.type == "quantize")
    quantize_op.inputs["scale"].arguments[0].value.CopyFrom(hand.immediate(np.float32(0.25)))
    (finding,) = lower_runtime_quantization(model)
    assert "zero_point from 'zp'" in finding.message and "scale" not in finding.message.split(":")[0]
    consts = [op for op in ops if op.type == "const" and op.outputs[0].name.startswith("q_scale")]
    assert len(consts) == 1
    program = coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    x = np.array([-1.0, 0.125, 0.375, 40.0], np.float32)
    zp = np.array([3], np.int32)
    out = evaluate(program, {"x": x, "zero_point": zp})["out"]
    assert (
        out.tolist()
        == quantize_formula(x, np.float32(0.25), zp.astype(np.int8), None, "int8").astype(np.int32).tolist()
    )


def test_an_output_dtype_that_is_not_int8_or_uint8_is_one_line(tmp_path):
    model = hand.quantization_model("quantize", (2,), scale=np.float32(1), runtime=("zero_point",))
    ops = model.mlProgram.functions["main"].block_specializations["CoreML7"].operations
    next(op for op in ops if op.outputs[0].name == "int_dtype").CopyFrom(hand.const("int_dtype", np.array("int16")))
    path = hand.write_package(model, tmp_path / "bad.mlpackage")
    with pytest.raises(
        PackageError, match=r"bad\.mlpackage: quantize 'q': output_dtype 'int16' is not one of int8, uint8$"
    ):
        mlpackage.read(path)


# -- property: bit for bit the formula ----------------------------------------------------------


@st.composite
def quantization_cases(draw):
    """An op, dtypes, a shape, per-tensor or per-channel parameters (vectors or of the input's
    rank; some computed at run time), and inputs that include exact ties (k + 0.5) * scale and
    values that clip."""
    op_type = draw(st.sampled_from(["quantize", "dequantize"]))
    float_dtype, int_dtype = draw(st.sampled_from(list(FLOAT_DTYPES))), draw(st.sampled_from(list(RANGES)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    rank = len(shape)
    axis = draw(st.one_of(st.none(), st.integers(-rank, rank - 1)))
    with_zero_point = draw(st.booleans())
    runtime = draw(st.sets(st.sampled_from(["scale", "zero_point"] if with_zero_point else ["scale"]), min_size=1))
    full_rank = axis is not None and draw(st.booleans())
    param_shape = (shape[axis],) if axis is not None else ()
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    float_type = FLOAT_DTYPES[float_dtype]
    low, high = RANGES[int_dtype]
    exponents = rng.integers(-4, 3, param_shape)
    mantissas = rng.choice([1.0, 1.0, 1.5, 0.7, 3.1], param_shape)
    scale = (mantissas * np.exp2(exponents)).astype(float_type)
    zero_point = rng.integers(low, high + 1, param_shape).astype(int_dtype)
    if full_rank:  # [1, D, 1], as WebNN writes them
        full_shape = [-1 if i == axis % rank else 1 for i in range(rank)]
        scale, zero_point = scale.reshape(full_shape), zero_point.reshape(full_shape)
    if op_type == "quantize":
        broadcast_scale = np.broadcast_to(along_axis(scale, rank, axis), shape).astype(np.float64)
        halves = rng.integers(-2 * 300, 2 * 300, shape) / 2  # ties at .5 and values past the range
        x = np.where(rng.random(shape) < 0.5, halves * broadcast_scale, rng.standard_normal(shape) * 200)
        x = x.astype(float_type)
    else:
        x = rng.integers(low, high + 1, shape).astype(int_dtype)
    zero_point = zero_point if with_zero_point else None
    return op_type, float_dtype, int_dtype, shape, axis, runtime, scale, zero_point, x, full_rank


def feeds_for(case):
    op_type, _, _, _, axis, runtime, scale, zero_point, x, _ = case
    runtime_shape = lambda a: a if axis is not None else a.reshape(1)  # noqa: E731
    feeds = {"x": x if op_type == "quantize" else x.astype(np.int32)}
    if "scale" in runtime:
        feeds["scale"] = runtime_shape(scale)
    if "zero_point" in runtime:
        feeds["zero_point"] = runtime_shape(zero_point.astype(np.int32))
    return feeds


def expected_for(case):
    op_type, _, int_dtype, _, axis, _, scale, zero_point, x, _ = case
    if op_type == "quantize":
        return quantize_formula(x, scale, zero_point, axis, int_dtype).astype(np.int32)
    return dequantize_formula(x, scale, zero_point, axis)


@given(quantization_cases())
def test_the_lowered_program_is_the_formula_bit_for_bit(case):
    op_type, float_dtype, int_dtype, shape, axis, runtime, scale, zero_point, x, full_rank = case
    model = hand.quantization_model(
        op_type,
        shape,
        float_dtype=float_dtype,
        int_dtype=int_dtype,
        axis=axis,
        scale=scale,
        zero_point=zero_point,
        runtime=sorted(runtime),
        with_zero_point=zero_point is not None,
        full_rank=full_rank,
    )
    (finding,) = lower_runtime_quantization(model)
    assert all(f"{param} from '" in finding.message for param in runtime)
    program = coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    lowered = [op.op_type for op in iter_ops(program)]
    assert "quantize" not in lowered and "dequantize" not in lowered
    computed = [op for op in iter_ops(program) if op.op_type in ("real_div", "mul")]
    assert all(types.builtin_to_string(op.outputs[0].dtype) == float_dtype for op in computed)
    assert same_bits(evaluate(program, feeds_for(case))["out"], expected_for(case))


def test_ties_round_half_to_even_and_values_clip():
    """The cases the property must reach, written out: .5 ties either way, both clip bounds."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1000.0, -1000.0], np.float16)
    model = hand.quantization_model(
        "quantize", (7,), float_dtype="fp16", int_dtype="uint8", scale=np.float16(1), runtime=("zero_point",)
    )
    lower_runtime_quantization(model)
    program = coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    out = evaluate(program, {"x": x, "zero_point": np.array([3], np.int32)})["out"]
    assert out.tolist() == [3, 5, 5, 3, 1, 255, 0]


# -- the Builder helpers --------------------------------------------------------------------------


def builder_program(float_dtype: str, int_dtype: str, axis):
    fp = types.string_to_builtin(float_dtype)
    shape = (2, 3, 4)
    channels = shape[axis] if axis is not None else 1

    @mb.program(
        input_specs=[
            mb.TensorSpec(shape, dtype=fp),
            mb.TensorSpec((channels,), dtype=fp),
            mb.TensorSpec((channels,), dtype=types.int32),
        ],
        opset_version=ct.target.iOS17,
    )
    def prog(x, scale, z):
        zero_point = mb.cast(x=z, dtype=int_dtype, name="zp")
        q = quantize(x, scale, zero_point, axis=axis, output_dtype=int_dtype, name="q")
        return dequantize(q, scale, zero_point, axis=axis, name="out")

    return prog


@pytest.mark.parametrize("float_dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("int_dtype", ["int8", "uint8"])
@pytest.mark.parametrize("axis", [None, 0, -2, 2])
def test_builder_helpers_are_the_formula(float_dtype, int_dtype, axis):
    prog = builder_program(float_dtype, int_dtype, axis)
    rng = np.random.default_rng(7)
    float_type = FLOAT_DTYPES[float_dtype]
    channels = (2, 3, 4)[axis] if axis is not None else 1
    feeds = {
        "x": (rng.standard_normal((2, 3, 4)) * 100).astype(float_type),
        "scale": rng.uniform(0.25, 2, channels).astype(float_type),
        "z": rng.integers(*RANGES[int_dtype], channels).astype(np.int32),
    }
    zp = feeds["z"].astype(int_dtype)
    q = quantize_formula(feeds["x"], feeds["scale"], zp, axis, int_dtype)
    assert same_bits(evaluate(prog, feeds)["out"], dequantize_formula(q, feeds["scale"], zp, axis))


def test_builder_helpers_and_the_protobuf_lowering_emit_one_op_sequence():
    prog = builder_program("fp32", "int8", 1)
    from_builder = [op.op_type for op in iter_ops(prog) if op.op_type != "const" and op.name.startswith("q")]
    model = hand.quantization_model("quantize", (2, 3, 4), axis=1, runtime=("scale", "zero_point"))
    lower_runtime_quantization(model)
    ops = model.mlProgram.functions["main"].block_specializations["CoreML7"].operations
    from_protobuf = [op.type for op in ops if op.type != "const" and op.outputs[0].name.startswith("q")]
    assert from_protobuf == from_builder == ["reshape", "real_div", "round", "reshape", "cast", "add", "clip", "cast"]


def test_builder_helpers_with_const_parameters_are_the_mil_ops():
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        q = quantize(x, [0.5, 1, 2], [1, 2, 3], axis=1, output_dtype="uint8")
        return dequantize(q, np.float16(0.5), np.uint8(3))

    assert [op.op_type for op in iter_ops(prog) if op.op_type != "const"] == ["quantize", "dequantize"]
    assert types.builtin_to_string(prog.functions["main"].outputs[0].dtype) == "fp16"


def test_builder_helpers_refuse_wrong_dtypes():
    @mb.program(input_specs=[mb.TensorSpec((2,), dtype=types.int32)], opset_version=ct.target.iOS17)
    def prog(x):
        with pytest.raises(ValueError, match="quantize: x must be a tensor Var of fp16 or fp32, got int32"):
            quantize(x, 1.0, x)
        with pytest.raises(ValueError, match="dequantize: x must be a tensor Var of int8 or uint8, got int32"):
            dequantize(x, 1.0, x)
        floats = mb.cast(x=x, dtype="fp32", name="floats")
        with pytest.raises(ValueError, match="output_dtype must be one of int8, uint8, got 'int16'"):
            quantize(floats, 1.0, output_dtype="int16")
        with pytest.raises(ValueError, match="quantize: zero_point 'x' must be uint8, got int32"):
            quantize(floats, 1.0, x, output_dtype="uint8")
        with pytest.raises(ValueError, match="quantize: scale 'x' must be fp32, got int32"):
            quantize(floats, x)
        with pytest.raises(ValueError, match="dequantize: zero_point 'x' must be int8, got int32"):
            dequantize(mb.cast(x=x, dtype="int8"), 1.0, x)
        with pytest.raises(ValueError, match="dequantize: scale must be fp16 or fp32, got int32"):
            dequantize(mb.cast(x=x, dtype="int8"), x)
        return x


# -- the command ----------------------------------------------------------------------------------


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_lint_names_the_ops_and_exits_1(tmp_path, capsys):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    status, out, err = run(capsys, "lint", path, "--all")
    assert (status, err) == (1, "")
    lines = out.strip().splitlines()
    assert lines[0].startswith(
        f"error: [{RULE}] quantize 'q' reads zero_point from 'zp', which is computed at run time"
    )
    assert lines[1].startswith(f"error: [{RULE}] dequantize 'out' reads scale from 's_half' and zero_point from 'zp'")
    assert lines[-1].startswith(f"{path}: ") and "0 warnings" in lines[-1]
    status, out, _ = run(capsys, "lint", path, "--json")
    assert status == 1 and [f["op"] for f in without_placement(json.loads(out)["findings"])] == ["q", "out"]


def test_cli_optimize_writes_the_lowered_package_and_it_lints_clean(tmp_path, capsys):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    source_bytes = (path / "Data/com.apple.CoreML/model.mlmodel").read_bytes()
    fixed = tmp_path / "fixed.mlpackage"
    status, out, err = run(capsys, "optimize", path, "-o", fixed)
    assert (status, err) == (1, "")  # written; its fp32 ops stay off the Neural Engine
    assert re.search(rf"finding {RULE} +2 +0", out) and "[ane-fp32-compute]" in out.split("findings left:")[1]
    assert re.search(r"\nquantize +1 +0 \*\n", out) and re.search(r"\nreal_div +0 +1 \*\n", out)
    assert (path / "Data/com.apple.CoreML/model.mlmodel").read_bytes() == source_bytes
    status, out, _ = run(capsys, "lint", fixed, "--json")
    assert status == 1 and without_placement(json.loads(out)["findings"]) == []
    program = mlpackage.load(fixed)
    for seed in range(3):
        feeds = webnn_feeds(seed)
        assert same_bits(evaluate(program, feeds)["out"], webnn_expected(feeds))


# -- constexpr ops ----------------------------------------------------------------------------------


def constexpr_model(op_type: str, opset: str, version: int):
    """``op_type`` over const int8 data [2, 3] with a run-time scale per column (axis 1)."""
    data = np.array([[-128, 0, 5], [127, -3, 9]], np.int8)
    inputs = {"quantized_data": "data", "scale": "scale", "zero_point": "zp", "axis": "axis"}
    if op_type == "constexpr_blockwise_shift_scale":
        inputs = {"data": "data", "scale": "scale_rows"}
    ops = [
        hand.const("data", data),
        hand.const("zp", np.array([1, -2, 3], np.int8)),
        hand.const("axis", np.int32(1)),
        hand.const("row_shape", np.array([1, 3], np.int32)),
        hand.operation("reshape", [("scale_rows", F32(1, 3))], {"x": "scale", "shape": "row_shape"}),
        hand.operation(op_type, [("out", F32(2, 3))], inputs),
    ]
    return hand.ml_program([("scale", F32(3))], ops, ["out"], opset=opset, specification_version=version), data


def test_constexpr_affine_dequantize_with_a_run_time_scale_is_lowered(tmp_path):
    model, data = constexpr_model("constexpr_affine_dequantize", "CoreML7", 8)
    with pytest.raises(ValueError, match="scale must be const at compile time"):
        coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    package = mlpackage.read(hand.write_package(model, tmp_path / "c.mlpackage"))
    (finding,) = package.findings
    assert finding.message.startswith(
        "constexpr_affine_dequantize 'out' reads scale from 'scale', which is computed at run time: "
        "a constexpr op requires const scale and Core ML refuses"
    )
    scale = np.array([0.5, 3.0, 0.1], np.float32)
    expected = dequantize_formula(data, scale, np.array([1, -2, 3], np.int8), 1)
    assert same_bits(evaluate(package.program, {"scale": scale})["out"], expected)


@pytest.mark.parametrize(
    "op_type, opset, version, message",
    [
        (
            "constexpr_affine_dequantize",
            "CoreML6",
            7,
            r"reads scale from 'scale', .*; lowering it casts int8, .* this function's opset is CoreML6$",
        ),
        (
            "constexpr_blockwise_shift_scale",
            "CoreML8",
            9,
            r"reads scale from 'scale_rows', .*; mil-passes does not lower constexpr_blockwise_shift_scale$",
        ),
    ],
)
def test_what_cannot_be_lowered_is_one_line(tmp_path, op_type, opset, version, message):
    model, _ = constexpr_model(op_type, opset, version)
    path = hand.write_package(model, tmp_path / "c.mlpackage")
    with pytest.raises(PackageError, match=f"^{re.escape(str(path))}: {op_type} 'out' {message}"):
        mlpackage.read(path)


def test_an_op_in_a_nested_block_is_lowered_there(tmp_path):
    """cond(p, quantize(x, 0.5, zp), quantize(x, 0.25, zp)) with zp computed outside the branches."""
    i32 = hand.tensor_type("int32", (4,))

    def branch(name: str, scale: float):
        block = hand.MIL.Block()
        block.operations.extend(
            [
                hand.const(f"{name}_scale", np.float32(scale)),
                hand.operation(
                    "quantize",
                    [(f"{name}_q", hand.tensor_type("int8", (4,)))],
                    {"input": "x", "scale": f"{name}_scale", "zero_point": "zp", "output_dtype": "int8_name"},
                ),
                hand.operation("cast", [(f"{name}_out", i32)], {"x": f"{name}_q", "dtype": "int32_name"}),
            ]
        )
        block.outputs.append(f"{name}_out")
        return block

    cond = hand.operation("cond", [("out", i32)], {"pred": "p"})
    cond.blocks.extend([branch("then", 0.5), branch("else", 0.25)])
    ops = [
        hand.const("int8_name", np.array("int8")),
        hand.const("int32_name", np.array("int32")),
        hand.const("bool_name", np.array("bool")),
        hand.operation("cast", [("zp", hand.tensor_type("int8", (1,)))], {"x": "z", "dtype": "int8_name"}),
        hand.operation("squeeze", [("z_scalar", hand.tensor_type("int32", ()))], {"x": "z"}),
        hand.operation("cast", [("p", hand.tensor_type("bool", ()))], {"x": "z_scalar", "dtype": "bool_name"}),
        cond,
    ]
    model = hand.ml_program([("x", F32(4)), ("z", hand.tensor_type("int32", (1,)))], ops, ["out"])
    package = mlpackage.read(hand.write_package(model, tmp_path / "n.mlpackage"))
    assert [f.op for f in package.findings] == ["then_q", "else_q"]
    branches = package.program.functions["main"].find_ops(op_type="cond")[0].blocks
    assert all("real_div" in [op.op_type for op in block.operations] for block in branches)
    x = np.array([0.125, 0.375, -7.0, 100.0], np.float32)
    for z, scale in ((3, 0.5), (0, 0.25)):
        out = evaluate(package.program, {"x": x, "z": np.array([z], np.int32)})["out"]
        expected = quantize_formula(x, np.float32(scale), np.array([z], np.int8), None, "int8")
        assert out.tolist() == expected.astype(np.int32).tolist()


def test_a_program_without_quantization_ops_is_not_touched(tmp_path):
    path, _ = webnn_package(tmp_path / "w.mlpackage")
    spec = mlpackage.read(path).spec  # lowered: nothing left to lower
    before = spec.SerializeToString()
    changes = Counter()
    assert lower_runtime_quantization(spec, changes) == [] and spec.SerializeToString() == before
    assert changes == Counter()


def test_a_const_parameter_stays_a_const():
    """A per-channel const scale is reshaped into a new const, a const zero point cast into one."""
    model = hand.quantization_model(
        "quantize", (2, 3, 4), axis=1, float_dtype="fp16", scale=[0.5, 1, 2], zero_point=[1, -2, 3], runtime=("scale",)
    )
    lower_runtime_quantization(model)
    program = coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    ops = {op.name: op for op in iter_ops(program)}
    assert [op.op_type for op in ops.values() if op.op_type not in ("const", "cast")] == [
        "reshape",
        "real_div",
        "round",
        "add",
        "clip",
    ]
    zero = ops["q_shifted"].y
    assert zero.op.op_type == "const" and zero.val.dtype == np.float16
    assert zero.val.tolist() == [[1.0], [-2.0], [3.0]]
    model = hand.quantization_model("dequantize", (2, 3), scale=np.float32(0.5), runtime=("zero_point",))
    lower_runtime_quantization(model)
    program = coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")
    assert program.functions["main"].find_ops(op_type="mul")[0].y.name == "scale"  # the const read as it is


def test_fold_computes_only_moves_and_casts_of_constants():
    assert fold("cast", "z", {"x": np.array([1, -2], np.int8), "dtype": np.str_("fp16")}).dtype == np.float16
    assert fold("reshape", "s", {"x": np.arange(3.0), "shape": np.array([-1, 1])}).shape == (3, 1)
    assert fold("cast", None, {"x": np.int8(1), "dtype": np.str_("fp32")}) is None  # the result is an op
    assert fold("add", "a", {"x": np.float32(1), "y": np.float32(2)}) is None
    assert fold("cast", "z", {"x": "a_var", "dtype": np.str_("fp32")}) is None


def test_what_reads_a_lowered_constexpr_op_reads_a_run_time_value(tmp_path):
    """quantize(x, scale=constexpr_affine_dequantize(data, scale=s)): both ops are lowered."""
    model, data = constexpr_model("constexpr_affine_dequantize", "CoreML7", 8)
    function = model.mlProgram.functions["main"]
    function.block_specializations["CoreML7"].operations.extend(
        [
            hand.const("int8_name", np.array("int8")),
            hand.operation(
                "quantize",
                [("q", hand.tensor_type("int8", (2, 3)))],
                {"input": "x", "scale": "out", "output_dtype": "int8_name"},
            ),
        ]
    )
    x_input = function.inputs.add()
    x_input.name = "x"
    x_input.type.CopyFrom(F32(2, 3))
    del function.block_specializations["CoreML7"].outputs[:]
    function.block_specializations["CoreML7"].outputs.append("q")
    findings = lower_runtime_quantization(model)
    assert [f.op for f in findings] == ["out", "q"]
    assert "quantize 'q' reads scale from 'out'" in findings[1].message
    coremltools_load(model_spec=model, specification_version=8, file_weights_dir="")


def test_the_quotient_rounded_in_the_float_dtype_differs_as_the_readme_says():
    """README figure: the formula in the float dtype (proven equal to the lowering above) against
    the exact quotient of the interpreter's quantize kernel, on 10^6 random x and scale."""
    rng = np.random.default_rng(0)
    counted = []
    for dtype in (np.float16, np.float32):
        x = (rng.standard_normal(10**6) * 100).astype(dtype)
        scale = rng.uniform(0.01, 2, 10**6).astype(dtype)
        exact = np.rint(x.astype(np.float64) / scale.astype(np.float64))
        in_range = np.abs(exact) < 128
        counted.append((int(np.sum((np.rint(x / scale) != exact) & in_range)), int(in_range.sum())))
    assert counted == [(11710, 691648), (2, 692327)]


def test_a_dim_known_only_at_run_time(tmp_path):
    model = hand.quantization_model("quantize", (None, 3, 4), axis=1, runtime=("scale", "zero_point"))
    run = optimize_package(hand.write_package(model, tmp_path / "d.mlpackage"), tmp_path / "fixed.mlpackage")
    assert [f.rule for f in without_placement(run.report.findings_before)] == [RULE]
    assert without_placement(run.report.findings_after) == []
    program = mlpackage.load(run.output)
    x = (np.random.default_rng(3).standard_normal((5, 3, 4)) * 50).astype(np.float32)
    scale, zero_point = np.array([0.5, 1, 2], np.float32), np.array([1, 2, 3], np.int32)
    out = evaluate(program, {"x": x, "scale": scale, "zero_point": zero_point})["out"]
    assert same_bits(out, quantize_formula(x, scale, zero_point.astype(np.int8), 1, "int8").astype(np.int32))


def test_a_parameter_of_the_input_rank_broadcasts_as_it_is():
    """WebNN writes scale and zeroPoint with the input's rank ([1, 3, 1]): no reshape."""
    x = (np.random.default_rng(5).standard_normal((2, 3, 4)) * 40).astype(np.float32)
    scale, z = np.array([[[0.5], [1.0], [2.0]]], np.float32), np.array([[[1], [-2], [3]]], np.int32)

    @mb.program(
        input_specs=[mb.TensorSpec((2, 3, 4)), mb.TensorSpec((1, 3, 1)), mb.TensorSpec((1, 3, 1), dtype=types.int32)],
        opset_version=ct.target.iOS17,
    )
    def prog(x, scale, z):
        return quantize(x, scale, mb.cast(x=z, dtype="int8"), axis=1, name="q")

    assert "reshape" not in [op.op_type for op in iter_ops(prog)]
    out = evaluate(prog, {"x": x, "scale": scale, "z": z})["q"]
    assert same_bits(out, quantize_formula(x, scale, z.astype(np.int8), None, "int8"))

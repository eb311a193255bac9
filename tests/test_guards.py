"""Every guard of mil_passes/guards/ against the bug it answers, as one table: the protected pass
fails on the program without the guard; guard then pass keep the program's values (the reference
interpreter); the safe case is left to the pass. A program comes from its reproducer in
docs/reproducers/ where there is one. And docs/guards.md is the page the guards' docstrings make."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, get_new_symbol, types
from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY

from mil_passes import guards
from mil_passes.derived_docs import guards_page
from mil_passes.runner import run_pass
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from pass_helpers import reproducer

ROOT = Path(__file__).resolve().parent.parent
#: The protected pass changes a value or dtype (found by the reference interpreter).
VALUES = "values"


@dataclass(frozen=True)
class Row:
    """One bug of ``protects``: ``program`` shows it (``fails``: the exception the pass raises,
    :data:`VALUES`, or a predicate of the program after the pass that says the bug is there);
    ``safe`` is a program of the same pattern that the pass gets right."""

    protects: str
    program: Callable[[], Program]
    fails: Any
    safe: Callable[[], Program]
    feeds: dict | None = None
    fused: str | None = None  # an op the pass still makes once the guard ran
    prepare: str | None = None  # a pass that makes the program what the protected pass gets
    sizes: int | None = None

    @property
    def fails_by_predicate(self) -> bool:
        return callable(self.fails) and not isinstance(self.fails, type)

    @property
    def guard(self) -> str:
        return guards.BY_PROTECTED[self.protects].name

    def prepared(self) -> Program:
        prog = self.program()
        if self.prepare:
            run_pass(prog, self.prepare)
        return prog


def program(**inputs):
    """``@program(x=(2, 3), ...)``: a builder of a one-function iOS17 program on fp32 inputs
    (``(shape, dtype)`` for another dtype) whose outputs are named ``out0``, ``out1``…; each call
    builds it anew."""

    def decorate(body):
        specs = [
            mb.TensorSpec(*spec) if isinstance(spec[0], tuple) else mb.TensorSpec(spec) for spec in inputs.values()
        ]

        def build():
            prog = mb.program(input_specs=specs, opset_version=ct.target.iOS17)(body)
            for index, out in enumerate(prog.functions["main"].outputs):
                out.name = f"out{index}"  # the same names in every build
            return prog

        build.__name__ = body.__name__
        return build

    return decorate


# -- programs without a reproducer of their own, and the safe cases ---------------------------
def _int_op(scale_out):
    @program(x=(2, 2))
    def requantize(x):
        real = mb.dequantize(
            input=mb.quantize(input=x, scale=np.float32(0.5), output_dtype="int8"), scale=np.float32(0.5)
        )
        return mb.quantize(input=mb.reshape(x=real, shape=[4]), scale=np.float32(scale_out), output_dtype="int8")

    return requantize


@program(x=(2,))
def rank0_read_in_same_block(x):
    difference = mb.sub(x=np.float32(1.0), y=mb.reduce_sum(x=x, axes=[0], keep_dims=False))
    return mb.expand_dims(x=difference, axes=[0]), mb.relu(x=difference)


def _scale_then_shift(dtype):
    @program(x=((1, 2, 3, 3), dtype))
    def scale_then_shift(x):
        c = types.nptype_from_builtin(dtype)
        scaled = mb.mul(x=x, y=np.array([2.0, 3.0], c).reshape(1, 2, 1, 1))
        return mb.add(x=scaled, y=np.array([1.0, -1.0], c).reshape(1, 2, 1, 1))

    return scale_then_shift


@program(x=(1, 2, 1, 1))
def per_channel_alpha(x):
    negative = mb.relu(x=mb.mul(x=x, y=np.float32(-1.0)))
    return mb.add(x=mb.relu(x=x), y=mb.mul(x=negative, y=np.array([-0.1, -0.2], np.float32).reshape(1, 2, 1, 1)))


@program(x=(1, 2, 2, 2))
def transposed_on_shared_input(x):
    """The fuzzer's program (seed 1): the transposed prelu form, its input read by another op too."""
    y = mb.add(x=x, y=1.0)
    t = mb.transpose(x=y, perm=[0, 2, 3, 1])
    negative = mb.relu(x=mb.mul(x=t, y=-1.0))
    return mb.add(x=mb.relu(x=t), y=mb.mul(x=negative, y=np.array([-0.25, 0.5], np.float32))), mb.relu(x=y)


@program(x=(1, 2, 4))
def unshared_padding(x):
    """Slices with the end_mask torch's converter writes (coremltools 8.x raises without one)."""
    left = mb.slice_by_index(x=x, begin=[0, 0, 1], end=[1, 2, 2], end_mask=[True, True, False])
    right = mb.slice_by_index(x=x, begin=[0, 0, 2], end=[1, 2, 3], end_mask=[True, True, False])
    return mb.concat(values=(left, x, right), axis=2)


@program(x=(1, 1, 2))
def conv_over_const(x):
    return mb.real_div(x=mb.conv(x=x, weight=np.ones((1, 1, 1), np.float32)), y=np.float32(2.0))


def _transposed_conv_plus(bias, conv="conv"):
    @program(x=(1, 1, 3))
    def transposed_conv_plus(x):
        if conv == "conv":
            y = mb.conv(x=x, weight=np.array([[[1.0]], [[-2.0]]], np.float32))
        else:  # conv_transpose's weight is [C_in, C_out, K]
            y = mb.conv_transpose(x=x, weight=np.array([[[1.0], [-2.0]]], np.float32))
        return mb.add(x=mb.transpose(x=y, perm=[2, 1, 0]), y=bias)

    return transposed_conv_plus


def _stack_split(readers):
    @program(x=(1, 3))
    def stack_split(x):
        first, second = mb.split(x=mb.stack(values=(mb.relu(x=x), x), axis=0), num_splits=2, axis=0)
        y = mb.squeeze(x=second, axes=[0])
        if readers == "both":
            return y, mb.squeeze(x=first, axes=[0])
        return (y, mb.relu(x=first)) if readers == "relu" else y

    return stack_split


def _reshape_by_own_shape(shape_is_output=True):
    """docs/reproducers/remove_symbolic_reshape_output.py's 4 ops (its Symbol('S0') can be made
    once per process, and a table builds each program several times)."""

    def build():
        @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(),))], opset_version=ct.target.iOS17)
        def prog(x):
            r = mb.relu(x=x)
            size = mb.gather(x=mb.shape(x=r), indices=[0], axis=0, name="size")
            y = mb.reshape(x=r, shape=size, name="y")
            return (y, size) if shape_is_output else y

        return prog

    return build


W = np.array([[1.0, -2.0, 0.0], [3.0, 1.0, -1.0], [2.0, 0.0, 4.0]], np.float32)
B = np.array([10.0, -20.0, 30.0], np.float32)


def _matmul(case):
    @program(x=(3, 3))
    def matmul_and_bias(x):
        if case == "weight_first":
            return mb.add(x=mb.matmul(x=W, y=x), y=B)
        product = mb.matmul(x=x, y=W)
        return (mb.add(x=product, y=B), product) if case == "output" else mb.sub(x=product, y=B)

    return matmul_and_bias


def _stack_reshape(stack_is_output):
    @program(a=(1, 5, 3), b=(1, 5, 3))
    def stack_reshape(a, b):
        stacked = mb.stack(values=(a, b), axis=1)
        out = mb.reshape(x=stacked, shape=[1, 10, 3])
        return (out, stacked) if stack_is_output else out

    return stack_reshape


@program(a=(1, 1, 1, 1), b=(1, 1, 1, 1), c=(1, 1, 1, 1), d=(1, 1, 1, 1))
def unshared_pixel_shuffle(a, b, c, d):
    h0 = mb.concat(values=(a, b), axis=2, interleave=True)
    h1 = mb.concat(values=(c, d), axis=2, interleave=True)
    return mb.concat(values=(h0, h1), axis=3, interleave=True)


SYMBOL = get_new_symbol()  # one per process: a Symbol can be made once


@program(x=((SYMBOL, SYMBOL, SYMBOL, 1),))
def reshape_by_shape_of_x(x):
    """The fuzzer's program (seed 1): ``reshape(x, shape(x))``, which fold_shape_ops writes as
    ``reshape(x, [0, 0, 0, 1])``."""
    return mb.reshape(x=x, shape=mb.shape(x=x))


@program(a=(2, 3), b=((SYMBOL, 3),))
def static_and_zero_free_reshapes(a, b):
    return mb.reshape(x=a, shape=[0, 3]), mb.reshape(x=b, shape=[-1, 3, 1])


def literal_zero_type(prog: Program) -> bool:
    """add_fp16_cast's re-created reshape declares the 0s of its target as sizes."""
    (reshape,) = [op for op in prog.functions["main"].operations if op.op_type == "reshape"]
    return 0 in list(reshape.outputs[0].shape)


EVERY_PAIR = dict(
    zip("ab", (g.reshape(-1).astype(np.int8) for g in np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))))
)


def _quantized(s_x, s_y, s_z, op="add", relu=False):
    """``quantize(op(dequantize(a, s_x), dequantize(b, s_y)) [→ relu], s_z)`` on every int8 pair."""
    n = EVERY_PAIR["a"].size

    @program(a=((n,), types.int8), b=((n,), types.int8))
    def quantized(a, b):
        x = mb.dequantize(input=a, scale=np.float32(s_x), zero_point=np.int8(0))
        y = mb.dequantize(input=b, scale=np.float32(s_y), zero_point=np.int8(0))
        s = getattr(mb, op)(x=x, y=y)
        s = mb.relu(x=s) if relu else s
        return mb.quantize(input=s, scale=np.float32(s_z), zero_point=np.int8(0), output_dtype="int8")

    return quantized


def _gelu(shared_half):
    @program(x=(5,))
    def gelu_third_form(x):
        one_plus_erf = mb.add(x=mb.erf(x=mb.real_div(x=x, y=np.float32(2**0.5))), y=1.0)
        half = mb.mul(x=0.5, y=x)
        y = mb.mul(x=one_plus_erf, y=half)
        return (y, mb.reshape(x=half, shape=[-1])) if shared_half else y

    return gelu_third_form


def _pair(op_type, across_blocks):
    def twice(v, shape):
        return mb.relu(x=v) if op_type == "relu" else mb.reshape(x=v, shape=shape)

    @program(x=(2, 3))
    def pair(x):
        first = twice(x, [3, 2])
        if not across_blocks:
            return twice(first, [6])
        return mb.cond(
            pred=mb.greater(x=mb.reduce_sum(x=x), y=0.0),
            _true_fn=lambda: twice(first, [6]),
            _false_fn=lambda: twice(x, [6]),
        )

    return pair


def _round_trip(output_dtype):
    @program(x=(5,))
    def round_trip(x):
        q = mb.quantize(input=x, scale=np.float32(0.1), output_dtype="int8")
        return mb.quantize(
            input=mb.dequantize(input=q, scale=np.float32(0.1)), scale=np.float32(0.1), output_dtype=output_dtype
        )

    return round_trip


def _from(name, folder=ROOT / "docs" / "reproducers"):
    """The program and feeds of the reproducer ``<folder>/<name>.py``."""
    module = reproducer(folder / f"{name}.py")
    feeds = getattr(module, "FEEDS", None) or ({"x": module.X} if hasattr(module, "X") else None)
    return {"program": module.program, "feeds": feeds}


@program(x=(2,))
def fully_known_value(x):
    """A value const_elimination folds right (a numeric one): the guard leaves it to the pass."""
    return mb.mul(x=mb.add(x=np.array([1.0, 2.0], np.float32), y=np.float32(1.0)), y=x)


@program(x=((5,), types.int8))
def widened_cast_to_bool(x):
    """int8 → int32 → bool: no step makes a nonzero zero, so cast_optimization's fusion is exact."""
    return mb.cast(x=mb.cast(x=x, dtype="int32"), dtype="bool")


CONV_X = {"x": np.array([[[1.0, -2.0, 3.0]]], np.float32)}
ROWS = {
    "const_elimination-int32": Row(
        "common::const_elimination",
        safe=fully_known_value,
        fails=VALUES,
        **_from("const_elimination_int32", ROOT / "tests" / "fixtures"),
    ),
    "const_elimination-raises": Row(
        "common::const_elimination", fails=ValueError, safe=fully_known_value, **_from("const_elimination_raises")
    ),
    "cast_optimization": Row(
        "common::cast_optimization",
        fails=VALUES,
        safe=widened_cast_to_bool,
        **_from("cast_optimization_float_int_bool"),
    ),
    "int_op_canonicalization": Row(
        "common::int_op_canonicalization",
        fails=VALUES,
        safe=_int_op(0.5),
        **_from("int_op_canonicalization_requantize"),
    ),
    "rank0_expand_dims_swap": Row(
        "common::rank0_expand_dims_swap",
        fails=KeyError,
        safe=rank0_read_in_same_block,
        **_from("rank0_expand_dims_swap_nested_reader_raises"),
    ),
    "fuse_elementwise_to_batchnorm": Row(
        "common::fuse_elementwise_to_batchnorm",
        fails=ValueError,
        safe=_scale_then_shift(types.fp32),
        **_from("fuse_elementwise_to_batchnorm_fp16_raises"),
    ),
    "fuse_prelu-one-element-alpha": Row(
        "common::fuse_prelu",
        fails=ValueError,
        safe=per_channel_alpha,
        fused="prelu",
        **_from("fuse_prelu_broadcast_alpha_raises"),
    ),
    "fuse_prelu-widening-alpha": Row(
        "common::fuse_prelu", fails=ValueError, safe=per_channel_alpha, **_from("fuse_prelu_widening_alpha_raises")
    ),
    "fuse_prelu-shared-transpose-input": Row(
        "common::fuse_prelu",
        transposed_on_shared_input,
        fails=ValueError,
        safe=per_channel_alpha,
        feeds={"x": np.linspace(-4.0, 3.0, 8, dtype=np.float32).reshape(1, 2, 2, 2)},
        fused="prelu",
    ),
    "use_reflection_padding": Row(
        "common::use_reflection_padding",
        fails=ValueError,
        safe=unshared_padding,
        fused="pad",
        **_from("use_reflection_padding_shared_slice_raises"),
    ),
    "fuse_conv_scale": Row(
        "common::fuse_conv_scale", fails=VALUES, safe=conv_over_const, **_from("fuse_conv_scale_const_numerator")
    ),
    "fuse_conv_bias": Row(
        "common::fuse_conv_bias",
        fails=IndexError,
        safe=_transposed_conv_plus(np.ones((1, 2, 1), np.float32)),
        **_from("fuse_conv_bias_transposed_bias_raises"),
    ),
    "fuse_conv_bias-conv_transpose": Row(
        "common::fuse_conv_bias",
        _transposed_conv_plus(np.array([1.0, 2.0], np.float32), "conv_transpose"),
        IndexError,
        _transposed_conv_plus(np.ones((1, 2, 1), np.float32), "conv_transpose"),
        feeds=CONV_X,
    ),
    "fuse_stack_split-unread": Row("common::fuse_stack_split", _stack_split("one"), IndexError, _stack_split("both")),
    "fuse_stack_split-not-squeezed": Row(
        "common::fuse_stack_split", _stack_split("relu"), AttributeError, _stack_split("both")
    ),
    "remove_symbolic_reshape": Row(
        "common::remove_symbolic_reshape", _reshape_by_own_shape(), ValueError, _reshape_by_own_shape(False), sizes=3
    ),
    "fuse_matmul_weight_bias-const-minus-matmul": Row(
        "common::fuse_matmul_weight_bias",
        fails=VALUES,
        safe=_matmul("matmul_minus_const"),
        **_from("fuse_matmul_weight_bias_const_minus_matmul"),
    ),
    "fuse_matmul_weight_bias-weight-first": Row(
        "common::fuse_matmul_weight_bias",
        _matmul("weight_first"),
        VALUES,
        _matmul("matmul_minus_const"),
        feeds={"x": W.T.copy()},
    ),
    "fuse_matmul_weight_bias-output": Row(
        "common::fuse_matmul_weight_bias", _matmul("output"), ValueError, _matmul("matmul_minus_const")
    ),
    "replace_stack_reshape": Row(
        "common::replace_stack_reshape",
        fails=ValueError,
        safe=_stack_reshape(False),
        fused="concat",
        **_from("replace_stack_reshape_stack_output_raises"),
    ),
    "concat_to_pixel_shuffle": Row(
        "common::concat_to_pixel_shuffle",
        fails=ValueError,
        safe=unshared_pixel_shuffle,
        **_from("concat_to_pixel_shuffle_shared_concat_raises"),
    ),
    "add_fp16_cast": Row(
        "common::add_fp16_cast",
        reshape_by_shape_of_x,
        literal_zero_type,
        static_and_zero_free_reshapes,
        feeds={"x": np.arange(8, dtype=np.float32).reshape(2, 2, 2, 1)},
        prepare="webnn::fold_shape_ops",
    ),
    **{
        f"distributive_quantized_binary_op_scale_normalization-{name}": Row(
            "common::distributive_quantized_binary_op_scale_normalization",
            _quantized(**case),
            VALUES,
            _quantized(0.5, 0.25, 0.25),
            feeds=EVERY_PAIR,
        )
        for name, case in {
            "add": dict(s_x=0.25, s_y=0.1, s_z=0.1),
            "sub": dict(s_x=0.25, s_y=0.1, s_z=0.1, op="sub"),
            "relu": dict(s_x=0.25, s_y=0.1, s_z=0.1, relu=True),
        }.items()
    },
    "fuse_gelu_exact": Row("common::fuse_gelu_exact", _gelu(True), ValueError, _gelu(False), fused="gelu"),
    "merge_consecutive_relus": Row(
        "common::merge_consecutive_relus", _pair("relu", True), (KeyError, ValueError), _pair("relu", False)
    ),
    "merge_consecutive_reshapes": Row(
        "common::merge_consecutive_reshapes", _pair("reshape", True), (KeyError, ValueError), _pair("reshape", False)
    ),
    "dequantize_quantize_pair_elimination": Row(
        "common::dequantize_quantize_pair_elimination",
        _round_trip("uint8"),
        VALUES,
        _round_trip("int8"),
        feeds={"x": np.array([-12.8, -0.5, 0.0, 0.7, 12.7], np.float32)},
    ),
}
#: The fused op is within its own rounding of the written ops (a fusion).
TOLERANCE = {"fuse_gelu_exact": dict(rtol=1e-6, atol=1e-7)}


def test_every_guard_has_a_row():
    assert {row.protects for row in ROWS.values()} == {guard.protects for guard in guards.GUARDS}


@pytest.mark.parametrize("case", list(ROWS))
def test_the_pass_fails_without_the_guard(case):
    """The bug the guard answers (if coremltools fixes it, the row fails and the guard may go)."""
    row = ROWS[case]
    prog = row.prepared()
    if row.fails is VALUES:
        run_pass(prog, row.protects)
        with pytest.raises(AssertionError):
            assert_equivalent(row.prepared(), prog, row.feeds, sizes=row.sizes)
    elif row.fails_by_predicate:
        run_pass(prog, row.protects)
        assert row.fails(prog)
    else:
        with pytest.raises(row.fails):
            run_pass(prog, row.protects)


@pytest.mark.parametrize("case", list(ROWS))
def test_guard_then_pass_keep_the_values(case):
    row = ROWS[case]
    after = check_pass(row.prepared, row.guard, inputs=row.feeds, sizes=row.sizes)
    run_pass(after, row.protects)
    after.validate()
    assert_equivalent(row.prepared(), after, row.feeds, sizes=row.sizes, **TOLERANCE.get(case, {}))
    if row.fails_by_predicate:
        assert not row.fails(after)
    if row.fused:
        run_pass(after, "common::dead_code_elimination")
        assert op_counts(after)[row.fused] == 1


@pytest.mark.parametrize("case", list(ROWS))
def test_the_safe_case_is_left_to_the_pass(case):
    prog = ROWS[case].safe()
    before = str(prog)
    run_pass(prog, ROWS[case].guard)
    assert str(prog) == before


def test_each_guard_is_registered_under_the_name_it_derives():
    for guard in guards.GUARDS:
        assert guard.name == "webnn::guard_" + guard.protects.split("::")[1]
        assert type(PASS_REGISTRY[guard.name]).name == guard.name


def test_docs_guards_md_is_generated_from_the_guards():
    """Regenerate with ``python -m mil_passes.derived_docs``."""
    assert (ROOT / "docs" / "guards.md").read_text() == guards_page()

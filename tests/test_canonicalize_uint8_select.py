"""webnn::canonicalize_uint8_select: each rule before/after, a refusal per guard, nested blocks,
scopes, the pywebnn coverage cases under an EMPTY pipeline, and exact equivalence on special values."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, types
from coremltools.converters.mil.mil.scope import ScopeInfo, ScopeSource

from mil_passes.passes.canonicalize_uint8_select import (
    CastRoundTripToBool,
    CastToBoolAsNotEqual,
    DoubleLogicalNot,
    SelectOfLogicalNot,
    SelectOfOnesZeros,
)
from mil_passes.ir import iter_ops
from mil_passes.rewriter import Declined
from mil_passes.testing import assert_equivalent, check_pass, op_counts
from mil_passes.testing.strategies import OPSETS, programs
from mil_passes.runner import run_pass as registered_run
from pass_helpers import evaluates, only_op

PASS = "webnn::canonicalize_uint8_select"
IOS17 = ct.target.iOS17
FP32, FP16, INT32, BOOL = types.fp32, types.fp16, types.int32, types.bool
NP = {FP32: np.float32, FP16: np.float16, INT32: np.int32}

COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
LOGICAL = {"logical_and", "logical_or", "logical_xor", "logical_not"}

SPECIAL_FLOATS = [np.nan, 0.0, -0.0, np.inf, -np.inf, 1.0, -1.5, 0.25, 65504.0, 1e-45]
SPECIAL_INTS = [0, 1, -1, 127, 128, -128, 255, 256, -256, 32768, 65535, 65536, 2**31 - 1, -(2**31)]
WRAPPING_INTS = [256, -256, 512, 65280, 32768, -32768, 65536, 131072, 16777216]  # zero in a narrow int


# -- helpers ----------------------------------------------------------------------------------


def program(*specs, opset=IOS17):
    """``@program(("x", (2, 2), FP32), …)``: a decorator building an mb.program with named inputs."""
    input_specs = [mb.TensorSpec(shape, dtype=dtype) for _, shape, dtype in specs]

    def wrap(fn):
        prog = mb.program(input_specs=input_specs, opset_version=opset)(fn)
        func = prog.functions["main"]
        assert list(func.inputs) == [name for name, _, _ in specs], "argument names must match specs"
        return prog

    return wrap


def _arg(value) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_arg(v) for v in value) + ")"
    if value.op is not None and value.op.op_type == "const":
        val = value.val
        return f'"{val}"' if isinstance(val, str) else repr(np.asarray(val).tolist())
    return f"%{value.name}"


def mil(prog: Program) -> list[str]:
    """Non-const ops of every block in MIL's text form, without types: ``%y = op(x=%a, k=1.0)``."""
    lines = []
    for op in iter_ops(prog):
        if op.op_type == "const":
            continue
        args = ", ".join(f"{key}={_arg(value)}" for key, value in op.inputs.items())
        outs = ", ".join(f"%{out.name}" for out in op.outputs)
        lines.append(f"{outs} = {op.op_type}({args})")
    return lines


def assert_canonical(prog: Program) -> None:
    """No cast to bool is left; every select.cond and logical input comes from a bool producer."""
    for op in iter_ops(prog):
        assert not (op.op_type == "cast" and op.dtype.val == "bool"), f"cast to bool left: {op.name}"
        if op.op_type == "select":
            conds = [op.cond]
        elif op.op_type in LOGICAL:
            conds = [op.x] + ([op.y] if "y" in op.inputs else [])
        else:
            continue
        for var in conds:
            producer = var.op
            ok = producer is None or producer.op_type in COMPARISONS | LOGICAL | {"const"}
            assert ok, f"{op.op_type} '{op.name}' reads '{var.name}' from a {producer.op_type}"
            assert types.is_bool(var.dtype)


def run_pass(prog: Program):
    """Apply the pass directly; return its RewriteResult."""
    result = registered_run(prog, PASS)
    prog.validate()
    return result


def refusal(pattern, op) -> str:
    result = pattern.match(op)
    assert isinstance(result, Declined), f"{type(pattern).__name__} matched {op.name}"
    return result.reason


def not_a_candidate(pattern, op) -> bool:
    """The pattern leaves ``op`` alone without a reason to report (None, not a Declined)."""
    return pattern.match(op) is None


def feeds(**arrays):
    return {name: np.asarray(value) for name, value in arrays.items()}


# -- the docstring's example -------------------------------------------------------------------


def _docstring_example():
    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32), ("z", (2, 2), FP32))
    def prog(x, y, z):
        gt_bool = mb.greater(x=x, y=y, name="gt_bool")
        gt = mb.cast(x=gt_bool, dtype="uint8", name="gt")
        gt_in = mb.cast(x=gt, dtype="bool", name="gt_in")
        z_bool = mb.cast(x=z, dtype="bool", name="z_bool")
        and_bool = mb.logical_and(x=gt_in, y=z_bool, name="and_bool")
        and_uint8 = mb.cast(x=and_bool, dtype="uint8", name="and")
        cond = mb.cast(x=and_uint8, dtype="bool", name="cond")
        ones, zeros = np.ones((2, 2), np.float32), np.zeros((2, 2), np.float32)
        return mb.select(cond=cond, a=ones, b=zeros, name="out")

    return prog


def test_docstring_example():
    after = check_pass(_docstring_example, PASS)
    assert mil(after) == [
        "%gt_bool = greater(x=%x, y=%y)",
        "%z_truthy = not_equal(x=%z, y=0.0)",
        "%and_bool = logical_and(x=%gt_bool, y=%z_truthy)",
        '%out = cast(x=%and_bool, dtype="fp32")',
    ]
    assert_canonical(after)


# -- rule 1: round trips of a bool ------------------------------------------------------------


def _comparison_round_trip():
    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32))
    def prog(x, y):
        gt_bool = mb.greater(x=x, y=y, name="gt_bool")
        gt = mb.cast(x=gt_bool, dtype="uint8", name="gt")
        gt_in = mb.cast(x=gt, dtype="bool", name="gt_in")
        return mb.logical_not(x=gt_in, name="out")

    return prog


def test_uint8_round_trip_reads_the_comparison():
    assert mil(_comparison_round_trip()) == [
        "%gt_bool = greater(x=%x, y=%y)",
        '%gt = cast(x=%gt_bool, dtype="uint8")',
        '%gt_in = cast(x=%gt, dtype="bool")',
        "%out = logical_not(x=%gt_in)",
    ]
    after = check_pass(_comparison_round_trip, PASS)
    assert mil(after) == ["%gt_bool = greater(x=%x, y=%y)", "%out = logical_not(x=%gt_bool)"]


@pytest.mark.parametrize(
    "hops",
    [
        ("fp16",),
        ("fp32",),
        ("int32",),
        ("uint8", "fp32"),
        ("int8", "int16", "uint16", "int32", "fp16", "fp32", "uint8"),
    ],
)
def test_any_chain_of_numeric_casts_of_a_bool_is_that_bool(hops):
    def build():
        @program(("x", (2, 3), FP32), ("y", (2, 3), FP32))
        def prog(x, y):
            value = mb.less(x=x, y=y, name="lt")
            for i, dtype in enumerate(hops):
                value = mb.cast(x=value, dtype=dtype, name=f"hop{i}")
            back = mb.cast(x=value, dtype="bool", name="back")
            return mb.logical_and(x=back, y=mb.greater(x=x, y=0.0, name="pos"), name="out")

        return prog

    after = check_pass(build, PASS)
    assert mil(after) == [
        "%lt = less(x=%x, y=%y)",
        "%pos = greater(x=%x, y=0.0)",
        "%out = logical_and(x=%lt, y=%pos)",
    ]


def test_chain_through_an_inner_bool_stops_at_the_nearest_bool():
    def build():
        @program(("x", (3,), FP32))
        def prog(x):
            b = mb.greater(x=x, y=0.0, name="b")
            f = mb.cast(x=b, dtype="fp32", name="f")
            inner = mb.cast(x=f, dtype="bool", name="inner")
            i = mb.cast(x=inner, dtype="int32", name="i")
            outer = mb.cast(x=i, dtype="bool", name="outer")
            return mb.logical_not(x=outer, name="out")

        return prog

    after = check_pass(build, PASS)
    assert mil(after) == ["%b = greater(x=%x, y=0.0)", "%out = logical_not(x=%b)"]


def test_cast_of_a_bool_to_bool_is_that_bool():
    def build():
        @program(("x", (3,), FP32))
        def prog(x):
            b = mb.greater(x=x, y=0.0, name="b")
            same = mb.cast(x=b, dtype="bool", name="same")
            return mb.logical_not(x=same, name="out")

        return prog

    assert mil(check_pass(build, PASS)) == ["%b = greater(x=%x, y=0.0)", "%out = logical_not(x=%b)"]


def test_cast_of_a_bool_that_other_ops_read_stays():
    def build():
        @program(("x", (2, 2), FP32), ("y", (2, 2), FP32))
        def prog(x, y):
            gt_bool = mb.greater(x=x, y=y, name="gt_bool")
            gt = mb.cast(x=gt_bool, dtype="uint8", name="gt")
            gt_in = mb.cast(x=gt, dtype="bool", name="gt_in")
            return mb.logical_not(x=gt_in, name="out"), gt

        return prog

    after = check_pass(build, PASS)
    assert mil(after) == [
        "%gt_bool = greater(x=%x, y=%y)",
        '%gt = cast(x=%gt_bool, dtype="uint8")',
        "%out = logical_not(x=%gt_bool)",
    ]


def test_round_trip_that_is_an_output_keeps_the_output_name():
    def build():
        @program(("x", (2, 2), FP32))
        def prog(x):
            b = mb.greater(x=x, y=0.0, name="b")
            return mb.cast(x=mb.cast(x=b, dtype="fp16", name="h"), dtype="bool", name="out")

        return prog

    after = check_pass(build, PASS)
    assert mil(after) == ["%out = greater(x=%x, y=0.0)"]


def test_round_trip_of_a_bool_input_that_is_an_output():
    def build():
        @program(("b", (2, 2), BOOL))
        def prog(b):
            return mb.cast(x=mb.cast(x=b, dtype="int32", name="i"), dtype="bool", name="out")

        return prog

    after = check_pass(build, PASS)
    assert mil(after) == ["%out = identity(x=%b)"]


def test_casts_to_numbers_are_not_candidates():
    prog = _comparison_round_trip()
    to_uint8 = next(op for op in iter_ops(prog) if op.name == "gt")
    assert not_a_candidate(CastRoundTripToBool(), to_uint8)
    assert not_a_candidate(CastToBoolAsNotEqual(), to_uint8)


def test_refuses_a_chain_through_arithmetic_and_compares_instead():
    def build():
        @program(("x", (4,), FP32))
        def prog(x):
            b = mb.greater(x=x, y=0.0, name="b")
            f = mb.cast(x=b, dtype="fp32", name="f")
            shifted = mb.sub(x=f, y=1.0, name="shifted")
            back = mb.cast(x=shifted, dtype="bool", name="back")
            return mb.logical_not(x=back, name="out")

        return prog

    back = next(op for op in iter_ops(build()) if op.name == "back")
    assert not_a_candidate(CastRoundTripToBool(), back)  # rule 2's to rewrite
    after = check_pass(build, PASS, inputs=feeds(x=np.array([-1, 0, 2, np.nan], np.float32)))
    assert mil(after)[-2:] == [
        "%shifted_truthy = not_equal(x=%shifted, y=0.0)",
        "%out = logical_not(x=%shifted_truthy)",
    ]


def test_chain_from_a_float_is_not_a_round_trip():
    """cast(cast(x, int32), bool) is not x != 0: 0.5 truncates to 0."""

    def build():
        @program(("x", (4,), FP32))
        def prog(x):
            i = mb.cast(x=x, dtype="int32", name="i")
            return mb.logical_not(x=mb.cast(x=i, dtype="bool", name="back"), name="out")

        return prog

    after = check_pass(build, PASS, inputs=feeds(x=np.array([0.5, -0.5, 2.0, 0.0], np.float32)))
    assert mil(after) == [
        '%i = cast(x=%x, dtype="int32")',
        "%i_truthy = not_equal(x=%i, y=0)",
        "%out = logical_not(x=%i_truthy)",
    ]


# -- rule 2: other casts to bool --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [FP32, FP16, INT32])
def test_cast_to_bool_becomes_not_equal_zero(dtype):
    def build():
        @program(("x", (2, 5), dtype))
        def prog(x):
            return mb.logical_not(x=mb.cast(x=x, dtype="bool", name="x_bool"), name="out")

        return prog

    if dtype == INT32:
        values = np.array([[0, 1, -1, 2**31 - 1, -(2**31)], [256, 0, 7, -7, 65536]], np.int32)
    else:
        values = np.array([[np.nan, 0.0, -0.0, np.inf, -np.inf], [1e-45, -1.0, 0.0, 2.5, -0.0]])
        values = values.astype(NP[dtype])
    after = check_pass(build, PASS, inputs=feeds(x=values))
    zero = "0" if dtype == INT32 else "0.0"
    assert mil(after) == [f"%x_truthy = not_equal(x=%x, y={zero})", "%out = logical_not(x=%x_truthy)"]
    assert only_op(after, "not_equal").y.dtype == dtype


@pytest.mark.parametrize("narrow", ["int8", "uint8", "int16", "uint16"])
def test_narrow_ints_are_widened_before_the_comparison(narrow):
    def build():
        @program(("x", (2, 7), INT32))
        def prog(x):
            small = mb.cast(x=x, dtype=narrow, name="small")
            return mb.logical_not(x=mb.cast(x=small, dtype="bool", name="small_bool"), name="out")

        return prog

    values = np.array([SPECIAL_INTS[:7], SPECIAL_INTS[7:]], np.int32)
    after = check_pass(build, PASS, inputs=feeds(x=values))
    assert mil(after) == [
        f'%small = cast(x=%x, dtype="{narrow}")',
        '%small_int32 = cast(x=%small, dtype="int32")',
        "%small_truthy = not_equal(x=%small_int32, y=0)",
        "%out = logical_not(x=%small_truthy)",
    ]


def test_not_equal_refuses_a_cast_of_a_bool():
    @program(("x", (3,), FP32))
    def prog(x):
        b = mb.greater(x=x, y=0.0, name="b")
        return mb.cast(x=b, dtype="bool", name="same")

    assert not_a_candidate(CastToBoolAsNotEqual(), only_op(prog, "cast"))  # rule 1's to rewrite


def test_new_names_never_reuse_an_existing_name():
    def build():
        @program(("x", (3,), FP32))
        def prog(x):
            taken = mb.add(x=x, y=1.0, name="x_truthy")
            b = mb.cast(x=x, dtype="bool", name="x_bool")
            return mb.logical_not(x=b, name="out"), taken

        return prog

    after = check_pass(build, PASS)
    assert "%x_truthy_1 = not_equal(x=%x, y=0.0)" in mil(after)


# -- rule 3: logical_not ----------------------------------------------------------------------


def _select_of_not(keep_not: bool = False):
    @program(("c", (2, 3), BOOL), ("a", (2, 3), FP32), ("b", (2, 3), FP32))
    def prog(c, a, b):
        not_c = mb.logical_not(x=c, name="not_c")
        out = mb.select(cond=not_c, a=a, b=b, name="out")
        return (out, not_c) if keep_not else out

    return prog


def test_select_of_logical_not_swaps_its_operands():
    assert mil(_select_of_not()) == [
        "%not_c = logical_not(x=%c)",
        "%out = select(cond=%not_c, a=%a, b=%b)",
    ]
    after = check_pass(_select_of_not, PASS)
    assert mil(after) == ["%out = select(cond=%c, a=%b, b=%a)"]


def test_logical_not_that_other_ops_read_stays():
    after = check_pass(lambda: _select_of_not(keep_not=True), PASS)
    assert mil(after) == ["%not_c = logical_not(x=%c)", "%out = select(cond=%c, a=%b, b=%a)"]


def test_select_refuses_a_cond_that_is_not_a_logical_not():
    @program(("x", (2, 3), FP32), ("a", (2, 3), FP32))
    def prog(x, a):
        return mb.select(cond=mb.greater(x=x, y=0.0, name="pos"), a=a, b=x, name="out")

    assert not_a_candidate(SelectOfLogicalNot(), only_op(prog, "select"))
    before = mil(prog)
    run_pass(prog)
    assert mil(prog) == before


@pytest.mark.parametrize("count", [2, 3, 4])
def test_logical_not_pairs_cancel(count):
    def build():
        @program(("x", (2, 3), FP32))
        def prog(x):
            value = mb.less(x=x, y=0.5, name="lt")
            for i in range(count):
                value = mb.logical_not(x=value, name=f"not{i}")
            return mb.logical_and(x=value, y=mb.greater(x=x, y=-0.5, name="gt"), name="out")

        return prog

    after = check_pass(build, PASS)
    assert op_counts(after)["logical_not"] == count % 2


def test_single_logical_not_is_refused():
    prog = _comparison_round_trip()
    assert not_a_candidate(DoubleLogicalNot(), only_op(prog, "logical_not"))


# -- rule 4: select of ones and zeros ---------------------------------------------------------


def _select_constants(dtype, a, b, cond_shape=(2, 2), negate=False):
    @program(("c", cond_shape, BOOL))
    def prog(c):
        cond = mb.logical_not(x=c, name="not_c") if negate else c
        return mb.select(cond=cond, a=np.asarray(a, NP[dtype]), b=np.asarray(b, NP[dtype]), name="out")

    return prog


@pytest.mark.parametrize("dtype", [FP32, FP16, INT32])
def test_select_of_ones_and_zeros_is_a_cast(dtype):
    name = types.builtin_to_string(dtype)
    after = check_pass(lambda: _select_constants(dtype, np.ones((2, 2)), 0), PASS)
    assert mil(after) == [f'%out = cast(x=%c, dtype="{name}")']
    assert after.functions["main"].outputs[0].dtype == dtype


@pytest.mark.parametrize("dtype", [FP32, FP16, INT32])
def test_select_of_zeros_and_ones_is_a_cast_of_the_negation(dtype):
    name = types.builtin_to_string(dtype)
    after = check_pass(lambda: _select_constants(dtype, 0, np.ones((2, 2))), PASS)
    assert mil(after) == ["%c_not = logical_not(x=%c)", f'%out = cast(x=%c_not, dtype="{name}")']


def test_select_of_a_negation_reuses_it_or_cancels_it():
    after = check_pass(lambda: _select_constants(FP32, np.ones((2, 2)), 0, negate=True), PASS)
    assert mil(after) == ["%not_c = logical_not(x=%c)", '%out = cast(x=%not_c, dtype="fp32")']
    after = check_pass(lambda: _select_constants(FP32, 0, np.ones((2, 2)), negate=True), PASS)
    assert mil(after) == ['%out = cast(x=%c, dtype="fp32")']


@pytest.mark.parametrize(
    "a, b, reason",
    [
        (np.full((2, 2), 2.0), 0.0, None),
        (np.array([[1.0, 1.0], [1.0, 0.5]]), 0.0, None),
        (np.ones((2, 2)), np.nan, None),
        (np.ones((2, 2)), -0.0, "its zeros include −0, and a cast of a bool gives +0"),
        (np.ones((2, 2)), np.array([[0.0, -0.0], [0.0, 0.0]]), "its zeros include −0, and a cast of a bool gives +0"),
        (np.array([[0.0, -0.0], [0.0, 0.0]]), 1.0, "its zeros include −0, and a cast of a bool gives +0"),
    ],
)
def test_select_refuses_other_constants(a, b, reason):
    prog = _select_constants(FP32, a, b)
    if reason is None:
        assert not_a_candidate(SelectOfOnesZeros(), only_op(prog, "select"))
    else:
        assert refusal(SelectOfOnesZeros(), only_op(prog, "select")) == reason
    cond = np.array([[True, False], [False, True]])
    after = check_pass(lambda: _select_constants(FP32, a, b), PASS, inputs=feeds(c=cond))
    assert op_counts(after) == Counter(select=1)


def test_select_refuses_when_the_operands_broadcast_the_cond():
    prog = _select_constants(FP32, np.ones((2, 2)), 0, cond_shape=(1, 2))
    reason = refusal(SelectOfOnesZeros(), only_op(prog, "select"))
    assert reason == "cond's shape (1, 2) is not the output's (2, 2)"
    after = check_pass(lambda: _select_constants(FP32, np.ones((2, 2)), 0, cond_shape=(1, 2)), PASS)
    assert op_counts(after) == Counter(select=1)


def test_select_refuses_bool_operands():
    @program(("c", (2, 2), BOOL))
    def prog(c):
        return mb.select(cond=c, a=np.ones((2, 2), bool), b=np.zeros((2, 2), bool), name="out")

    assert not_a_candidate(SelectOfOnesZeros(), only_op(prog, "select"))
    run_pass(prog)
    assert op_counts(prog) == Counter(select=1)


def test_select_refuses_operands_that_are_not_constant():
    @program(("c", (2, 2), BOOL), ("a", (2, 2), FP32))
    def prog(c, a):
        return mb.select(cond=c, a=a, b=np.zeros((2, 2), np.float32), name="out")

    assert not_a_candidate(SelectOfOnesZeros(), only_op(prog, "select"))
    run_pass(prog)
    assert op_counts(prog) == Counter(select=1)


# -- blocks and scopes ------------------------------------------------------------------------


def _nested():
    @program(("x", (2, 3), FP32), ("p", (1,), BOOL))
    def prog(x, p):
        gt_bool = mb.greater(x=x, y=0.0, name="gt_bool")
        gt = mb.cast(x=gt_bool, dtype="uint8", name="gt")
        pred = mb.squeeze(x=p, name="pred")

        def then_branch():
            back = mb.cast(x=gt, dtype="bool", name="then_back")
            x_bool = mb.cast(x=x, dtype="bool", name="then_x_bool")
            both = mb.logical_and(x=back, y=x_bool, name="then_and")
            not_both = mb.logical_not(x=both, name="then_not")
            return mb.select(cond=not_both, a=x, b=mb.mul(x=x, y=-1.0), name="then_out")

        def else_branch():
            back = mb.cast(x=gt, dtype="bool", name="else_back")
            return mb.select(cond=back, a=np.ones((2, 3), np.float32), b=0.0, name="else_out")

        return mb.cond(pred=pred, _true_fn=then_branch, _false_fn=else_branch, name="out")

    return prog


@pytest.mark.parametrize("pred", [True, False])
def test_rewrites_inside_nested_blocks(pred):
    x = np.array([[np.nan, -0.0, 0.0], [1.0, -2.0, np.inf]], np.float32)
    after = check_pass(_nested, PASS, inputs=feeds(x=x, p=np.array([pred])))
    assert_canonical(after)
    assert op_counts(after)["cast"] == 1  # the else branch's select became cast(gt_bool, fp32)


def _loop():
    @program(("n", (1,), INT32), ("x", (3,), FP32))
    def prog(n, x):
        def keep_going(i, acc):
            below = mb.cast(x=mb.less(x=i, y=n, name="below_bool"), dtype="uint8", name="below")
            return mb.squeeze(x=mb.cast(x=below, dtype="bool", name="below_back"), name="go")

        def step(i, acc):
            odd = mb.cast(x=mb.mod(x=i, y=2, name="parity"), dtype="bool", name="odd")
            grown = mb.select(cond=odd, a=mb.add(x=acc, y=1.0), b=acc, name="grown")
            return mb.add(x=i, y=1, name="next_i"), grown

        start = np.zeros(1, np.int32)
        return mb.while_loop(_cond=keep_going, _body=step, loop_vars=(start, x), name="loop")

    return prog


def test_rewrites_inside_while_loop_blocks():
    inputs = feeds(n=np.array([5], np.int32), x=np.array([np.nan, -0.0, 1.0], np.float32))
    after = check_pass(_loop, PASS, inputs=inputs)
    assert_canonical(after)
    assert "%parity_truthy = not_equal(x=%parity, y=0)" in mil(after)
    assert "%go = squeeze(x=%below_bool)" in mil(after)


def test_new_ops_carry_the_scope_of_what_they_replace():
    @program(("x", (2, 2), FP32), ("y", (2, 2), INT32))
    def prog(x, y):
        with mb.scope(ScopeInfo(source=ScopeSource.TORCHSCRIPT_MODULE_NAME, data=["block.0"])):
            x_bool = mb.cast(x=x, dtype="bool", name="x_bool")
            small = mb.cast(x=y, dtype="int8", name="small")
            small_bool = mb.cast(x=small, dtype="bool", name="small_bool")
            both = mb.logical_and(x=x_bool, y=small_bool, name="both")
            return mb.select(cond=both, a=np.ones((2, 2), np.float32), b=0.0, name="out")

    prog._add_essential_scope_source(ScopeSource.TORCHSCRIPT_MODULE_NAME)
    run_pass(prog)
    prog.validate(check_essential_scope=True)
    created = {"x_truthy", "small_int32", "small_truthy", "both_fp32"}
    new = [op for op in iter_ops(prog) if op.name in created]
    assert len(new) == 4
    for op in new:
        assert op.scopes[ScopeSource.TORCHSCRIPT_MODULE_NAME] == ["block.0"], op.name


def test_refusals_are_reported():
    result = run_pass(_select_constants(FP32, np.ones((2, 2)), 0, cond_shape=(1, 2)))
    assert result.rewritten == 0
    assert [str(r) for r in result.declined] == ["select 'out': cond's shape (1, 2) is not the output's (2, 2)"]


def test_ops_no_rule_applies_to_are_not_reported():
    """--explain lists candidates left unchanged, not every cast, select and logical_not."""

    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32))
    def prog(x, y):
        half = mb.cast(x=x, dtype="fp16", name="half")
        above = mb.greater(x=x, y=y, name="above")
        below = mb.logical_not(x=above, name="below")
        scaled = mb.select(cond=above, a=np.full((2, 2), 2.0, np.float32), b=0.0, name="scaled")
        return mb.select(cond=above, a=x, b=y, name="out"), half, below, scaled

    result = run_pass(prog)
    assert result.rewritten == 0 and result.declined == []


# -- the pywebnn coverage cases, as a WebNN converter emits them --------------------------------


def _logical_and_of_floats():
    """logical_and(x, y), x and y fp32: the converter casts each input to bool."""

    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32))
    def prog(x, y):
        x_bool = mb.cast(x=x, dtype="bool", name="x_bool_and")
        y_bool = mb.cast(x=y, dtype="bool", name="y_bool_and")
        out_bool = mb.logical_and(x=x_bool, y=y_bool, name="out_bool")
        return mb.cast(x=out_bool, dtype="uint8", name="out")

    return prog


def _logical_and_of_comparisons(duplicate_names: bool = False):
    """logical_and(greater(x, y), lesser(x, z)) with uint8 round trips; the first rustnn version
    named each input's bool cast like the producer's own bool, ``{in}_bool``, twice per block."""

    def bool_name(name, consumer):
        return f"{name}_bool" if duplicate_names else f"{name}_bool_{consumer}"

    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32), ("z", (2, 2), FP32))
    def prog(x, y, z):
        gt = mb.cast(x=mb.greater(x=x, y=y, name="gt_bool"), dtype="uint8", name="gt")
        lt = mb.cast(x=mb.less(x=x, y=z, name="lt_bool"), dtype="uint8", name="lt")
        gt_in = mb.cast(x=gt, dtype="bool", name=bool_name("gt", "and"))
        lt_in = mb.cast(x=lt, dtype="bool", name=bool_name("lt", "and"))
        out_bool = mb.logical_and(x=gt_in, y=lt_in, name="out_bool")
        return mb.cast(x=out_bool, dtype="uint8", name="out")

    return prog


def _where_with_int32_cond():
    """where(int32 cond, ones, zeros): select.cond must be bool, so the converter casts it."""

    @program(("cond", (2, 2), INT32))
    def prog(cond):
        cond_bool = mb.cast(x=cond, dtype="bool", name="cond_bool_where")
        ones = np.ones((2, 2), np.float32)
        zeros = np.zeros((2, 2), np.float32)
        return mb.select(cond=cond_bool, a=ones, b=zeros, name="out")

    return prog


def _chain_ending_in_fp32_cast():
    """logical_not(greater(x, y)) as uint8, then cast to fp32 for a float consumer."""

    @program(("x", (2, 2), FP32), ("y", (2, 2), FP32))
    def prog(x, y):
        gt = mb.cast(x=mb.greater(x=x, y=y, name="gt_bool"), dtype="uint8", name="gt")
        gt_in = mb.cast(x=gt, dtype="bool", name="gt_bool_not")
        not_gt = mb.cast(x=mb.logical_not(x=gt_in, name="not_bool"), dtype="uint8", name="not")
        return mb.cast(x=not_gt, dtype="fp32", name="out")

    return prog


def _empty_pipeline_with_pass():
    pipeline = ct.PassPipeline.EMPTY
    pipeline.append_pass(PASS)
    return pipeline


COVERAGE_CASES = {
    "logical_and_of_floats": (_logical_and_of_floats, {"x_truthy", "y_truthy"}),
    "logical_and_of_comparisons": (_logical_and_of_comparisons, set()),
    "where_with_int32_cond": (_where_with_int32_cond, {"cond_truthy"}),
    "chain_ending_in_fp32_cast": (_chain_ending_in_fp32_cast, set()),
}


def _special_feeds(prog: Program) -> dict:
    values = {
        FP32: np.array([[np.nan, -0.0], [np.inf, 0.0]], np.float32),
        INT32: np.array([[0, -1], [256, 2**31 - 1]], np.int32),
    }
    out = {}
    for i, (name, var) in enumerate(prog.functions["main"].inputs.items()):
        out[name] = np.roll(values[var.dtype].reshape(-1), i).reshape(2, 2)
    return out


@pytest.mark.parametrize("case", sorted(COVERAGE_CASES))
def test_pywebnn_coverage_case_is_canonical_exact_and_converts(case, tmp_path):
    build, new_comparisons = COVERAGE_CASES[case]
    pipeline = _empty_pipeline_with_pass()
    after = check_pass(build, pipeline)
    assert_equivalent(build(), after, inputs=_special_feeds(after))
    assert_canonical(after)
    assert {op.name for op in iter_ops(after) if op.op_type == "not_equal"} == new_comparisons

    model = ct.convert(
        after,
        convert_to="mlprogram",
        pass_pipeline=_empty_pipeline_with_pass(),
        minimum_deployment_target=IOS17,
        skip_model_load=True,
    )
    model.save(str(tmp_path / f"{case}.mlpackage"))
    assert (tmp_path / f"{case}.mlpackage" / "Manifest.json").exists()


def test_duplicate_bool_temporaries_of_the_first_converter_are_gone():
    before = _logical_and_of_comparisons(duplicate_names=True)
    names = [out.name for op in iter_ops(before) for out in op.outputs if op.op_type != "const"]
    assert Counter(names)["gt_bool"] == 2
    after = check_pass(lambda: _logical_and_of_comparisons(duplicate_names=True), _empty_pipeline_with_pass())
    assert mil(after) == [
        "%gt_bool = greater(x=%x, y=%y)",
        "%lt_bool = less(x=%x, y=%z)",
        "%out_bool = logical_and(x=%gt_bool, y=%lt_bool)",
        '%out = cast(x=%out_bool, dtype="uint8")',
    ]


# -- exact equivalence on special values ------------------------------------------------------

HOP_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "fp16", "fp32"]


@st.composite
def truthiness_programs(draw):
    """A cast to bool of x (fp32/fp16/int32, or int32 narrowed to int8/uint8/int16/uint16) that
    feeds every rule: round trips through 1-3 numeric hops, a double logical_not, a select of
    constants (ones/zeros, swapped, or look-alikes), a select of a negation; feeds with NaN,
    ±0, ±inf, subnormals, and ints that wrap to zero in a narrow int."""
    source = draw(st.sampled_from([FP32, FP16, INT32]))
    narrow = None
    if source == INT32:
        narrow = draw(st.sampled_from([None, "int8", "uint8", "int16", "uint16"]))
    hops = draw(st.lists(st.sampled_from(HOP_DTYPES), min_size=1, max_size=3))
    out_dtype = draw(st.sampled_from([FP32, FP16, INT32]))
    pair = draw(st.sampled_from([(1, 0), (0, 1), (2, 0), (1, -0.0)]))
    size = draw(st.integers(1, 6))
    if source == INT32:
        elements = st.sampled_from(SPECIAL_INTS + WRAPPING_INTS) | st.integers(-(2**31), 2**31 - 1)
        wide = np.int64
    else:
        elements = st.sampled_from(SPECIAL_FLOATS) | st.floats(width=16 if source == FP16 else 32)
        wide = np.float64
    values = draw(st.lists(elements, min_size=size, max_size=size))
    with np.errstate(over="ignore"):
        x = np.array(values, dtype=wide).astype(NP[source])
    flags = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)))

    def build():
        @program(("x", (size,), source), ("flag", (size,), BOOL))
        def prog(x, flag):
            value = mb.cast(x=x, dtype=narrow, name="narrow") if narrow else x
            truthy = mb.cast(x=value, dtype="bool", name="x_bool")
            trip = truthy
            for i, dtype in enumerate(hops):
                trip = mb.cast(x=trip, dtype=dtype, name=f"hop{i}")
            trip = mb.cast(x=trip, dtype="bool", name="trip_bool")
            negated = mb.logical_not(x=trip, name="negated")
            twice = mb.logical_not(x=negated, name="twice")
            both = mb.logical_xor(x=twice, y=flag, name="both")
            a = np.full((size,), pair[0], NP[out_dtype])
            b = np.full((size,), pair[1], NP[out_dtype])
            picked = mb.select(cond=negated, a=a, b=b, name="picked")
            other = np.full((size,), 3, NP[source])
            not_both = mb.logical_not(x=both, name="not_both")
            swapped = mb.select(cond=not_both, a=x, b=other, name="swapped")
            return both, picked, swapped, trip

        return prog

    return build, {"x": x, "flag": flags}


@given(truthiness_programs())
def test_truthiness_is_exact_on_special_values(case):
    build, inputs = case
    after = check_pass(build, PASS, inputs=inputs)
    assert_canonical(after)


# -- random programs (the generator of issue #3, with round trips planted) ---------------------


@given(st.sampled_from(OPSETS).flatmap(lambda opset: programs(opset, plant=[PASS])))
def test_random_programs_stay_exact(drawn):
    assume(evaluates(drawn))
    for inputs in drawn.feeds:
        after = check_pass(drawn.build, PASS, inputs=inputs)
    assert not [op for op in iter_ops(after) if op.op_type == "cast" and op.dtype.val == "bool"]

"""The equivalence harness must be able to fail, and say where."""

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types
from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass
from coremltools.converters.mil.mil.passes.pass_registry import register_pass

from mil_passes.testing import assert_equivalent, check_pass, op_counts, random_inputs

IOS17 = ct.target.iOS17


def build(offset=1.0, name="out"):
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=IOS17)
    def prog(x):
        return mb.add(x=x, y=offset, name=name)

    return prog


def test_equal_programs_are_equivalent():
    assert_equivalent(build(), build())


def test_different_outputs_name_the_output_worst_element_and_values():
    with pytest.raises(
        AssertionError, match=r"output 'out' differs at 6 of 6 elements; worst at index \(\d, \d\): before"
    ):
        assert_equivalent(build(1.0), build(1.5))


def test_exact_by_default_but_tolerance_can_be_given():
    with pytest.raises(AssertionError):
        assert_equivalent(build(1.0), build(1.0 + 1e-6))
    assert_equivalent(build(1.0), build(1.0 + 1e-6), rtol=1e-5, atol=1e-5)


def test_negative_zero_is_not_bit_equal_to_zero():
    def signed(sign):
        @mb.program(input_specs=[mb.TensorSpec((1,))], opset_version=IOS17)
        def prog(x):
            return mb.mul(x=mb.mul(x=x, y=0.0), y=sign, name="out")

        return prog

    with pytest.raises(AssertionError, match="output 'out'"):
        assert_equivalent(signed(1.0), signed(-1.0), inputs={"x": np.ones(1, np.float32)})


def test_interface_change_is_reported():
    with pytest.raises(AssertionError, match="outputs changed"):
        assert_equivalent(build(name="out"), build(name="renamed"))


def test_random_inputs_cover_dtypes_and_symbolic_sizes():
    batch = get_new_symbol()

    @mb.program(
        input_specs=[
            mb.TensorSpec((batch, 2)),
            mb.TensorSpec((batch,), dtype=types.int32),
            mb.TensorSpec((4,), dtype=types.bool),
        ],
        opset_version=IOS17,
    )
    def prog(x, n, b):
        return mb.add(x=x, y=1.0), n, b

    feeds = random_inputs(prog, seed=3, sizes=1)
    assert feeds["x"].shape == (1, 2) and feeds["x"].dtype == np.float32
    assert feeds["n"].dtype == np.int32 and feeds["b"].dtype == np.bool_
    assert random_inputs(prog, sizes={str(batch): 4})["x"].shape == (4, 2)
    assert random_inputs(prog, seed=1)["x"].tolist() == random_inputs(prog, seed=1)["x"].tolist()


@register_pass(namespace="test_harness", override=True)
class flip_add_to_sub(AbstractGraphPass):
    """Wrong on purpose: turns every add into a sub."""

    def apply(self, prog):
        for func in prog.functions.values():
            for op in list(func.operations):
                if op.op_type == "add":
                    with func:
                        new = mb.sub(x=op.x, y=op.y, before_op=op)
                    func.replace_uses_of_var_after_op(anchor_op=op, old_var=op.outputs[0], new_var=new)
                    func.remove_ops([op])


@register_pass(namespace="test_harness", override=True)
class append_relu_each_run(AbstractGraphPass):
    """Not idempotent on purpose: adds a relu in front of the output every time."""

    def apply(self, prog):
        func = prog.functions["main"]
        out = func.outputs[0]
        with func:
            new = mb.relu(x=out, before_op=None)
        func.replace_uses_of_var_after_op(anchor_op=new.op, old_var=out, new_var=new)


def test_check_pass_catches_a_wrong_rewrite():
    with pytest.raises(AssertionError, match="output 'out' differs"):
        check_pass(build, "test_harness::flip_add_to_sub")


def test_check_pass_catches_a_pass_that_is_not_idempotent():
    def positive():
        @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
        def prog(x):
            return mb.relu(x=x, name="out")

        return prog

    with pytest.raises(AssertionError, match="not idempotent"):
        check_pass(positive, "test_harness::append_relu_each_run")


def test_check_pass_returns_the_rewritten_program():
    after = check_pass(build, "common::dead_code_elimination")
    assert op_counts(after) == {"add": 1}


def test_check_pass_checks_every_function_not_only_main():
    def two_functions():
        @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
        def prog(x):
            return mb.relu(x=x, name="out")

        @mb.function(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
        def second(x):
            return mb.add(x=x, y=1.0, name="out")

        prog.add_function("second", second)
        return prog

    # flip_add_to_sub leaves main (no add) as it is and breaks the second function.
    with pytest.raises(AssertionError, match="output 'out' differs"):
        check_pass(two_functions, "test_harness::flip_add_to_sub")

"""The interpreter's contract: inputs checked, dtypes kept, control flow, no mutation, scale."""

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Program, get_new_symbol, types

from mil_passes.reference import SUPPORTED_OPS, UnsupportedOpError, evaluate

IOS17 = ct.target.iOS17


def _two_inputs():
    @mb.program(
        input_specs=[mb.TensorSpec((2, 3)), mb.TensorSpec((2, 3), dtype=types.int32)],
        opset_version=IOS17,
    )
    def prog(x, n):
        return mb.add(x=x, y=mb.cast(x=n, dtype="fp32"), name="total")

    return prog


def test_adds_values_and_keys_outputs_by_name():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    n = np.full((2, 3), 2, dtype=np.int32)
    out = evaluate(_two_inputs(), {"x": x, "n": n})
    assert list(out) == ["total"]
    np.testing.assert_array_equal(out["total"], x + 2)


def test_rejects_non_program():
    with pytest.raises(TypeError, match="needs a coremltools MIL Program, got dict"):
        evaluate({}, {})


def test_missing_input_names_it_and_its_type():
    with pytest.raises(ValueError, match=r"missing input 'n': expected tensor<int32, \[2, 3\]>"):
        evaluate(_two_inputs(), {"x": np.zeros((2, 3), np.float32)})


def test_extra_input_is_named():
    feeds = {"x": np.zeros((2, 3), np.float32), "n": np.zeros((2, 3), np.int32), "y": 1}
    with pytest.raises(ValueError, match="unexpected input 'y'"):
        evaluate(_two_inputs(), feeds)


def test_mistyped_input_names_expected_type():
    feeds = {"x": np.zeros((2, 3), np.float64), "n": np.zeros((2, 3), np.int32)}
    with pytest.raises(ValueError, match=r"input 'x' has dtype float64: expected tensor<fp32, \[2, 3\]>"):
        evaluate(_two_inputs(), feeds)


def test_misshaped_input_names_expected_shape():
    feeds = {"x": np.zeros((3, 2), np.float32), "n": np.zeros((2, 3), np.int32)}
    with pytest.raises(ValueError, match=r"input 'x' has shape \(3, 2\)"):
        evaluate(_two_inputs(), feeds)


def test_unknown_function_is_named():
    with pytest.raises(ValueError, match="no function 'decoder'"):
        evaluate(_two_inputs(), {}, function="decoder")


def test_symbolic_dims_take_sizes_from_inputs_and_must_agree():
    batch = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec((batch, 4)), mb.TensorSpec((batch, 4))], opset_version=IOS17)
    def prog(a, b):
        return mb.concat(values=[a, b], axis=0, name="joined")

    for size in (1, 3):
        a = np.ones((size, 4), np.float32)
        assert evaluate(prog, {"a": a, "b": a})["joined"].shape == (2 * size, 4)
    with pytest.raises(ValueError, match="but input 'a' gave it size 2"):
        evaluate(prog, {"a": np.ones((2, 4), np.float32), "b": np.ones((3, 4), np.float32)})


def test_fp16_stays_fp16_and_bool_stays_bool():
    @mb.program(input_specs=[mb.TensorSpec((4,), dtype=types.fp16)], opset_version=IOS17)
    def prog(x):
        doubled = mb.mul(x=x, y=np.float16(2))
        return doubled, mb.greater(x=doubled, y=np.float16(0))

    x = np.array([1, -2, 3.5, 0], np.float16)
    doubled, positive = evaluate(prog, {"x": x}).values()
    assert doubled.dtype == np.float16 and positive.dtype == np.bool_
    np.testing.assert_array_equal(doubled, x * np.float16(2))
    np.testing.assert_array_equal(positive, [True, False, True, False])


def test_cond_takes_the_branch_its_predicate_picks():
    @mb.program(input_specs=[mb.TensorSpec((3,)), mb.TensorSpec((1,), dtype=types.bool)], opset_version=IOS17)
    def prog(x, p):
        pred = mb.squeeze(x=p)
        return mb.cond(pred=pred, _true_fn=lambda: mb.add(x=x, y=1.0), _false_fn=lambda: mb.sub(x=x, y=1.0))

    x = np.zeros(3, np.float32)
    assert evaluate(prog, {"x": x, "p": np.array([True])})["cond_0"].tolist() == [1, 1, 1]
    assert evaluate(prog, {"x": x, "p": np.array([False])})["cond_0"].tolist() == [-1, -1, -1]


def test_while_loop_runs_until_its_condition_fails():
    @mb.program(input_specs=[mb.TensorSpec((1,)), mb.TensorSpec((1,))], opset_version=IOS17)
    def prog(x, limit):
        def cond(acc, step):
            return mb.squeeze(x=mb.less(x=acc, y=limit))

        def body(acc, step):
            return mb.add(x=acc, y=step), mb.mul(x=step, y=2.0)

        return mb.while_loop(_cond=cond, _body=body, loop_vars=(x, mb.const(val=np.ones(1, np.float32))))

    acc, step = evaluate(prog, {"x": np.zeros(1, np.float32), "limit": np.array([10], np.float32)}).values()
    assert acc.tolist() == [15.0] and step.tolist() == [16.0]


def test_any_function_of_a_multifunction_program():
    @mb.function(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def plus(x):
        return mb.add(x=x, y=1.0, name="up")

    @mb.function(input_specs=[mb.TensorSpec((2,))], opset_version=IOS17)
    def minus(x):
        return mb.sub(x=x, y=1.0, name="down")

    prog = Program()
    prog.add_function("main", plus)
    prog.add_function("decrement", minus)
    x = np.zeros(2, np.float32)
    assert evaluate(prog, {"x": x})["up"].tolist() == [1, 1]
    assert evaluate(prog, {"x": x}, function="decrement")["down"].tolist() == [-1, -1]


def test_op_without_kernel_names_type_and_op(monkeypatch):
    from mil_passes.reference.kernels import KERNELS

    monkeypatch.delitem(KERNELS, "non_maximum_suppression")  # as if it had no kernel

    @mb.program(input_specs=[mb.TensorSpec((1, 5, 4)), mb.TensorSpec((1, 5, 2))], opset_version=IOS17)
    def prog(boxes, scores):
        return mb.non_maximum_suppression(boxes=boxes, scores=scores, max_boxes=3, iou_threshold=0.5, name="nms")[0]

    feeds = {"boxes": np.zeros((1, 5, 4), np.float32), "scores": np.zeros((1, 5, 2), np.float32)}
    with pytest.raises(UnsupportedOpError, match="op 'nms' of type 'non_maximum_suppression'"):
        evaluate(prog, feeds)


def test_evaluation_does_not_modify_the_program():
    prog = _two_inputs()
    before = str(prog)
    evaluate(prog, {"x": np.zeros((2, 3), np.float32), "n": np.zeros((2, 3), np.int32)})
    assert str(prog) == before


def test_declared_shape_mismatch_is_reported():
    prog = _two_inputs()
    add = prog.functions["main"].find_ops(op_type="add")[0]
    # A pass that rewires an input without fixing types produces exactly this inconsistency.
    add.outputs[0]._sym_type = types.tensor(types.fp32, (3, 2))
    feeds = {"x": np.zeros((2, 3), np.float32), "n": np.zeros((2, 3), np.int32)}
    with pytest.raises(ValueError, match=r"computed shape \(2, 3\) for 'total'"):
        evaluate(prog, feeds)


def test_supported_ops_lists_kernels_value_inference_and_control_flow():
    for op_type in ("concat", "slice_by_index", "cond", "while_loop", "const", "matmul"):
        assert op_type in SUPPORTED_OPS


def test_evaluates_a_72000_op_program():
    """Deep programs must not recurse: a chain of 72,000 ops evaluates."""

    @mb.program(input_specs=[mb.TensorSpec((1, 4))], opset_version=IOS17)
    def prog(x):
        for _ in range(36_000):
            x = mb.add(x=x, y=1.0)
            x = mb.mul(x=x, y=1.0)
        return x

    ops = list(prog.functions["main"].operations)
    assert len([op for op in ops if op.op_type != "const"]) == 72_000
    (out,) = evaluate(prog, {"x": np.zeros((1, 4), np.float32)}).values()
    assert out.tolist() == [[36_000.0] * 4]


def test_an_output_of_unknown_rank_takes_the_computed_shape():
    """fill of a runtime shape is declared ``tensor<fp32, [*is0]>``: its rank is known only when run."""

    @mb.program(input_specs=[mb.TensorSpec((get_new_symbol(),), dtype=types.int32)], opset_version=IOS17)
    def prog(shape):
        return mb.fill(shape=shape, value=2.0)

    assert "*" in str(prog.functions["main"].outputs[0].shape[0])  # variadic

    (out,) = evaluate(prog, {"shape": np.array([2, 1, 3], np.int32)}).values()
    np.testing.assert_array_equal(out, np.full((2, 1, 3), 2.0, np.float32))


def test_every_kernel_module_is_a_loaded_family():
    import pkgutil

    from mil_passes.reference import kernels

    assert set(kernels.FAMILIES) == {module.name for module in pkgutil.iter_modules(kernels.__path__)}


def test_output_values_are_in_order_and_one_var_may_be_two_outputs():
    from mil_passes.reference.interpreter import output_values

    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=IOS17)
    def prog(x):
        y = mb.relu(x=x, name="y")
        return y, mb.mul(x=y, y=2.0, name="z"), y

    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    y, z, again = output_values(prog, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    np.testing.assert_array_equal(z, np.maximum(x, 0) * 2)
    assert again is y


def test_an_intermediate_is_dropped_after_its_last_reader(monkeypatch):
    import weakref

    from mil_passes.reference import kernels
    from mil_passes.reference.interpreter import evaluate_vars

    relu_output: list[weakref.ref] = []
    alive_at_cos: list[bool] = []
    sin, cos = kernels.KERNELS["sin"], kernels.KERNELS["cos"]

    def watching_sin(op, args):
        relu_output.append(weakref.ref(args["x"]))
        return sin(op, args)

    def checking_cos(op, args):
        alive_at_cos.append(relu_output[-1]() is not None)
        return cos(op, args)

    monkeypatch.setitem(kernels.KERNELS, "sin", watching_sin)
    monkeypatch.setitem(kernels.KERNELS, "cos", checking_cos)

    @mb.program(input_specs=[mb.TensorSpec((4,))], opset_version=IOS17)
    def prog(x):
        a = mb.relu(x=x)  # read by sin only
        b = mb.sin(x=a)  # read by cos and add
        return mb.add(x=mb.cos(x=b), y=b, name="out")

    x = np.arange(4, dtype=np.float32)
    out = evaluate(prog, {"x": x})
    np.testing.assert_allclose(out["out"], np.cos(np.sin(x)) + np.sin(x), rtol=1e-6)
    evaluate_vars(prog, {"x": x})  # keeps every value
    assert alive_at_cos == [False, True]


def _scaled():
    @mb.program(input_specs=[mb.TensorSpec((2, 3))], opset_version=IOS17)
    def prog(x):
        return mb.mul(x=x, y=np.array([1.0, 2.0, 3.0], np.float32), name="scaled")

    return prog


def test_a_const_remembered_between_evaluations_follows_changes_to_it():
    """A const's value is remembered between evaluations, but a value changed in place, a new
    value object, and a const op replaced by another all give the new numbers."""
    import gc

    from mil_passes.reference import interpreter

    prog = _scaled()
    x = np.ones((2, 3), np.float32)
    const = next(op for op in prog.functions["main"].operations if op.op_type == "const")
    assert evaluate(prog, {"x": x})["scaled"].tolist() == [[1, 2, 3]] * 2
    assert id(const) in interpreter._CONSTS
    const.outputs[0]._sym_val.val[1] = 5.0  # in place
    assert evaluate(prog, {"x": x})["scaled"].tolist() == [[1, 5, 3]] * 2
    const.outputs[0]._sym_val.val = np.array([7.0, 8.0, 9.0], np.float32)  # a new value object
    assert evaluate(prog, {"x": x})["scaled"].tolist() == [[7, 8, 9]] * 2
    mul = prog.functions["main"].find_ops(op_type="mul")[0]
    with prog.functions["main"]:
        other = mb.const(val=np.array([4.0, 4.0, 4.0], np.float32), before_op=mul)
    mul.enclosing_block.replace_uses_of_var_after_op(anchor_op=other.op, old_var=const.outputs[0], new_var=other)
    prog.functions["main"].remove_ops([const])
    assert evaluate(prog, {"x": x})["scaled"].tolist() == [[4, 4, 4]] * 2
    key = id(const)
    del const, mul, other, prog
    gc.collect()
    assert key not in interpreter._CONSTS  # the entry went with its op

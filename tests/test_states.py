"""States (iOS18) on the reference interpreter: read_state, coreml_update_state, slice_update,
evaluate(states=), evaluate_step(s), make_state / predict(state=)."""

import numpy as np
import pytest
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_passes.reference import (
    State,
    describe_type,
    evaluate,
    evaluate_step,
    evaluate_steps,
    make_state,
    predict,
)
from mil_passes.reference.feeds import random_inputs
from mil_passes.reference.kernels.state import StateCell
from mil_passes.reference.state import StateError, zero_states

IOS18 = ct.target.iOS18


def _window_program(cached=4, frames=2):
    """out = update + old: the cache keeps the last ``cached`` frames of concat(cache, x)."""

    @mb.program(
        input_specs=[mb.StateTensorSpec((1, cached), dtype=types.fp16), mb.TensorSpec((1, frames), dtype=types.fp16)],
        opset_version=IOS18,
    )
    def prog(cache, x):
        old = mb.read_state(input=cache)
        joined = mb.concat(values=[old, x], axis=-1)
        window = mb.slice_by_index(x=joined, begin=[0, frames], end=[1, cached + frames])
        new = mb.coreml_update_state(state=cache, value=window)
        return mb.add(x=new, y=old, name="out")

    return prog


def _stream(cache, frames_list, cached):
    outputs = []
    for x in frames_list:
        joined = np.concatenate([cache, x], -1)
        new = joined[:, -cached:]
        outputs.append(new + cache)
        cache = new
    return outputs, cache


def test_describe_type_of_a_state_input():
    var = _window_program().functions["main"].inputs["cache"]
    assert describe_type(var) == "state<tensor<fp16, [1, 4]>>"


def test_a_read_before_the_update_keeps_the_old_value_and_states_start_at_zero():
    prog = _window_program()
    x = np.array([[1, 2]], np.float16)
    outputs, states = evaluate_step(prog, {"x": x})
    np.testing.assert_array_equal(states["cache"], [[0, 0, 1, 2]])
    np.testing.assert_array_equal(outputs["out"], [[0, 0, 1, 2]])  # new + old, old is zeros


def test_steps_carry_the_state_and_match_numpy_bit_for_bit():
    prog = _window_program()
    rng = np.random.default_rng(0)
    frames = [rng.standard_normal((1, 2)).astype(np.float16) for _ in range(6)]
    outputs, after = evaluate_steps(prog, [{"x": x} for x in frames])
    want, final = _stream(np.zeros((1, 4), np.float16), frames, 4)
    for got, expected in zip(outputs, want):
        np.testing.assert_array_equal(got["out"], expected)
    np.testing.assert_array_equal(after[-1]["cache"], final)
    assert len(after) == 6


def test_evaluate_step_does_not_change_the_states_it_is_given():
    prog = _window_program()
    start = {"cache": np.ones((1, 4), np.float16)}
    _, new = evaluate_step(prog, {"x": np.zeros((1, 2), np.float16)}, start)
    np.testing.assert_array_equal(start["cache"], np.ones((1, 4)))
    np.testing.assert_array_equal(new["cache"], [[1, 1, 0, 0]])


def test_evaluate_updates_a_state_cell_in_place_and_reads_arrays_without_changing_them():
    prog = _window_program()
    cell = StateCell("cache", np.ones((1, 4), np.float16))
    evaluate(prog, {"x": np.full((1, 2), 3, np.float16)}, states={"cache": cell})
    np.testing.assert_array_equal(cell.value, [[1, 1, 3, 3]])
    array = np.ones((1, 4), np.float16)
    evaluate(prog, {"x": np.full((1, 2), 3, np.float16)}, states={"cache": array})
    np.testing.assert_array_equal(array, np.ones((1, 4)))


@pytest.mark.parametrize(
    "states, message",
    [
        ({"nope": np.zeros((1, 4), np.float16)}, "unexpected state 'nope': the function's states are cache"),
        (
            {"cache": np.zeros((1, 5), np.float16)},
            r"state 'cache' gets shape \(1, 5\): expected state<tensor<fp16, \[1, 4\]>>",
        ),
        ({"cache": np.zeros((1, 4), np.int32)}, "state 'cache' gets dtype int32"),
        ({"cache": StateCell("cache", np.zeros((1, 4), np.float32))}, r"state 'cache' holds float32\[1, 4\]"),
    ],
)
def test_wrong_states_are_one_line_errors(states, message):
    with pytest.raises(ValueError, match=message):
        evaluate(_window_program(), {"x": np.zeros((1, 2), np.float16)}, states=states)


def test_a_state_passed_as_an_input_is_named():
    with pytest.raises(ValueError, match="'cache' is a state, not an input: pass it in states="):
        evaluate(_window_program(), {"x": np.zeros((1, 2), np.float16), "cache": np.zeros((1, 4), np.float16)})


def test_random_inputs_leave_states_out_and_zero_states_are_zero():
    prog = _window_program()
    assert list(random_inputs(prog)) == ["x"]
    zeros = zero_states(prog)
    assert list(zeros) == ["cache"] and zeros["cache"].dtype == np.float16 and not zeros["cache"].any()


def _slice_update_program(begin_mask, end_mask, squeeze_mask, stride, update_shape):
    @mb.program(
        input_specs=[
            mb.StateTensorSpec((4, 6), dtype=types.fp16),
            mb.TensorSpec(update_shape, dtype=types.fp16),
            mb.TensorSpec((2,), dtype=types.int32),
            mb.TensorSpec((2,), dtype=types.int32),
        ],
        opset_version=IOS18,
    )
    def prog(cache, update, begin, end):
        old = mb.read_state(input=cache)
        new = mb.slice_update(
            x=old,
            update=update,
            begin=begin,
            end=end,
            stride=stride,
            begin_mask=begin_mask,
            end_mask=end_mask,
            squeeze_mask=squeeze_mask,
        )
        return mb.coreml_update_state(state=cache, value=new)

    return prog


@pytest.mark.parametrize(
    "begin, end, stride, begin_mask, end_mask, squeeze_mask, index",
    [
        ([1, 2], [3, 5], [1, 1], [False, False], [False, False], [False, False], (slice(1, 3), slice(2, 5))),
        ([1, 2], [3, 5], [1, 2], [True, False], [False, True], [False, False], (slice(None, 3), slice(2, None, 2))),
        (
            [-3, -1],
            [-1, 0],
            [1, -1],
            [False, False],
            [False, True],
            [False, False],
            (slice(-3, -1), slice(-1, None, -1)),
        ),
        ([2, 1], [3, 4], [1, 1], [False, False], [False, False], [True, False], (2, slice(1, 4))),
        ([0, 5], [4, 0], [2, -2], [False, False], [False, False], [False, False], (slice(0, 4, 2), slice(5, 0, -2))),
    ],
)
def test_slice_update_on_a_state_with_run_time_bounds_every_mask_and_stride(
    begin, end, stride, begin_mask, end_mask, squeeze_mask, index
):
    base = np.arange(24, dtype=np.float16).reshape(4, 6)
    region = base[index]
    update = -np.arange(1, region.size + 1, dtype=np.float16).reshape(region.shape)
    prog = _slice_update_program(begin_mask, end_mask, squeeze_mask, stride, update.shape or (1,))
    feeds = {
        "update": update.reshape(update.shape or (1,)),
        "begin": np.array(begin, np.int32),
        "end": np.array(end, np.int32),
    }
    outputs, states = evaluate_step(prog, feeds, {"cache": base})
    want = base.copy()
    want[index] = update
    np.testing.assert_array_equal(states["cache"], want)
    np.testing.assert_array_equal(next(iter(outputs.values())), want)


def _two_function_program():
    """Functions ``inc`` and ``dec`` over the same state shape (a multi-function program)."""

    @mb.function(input_specs=[mb.StateTensorSpec((2,), dtype=types.fp16)], opset_version=IOS18)
    def inc(s):
        return mb.coreml_update_state(state=s, value=mb.add(x=mb.read_state(input=s), y=np.float16(1)))

    @mb.function(input_specs=[mb.StateTensorSpec((2,), dtype=types.fp16)], opset_version=IOS18)
    def dec(s):
        return mb.coreml_update_state(state=s, value=mb.sub(x=mb.read_state(input=s), y=np.float16(2)))

    prog = ct.converters.mil.mil.Program()
    prog.add_function("main", inc)
    prog.add_function("dec", dec)
    return prog


def test_states_in_every_function_of_a_multi_function_program():
    prog = _two_function_program()
    outputs, states = evaluate_steps(prog, [{}, {}, {}])
    np.testing.assert_array_equal(states[-1]["s"], [3, 3])
    _, after = evaluate_step(prog, {}, states[-1], function="dec")
    np.testing.assert_array_equal(after["s"], [1, 1])


def _states_in_control_flow():
    @mb.program(
        input_specs=[mb.StateTensorSpec((3,), dtype=types.fp16), mb.TensorSpec((1,), dtype=types.int32)],
        opset_version=IOS18,
    )
    def prog(s, n):
        def cond(i):
            return mb.less(x=i, y=mb.squeeze(x=n))

        def body(i):
            bumped = mb.add(x=mb.read_state(input=s), y=np.float16(1))
            mb.coreml_update_state(state=s, value=bumped)
            return (mb.add(x=i, y=1),)

        loop = mb.while_loop(_cond=cond, _body=body, loop_vars=(np.int32(0),))
        return mb.read_state(input=s), loop

    return prog


def test_states_written_inside_a_while_loop_body():
    prog = _states_in_control_flow()
    _, states = evaluate_steps(prog, [{"n": np.array([3], np.int32)}, {"n": np.array([2], np.int32)}])
    np.testing.assert_array_equal(states[-1]["s"], [5, 5, 5])


# -- make_state / predict(state=) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def window_model():
    return ct.convert(
        _window_program(),
        convert_to="mlprogram",
        minimum_deployment_target=IOS18,
        compute_precision=ct.precision.FLOAT16,
        skip_model_load=True,
    )


def test_predict_updates_the_state_in_place_as_mlmodel_predict_does(window_model):
    state = make_state(window_model)
    assert isinstance(state, State) and isinstance(state, ct.models.model.MLState)
    rng = np.random.default_rng(1)
    frames = [rng.standard_normal((1, 2)).astype(np.float16) for _ in range(5)]
    got = [predict(window_model, {"x": x}, state=state)["out"] for x in frames]
    want, final = _stream(np.zeros((1, 4), np.float16), frames, 4)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(state.read_state("cache"), final)


def test_write_state_then_read_state(window_model):
    state = make_state(window_model)
    state.write_state("cache", np.arange(4, dtype=np.float32).reshape(1, 4))
    value = state.read_state("cache")
    assert value.dtype == np.float16
    np.testing.assert_array_equal(value, [[0, 1, 2, 3]])
    value[0, 0] = 9  # a copy
    assert state.read_state("cache")[0, 0] == 0
    out = predict(window_model, {"x": np.array([[4, 5]], np.float16)}, state=state)["out"]
    np.testing.assert_array_equal(out, [[2, 4, 6, 8]])


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda s: s.read_state("kv"), StateError, "no state named 'kv' \\(the model's states: cache\\)"),
        (lambda s: s.write_state("cache", np.zeros((4,))), StateError, "state 'cache' gets shape \\(4,\\)"),
        (lambda s: s.write_state("cache", np.zeros((1, 4), np.int64)), StateError, "gets dtype int64"),
    ],
)
def test_state_errors_are_runtime_errors_as_mlstate_raises(window_model, call, error, message):
    with pytest.raises(RuntimeError, match=message):
        call(make_state(window_model))


def test_predict_refuses_a_foreign_state_object_and_a_batch_with_a_state(window_model):
    with pytest.raises(TypeError, match="state must come from mil_passes.reference.make_state"):
        predict(window_model, {"x": np.zeros((1, 2))}, state={"cache": np.zeros((1, 4))})
    with pytest.raises(ValueError, match="unbatched"):
        predict(window_model, [{"x": np.zeros((1, 2))}], state=make_state(window_model))


def test_predict_without_a_state_runs_from_zero_states(window_model):
    out = predict(window_model, {"x": np.array([[1, 2]], np.float16)})["out"]
    np.testing.assert_array_equal(out, [[0, 0, 1, 2]])


def test_make_state_of_a_model_without_states_is_an_error():
    @mb.program(input_specs=[mb.TensorSpec((2,))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.relu(x=x)

    with pytest.raises(ValueError, match="the model has no states"):
        make_state(prog)


def test_make_state_of_a_saved_package(window_model, tmp_path):
    path = str(tmp_path / "window.mlpackage")
    window_model.save(path)
    loaded = ct.models.MLModel(path, skip_model_load=True)
    state = make_state(loaded)
    predict(loaded, {"x": np.array([[1, 2]], np.float16)}, state=state)
    np.testing.assert_array_equal(state.read_state("cache"), [[0, 0, 1, 2]])


def test_each_function_of_a_saved_multi_function_package_keeps_its_own_state(tmp_path):
    def model(step):
        @mb.program(input_specs=[mb.StateTensorSpec((2,), dtype=types.fp16)], opset_version=IOS18)
        def prog(s):
            return mb.coreml_update_state(state=s, value=mb.add(x=mb.read_state(input=s), y=np.float16(step)), name="y")

        return ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=IOS18, skip_model_load=True)

    descriptor = ct.utils.MultiFunctionDescriptor()
    for name, step in (("inc", 1), ("dec", -2)):
        path = str(tmp_path / f"{name}.mlpackage")
        model(step).save(path)
        descriptor.add_function(path, src_function_name="main", target_function_name=name)
    descriptor.default_function_name = "inc"
    ct.utils.save_multifunction(descriptor, str(tmp_path / "multi.mlpackage"))
    for name, step in (("inc", 1), ("dec", -2)):
        loaded = ct.models.MLModel(str(tmp_path / "multi.mlpackage"), function_name=name, skip_model_load=True)
        state = make_state(loaded)
        outputs = [predict(loaded, {}, state=state)["y"].tolist() for _ in range(3)]
        assert outputs == [[step * k] * 2 for k in (1, 2, 3)]
        np.testing.assert_array_equal(state.read_state("s"), [3 * step] * 2)
    with pytest.raises(ValueError, match="the state was made for function 'dec', not 'inc'"):
        inc = ct.models.MLModel(str(tmp_path / "multi.mlpackage"), function_name="inc", skip_model_load=True)
        predict(inc, {}, state=state)
